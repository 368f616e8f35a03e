-- payflow: a circuit breaker per step (issue 27).
--
-- When the legacy DBMS behind a step is failing, every retry adds load to
-- a system that is already down.  A breaker watches the step's attempts:
-- when, within a window, at least min_calls claims were made and the
-- attempts that failed for reasons of the back end's health (a retryable
-- error, a lease that expired, an outcome left unknown) reach
-- failure_ratio of them, it OPENs: claims answer {"action": "limited",
-- "reason": "breaker_open", "retryAfterSeconds": n} for cooldown_seconds,
-- the worker hands the message back to its queue, and the operations wait
-- (they are not failed; their deadlines still apply).  Then it is
-- HALF_OPEN: `probes` claims go through; when they all succeed it CLOSEs,
-- when one fails it OPENs again.  A permanent error (a declined card) says
-- nothing of the back end's health and does not count.
--
-- The whole state machine runs in the claims, under the step's breaker
-- row, which a claim locks before any operation's row (as step_limits'):
-- failures are read from step_attempts (written anyway, by the attempt's
-- end), so a failing attempt takes no lock of the breaker and the order of
-- locks stays claim -> breaker -> operation everywhere.  Steps without a
-- breaker take none of this.  Every change of state is a row of
-- step_breaker_events, for operators (metrics(), the console).

CREATE TABLE IF NOT EXISTS payflow.step_breakers (
	step_name text COLLATE "C" PRIMARY KEY CHECK (step_name ~ '^[A-Z][A-Z0-9_]{0,63}$'),
	failure_ratio numeric NOT NULL CHECK (failure_ratio > 0 AND failure_ratio <= 1),
	min_calls integer NOT NULL CHECK (min_calls >= 1),
	window_seconds integer NOT NULL CHECK (window_seconds >= 1),
	cooldown_seconds integer NOT NULL CHECK (cooldown_seconds >= 1),
	probes integer NOT NULL CHECK (probes >= 1),
	state text NOT NULL DEFAULT 'CLOSED' CHECK (state IN ('CLOSED', 'OPEN', 'HALF_OPEN')),
	changed_at timestamptz NOT NULL DEFAULT now(),
	-- CLOSED: the claims made since window_started_at (a tumbling window)
	window_started_at timestamptz NOT NULL DEFAULT now(),
	calls integer NOT NULL DEFAULT 0,
	-- HALF_OPEN: the operations whose claims are the probes
	probe_ops text[] NOT NULL DEFAULT '{}',
	opened_total bigint NOT NULL DEFAULT 0,
	updated_by text NOT NULL DEFAULT session_user,
	updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE IF NOT EXISTS payflow.step_breaker_events (
	id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	step_name text COLLATE "C" NOT NULL,
	at timestamptz NOT NULL DEFAULT now(),
	state text NOT NULL,
	reason text NOT NULL
);

-- The failed attempts of a step by time, for its breaker.  Attempts that
-- fail are few (step_attempts has no row for a success), so this index
-- costs the common path nothing.
-- on the default partition, which every day's partition copies (partitions.sql)
CREATE INDEX IF NOT EXISTS step_attempts_step_idx ON payflow.step_attempts_default (step_name, finished_at);

-- Whether an ended attempt says the back end is unwell.
CREATE OR REPLACE FUNCTION payflow._breaker_failure(a payflow.step_attempts) RETURNS boolean
	LANGUAGE sql IMMUTABLE
	AS $$ SELECT a.outcome IN ('RETRY_WAIT', 'lease_expired')
				 OR (a.outcome = 'FAILED' AND a.error ->> 'code' IN ('lease_expired', 'outcome_unknown')) $$;

-- Moves a breaker to a state, with its event.
CREATE OR REPLACE FUNCTION payflow._breaker_move(p_step text, p_state text, p_reason text)
	RETURNS payflow.step_breakers
	LANGUAGE plpgsql VOLATILE
	AS $$
DECLARE
	b payflow.step_breakers;
BEGIN
	UPDATE payflow.step_breakers x
	   SET state = p_state, changed_at = now(), probe_ops = '{}',
		   opened_total = x.opened_total + CASE WHEN p_state = 'OPEN' THEN 1 ELSE 0 END,
		   window_started_at = CASE WHEN p_state = 'CLOSED' THEN now() ELSE x.window_started_at END,
		   calls = CASE WHEN p_state = 'CLOSED' THEN 0 ELSE x.calls END
	 WHERE x.step_name = p_step
	RETURNING * INTO b;
	-- when the move took effect for claims: an opening from the moment it is
	-- made (a claim admitted before it started earlier still: it held the
	-- row first), a half-opening or a closing as of the claim that made it
	INSERT INTO payflow.step_breaker_events (step_name, at, state, reason)
	VALUES (p_step, CASE WHEN p_state = 'OPEN' THEN clock_timestamp() ELSE now() END, p_state, p_reason);
	RETURN b;
END
$$;

-- What a step's breaker lets through now: present false when the step has
-- none; else allowed (NULL: every claim; 0: none, and answer says why and
-- for how long; n: n probes).  Moves the breaker as time and the attempts
-- say.  The caller holds the breaker row (_lock_step_limit) and then
-- reports the claims it admitted (_breaker_admitted).
CREATE OR REPLACE FUNCTION payflow._breaker_gate(p_step text, OUT present boolean, OUT allowed integer,
												 OUT answer jsonb)
	LANGUAGE plpgsql VOLATILE
	AS $$
DECLARE
	b payflow.step_breakers;
	v_failures integer;
	v_succeeded text[];
	v_running text[];
BEGIN
	SELECT * INTO b FROM payflow.step_breakers x WHERE x.step_name = p_step;
	present := FOUND;
	IF NOT present THEN
		RETURN;
	END IF;
	IF b.state = 'CLOSED' THEN
		IF now() - b.window_started_at >= make_interval(secs => b.window_seconds) THEN
			UPDATE payflow.step_breakers x SET window_started_at = now(), calls = 0
			 WHERE x.step_name = p_step
			RETURNING * INTO b;
		END IF;
		SELECT count(*) FILTER (WHERE payflow._breaker_failure(a)) INTO v_failures
		  FROM payflow.step_attempts a
		 WHERE a.step_name = p_step AND a.finished_at >= b.window_started_at;
		IF b.calls >= b.min_calls AND v_failures >= b.failure_ratio * b.calls THEN
			b := payflow._breaker_move(p_step, 'OPEN',
									   format('%s of %s attempts failed since %s', v_failures, b.calls,
											  payflow._iso(b.window_started_at)));
		END IF;
	END IF;
	IF b.state = 'CLOSED' THEN
		RETURN;						-- allowed NULL: every claim
	END IF;
	IF b.state = 'OPEN' THEN
		IF now() < b.changed_at + make_interval(secs => b.cooldown_seconds) THEN
			allowed := 0;
			answer := jsonb_build_object('action', 'limited', 'reason', 'breaker_open',
				'retryAfterSeconds',
				greatest(1, ceil(extract(epoch FROM b.changed_at + make_interval(secs => b.cooldown_seconds) - now())))::integer);
			RETURN;
		END IF;
		b := payflow._breaker_move(p_step, 'HALF_OPEN', 'cool-down over');
	END IF;
	-- HALF_OPEN: a probe that failed opens it again, probes that all
	-- succeeded close it; probes whose claim did not happen or ended are
	-- let go
	IF EXISTS (SELECT FROM payflow.step_attempts a
				WHERE a.step_name = p_step AND a.finished_at >= b.changed_at AND a.started_at >= b.changed_at
				  AND payflow._breaker_failure(a)) THEN
		b := payflow._breaker_move(p_step, 'OPEN', 'a probe failed');
		allowed := 0;
		answer := jsonb_build_object('action', 'limited', 'reason', 'breaker_open', 'retryAfterSeconds', b.cooldown_seconds);
		RETURN;
	END IF;
	SELECT coalesce(array_agg(r.operation_id), '{}') INTO v_succeeded
	  FROM payflow.step_results r
	 WHERE r.operation_id = ANY (b.probe_ops) AND r.step_name = p_step;
	IF cardinality(v_succeeded) >= b.probes THEN
		b := payflow._breaker_move(p_step, 'CLOSED', format('%s probe(s) succeeded', cardinality(v_succeeded)));
		RETURN;						-- allowed NULL: every claim
	END IF;
	SELECT coalesce(array_agg(o.id), '{}') INTO v_running
	  FROM payflow.operations o
	 WHERE o.id = ANY (b.probe_ops) AND o.current_step = p_step AND o.step_status = 'RUNNING'
	   AND o.step_lease_expires_at > now();
	UPDATE payflow.step_breakers x SET probe_ops = v_succeeded || v_running WHERE x.step_name = p_step;
	allowed := greatest(b.probes - cardinality(v_succeeded) - cardinality(v_running), 0);
	answer := jsonb_build_object('action', 'limited', 'reason', 'breaker_half_open',
								 'retryAfterSeconds', least(b.cooldown_seconds, 5));
END
$$;

-- The claims a breaker's gate let through: counted in its window, and the
-- probes while HALF_OPEN.
CREATE OR REPLACE FUNCTION payflow._breaker_admitted(p_step text, p_ids text[]) RETURNS void
	LANGUAGE plpgsql VOLATILE
	AS $$
BEGIN
	UPDATE payflow.step_breakers x
	   SET calls = x.calls + cardinality(p_ids),
		   probe_ops = CASE WHEN x.state = 'HALF_OPEN' THEN x.probe_ops || p_ids ELSE x.probe_ops END
	 WHERE x.step_name = p_step;
END
$$;

-- Sets a step's breaker (replacing its thresholds; its state stays).
-- Returns the breaker as stored.
CREATE OR REPLACE FUNCTION payflow.set_step_breaker(step_name text, failure_ratio numeric DEFAULT 0.5,
													min_calls integer DEFAULT 10, window_seconds integer DEFAULT 60,
													cooldown_seconds integer DEFAULT 30, probes integer DEFAULT 1)
	RETURNS jsonb
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	d payflow.step_definitions := payflow._step_definition(step_name);	-- 22023 for an unknown step
	b payflow.step_breakers;
BEGIN
	IF failure_ratio IS NULL OR min_calls IS NULL OR window_seconds IS NULL OR cooldown_seconds IS NULL
	   OR probes IS NULL THEN
		RAISE EXCEPTION 'the breaker''s settings must not be null' USING ERRCODE = 'null_value_not_allowed',
			HINT = 'payflow.clear_step_breaker() removes a breaker.';
	ELSIF NOT (failure_ratio > 0 AND failure_ratio <= 1) THEN
		RAISE EXCEPTION 'failure_ratio must be above 0 and at most 1' USING ERRCODE = 'invalid_parameter_value',
			DETAIL = format('Got %s.', failure_ratio);
	ELSIF min_calls < 1 OR window_seconds < 1 OR cooldown_seconds < 1 OR probes < 1 THEN
		RAISE EXCEPTION 'min_calls, window_seconds, cooldown_seconds and probes must be at least 1'
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = format('Got %s, %s, %s, %s.', min_calls, window_seconds, cooldown_seconds, probes);
	END IF;
	INSERT INTO payflow.step_breakers AS x (step_name, failure_ratio, min_calls, window_seconds, cooldown_seconds, probes)
	VALUES (d.step_name, failure_ratio, min_calls, window_seconds, cooldown_seconds, probes)
	ON CONFLICT ON CONSTRAINT step_breakers_pkey DO UPDATE
	   SET failure_ratio = EXCLUDED.failure_ratio, min_calls = EXCLUDED.min_calls,
		   window_seconds = EXCLUDED.window_seconds, cooldown_seconds = EXCLUDED.cooldown_seconds,
		   probes = EXCLUDED.probes, updated_by = session_user, updated_at = now()
	RETURNING * INTO b;
	RETURN jsonb_build_object('step', b.step_name, 'state', b.state, 'failureRatio', b.failure_ratio,
							  'minCalls', b.min_calls, 'windowSeconds', b.window_seconds,
							  'cooldownSeconds', b.cooldown_seconds, 'probes', b.probes);
END
$$;

-- Removes a step's breaker; true if it had one.  Its events stay.
CREATE OR REPLACE FUNCTION payflow.clear_step_breaker(step_name text) RETURNS boolean
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
BEGIN
	PERFORM payflow._step_definition(step_name);	-- 22023 for an unknown step
	DELETE FROM payflow.step_breakers b WHERE b.step_name = clear_step_breaker.step_name;
	RETURN FOUND;
END
$$;

REVOKE ALL ON FUNCTION payflow._breaker_failure(payflow.step_attempts),
	payflow._breaker_move(text, text, text), payflow._breaker_gate(text), payflow._breaker_admitted(text, text[]),
	payflow.set_step_breaker(text, numeric, integer, integer, integer, integer),
	payflow.clear_step_breaker(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION payflow.set_step_breaker(text, numeric, integer, integer, integer, integer),
	payflow.clear_step_breaker(text) TO payflow_admin;
