-- payflow: limits on a step across every worker (issue 27).
--
-- The legacy DBMS behind PROCESS_PAYMENT takes minutes per call and falls
-- over when too many sessions arrive at once; PAYFLOW_CONCURRENCY limits
-- one process only, and ten tasks of ten executors open a hundred
-- sessions.  The database sees every claim, so it enforces the limit
-- exactly: set_step_limit caps how many attempts of a step run at once
-- (and per tenant), and how many start per second.  A claim beyond it
-- answers {"action": "limited", "reason", "retryAfterSeconds"} before
-- anything changes: no attempt is used, and the worker hands the message
-- back to its queue for that long (ChangeMessageVisibility) instead of
-- holding an executor.
--
-- How it stays exact: every claim of a limited step first locks the
-- step's step_limits row (claim_step and claim_steps take it before any
-- operation's row, so the order of locks is always the same), counts the
-- attempts running, and records its own in step_slots before it commits.
-- A slot counts while its operation still runs that step under a live
-- lease (or its request was sent for the slot and not claimed yet:
-- step_dispatch.sql), so an attempt that ended, failed, or whose worker
-- died (its lease expired) frees its slot by itself; the claims delete such slots as they
-- go.  Steps without a limit take none of this: one index probe says so.

CREATE TABLE IF NOT EXISTS payflow.step_limits (
	step_name text COLLATE "C" PRIMARY KEY CHECK (step_name ~ '^[A-Z][A-Z0-9_]{0,63}$'),
	max_running integer NOT NULL CHECK (max_running >= 1),
	max_running_per_tenant integer CHECK (max_running_per_tenant >= 1),
	per_second numeric CHECK (per_second > 0),
	-- the rate's bucket: up to max(per_second, 1) claims, refilled per_second a second
	tokens numeric NOT NULL DEFAULT 0,
	refilled_at timestamptz NOT NULL DEFAULT now(),
	-- how long an attempt of the step runs, a moving average of those that
	-- ended (NULL until one did): what a claim over the limit is told to wait
	avg_run_seconds numeric,
	updated_by text NOT NULL DEFAULT session_user,
	updated_at timestamptz NOT NULL DEFAULT now()
);

-- The attempts of limited steps that were admitted, one row per claim.
CREATE TABLE IF NOT EXISTS payflow.step_slots (
	step_name text COLLATE "C" NOT NULL,
	operation_id text COLLATE "C" NOT NULL,
	tenant text COLLATE "C" NOT NULL,
	claimed_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (step_name, operation_id)
);

-- How long a claim over max_running (or the tenant's) is told to wait: the
-- time between two slots freeing, on average (an attempt's run time over
-- the slots), 1 to 60 seconds; 5 until an attempt of the step has ended.
-- Short enough that a freed slot is not left idle long, long enough that
-- a full step of 15-minute calls is not polled every second by every
-- message that waits (measured in step_limits.sh: with a fixed 5 s, calls
-- of 1 s under a limit of 5 ran at 1/s instead of 5/s).
CREATE OR REPLACE FUNCTION payflow._step_limit_retry_seconds(l payflow.step_limits) RETURNS integer
	LANGUAGE sql IMMUTABLE
	AS $$ SELECT CASE WHEN l.avg_run_seconds IS NULL THEN 5
					  ELSE greatest(1, least(60, ceil(l.avg_run_seconds / l.max_running)))::integer END $$;

-- Whether a step has a limit or a breaker.  PL/pgSQL, whose plan is kept:
-- it runs at every claim.
CREATE OR REPLACE FUNCTION payflow._step_limited(p_step text) RETURNS boolean
	LANGUAGE plpgsql STABLE
	SET plan_cache_mode = force_generic_plan	-- as _step_bound
	AS $$
BEGIN
	RETURN EXISTS (SELECT FROM payflow.step_limits l WHERE l.step_name = p_step)
		   OR EXISTS (SELECT FROM payflow.step_breakers b WHERE b.step_name = p_step);	-- (step_breakers.sql)
END
$$;

-- Serialises the claims of a limited step (see above) and of a step with a
-- breaker; does nothing for a step with neither.  Taken before any
-- operation's row.
CREATE OR REPLACE FUNCTION payflow._lock_step_limit(p_step text) RETURNS void
	LANGUAGE plpgsql VOLATILE
	AS $$
BEGIN
	PERFORM FROM payflow.step_limits l WHERE l.step_name = p_step FOR UPDATE;
	PERFORM FROM payflow.step_breakers b WHERE b.step_name = p_step FOR UPDATE;
END
$$;

-- A batch claim's first statement on a step (claim_steps): 42501 unless
-- the login may act on the step (_require_step_role), then it locks the
-- step's limit and breaker rows, as _lock_step_limit, and says what the
-- batch needs from them: 'none' (neither: nothing to enforce), 'admitted'
-- (no breaker, every item holds the slot its request was sent with, and
-- the rate, if any, has a token for each, spent here) or 'admit' (the
-- admission item by item: _admit_step_claims, then _record_step_slots).
-- 'admitted' is the common case under a limit (step_dispatch.sql sends a
-- request only with a slot), and costs the two locks and one look at the
-- items' slots: the admission's statements cost a batch claim 1.2x one
-- without a limit (step_limit_claims.sh).  An item that holds a slot and
-- is answered "busy" (a message delivered twice) spends a token too: the
-- rate can only come out lower than set, never higher.
CREATE OR REPLACE FUNCTION payflow._gate_step_claims(p_step text, p_ids text[]) RETURNS text
	LANGUAGE plpgsql VOLATILE
	SET plan_cache_mode = force_generic_plan	-- as _step_limited
	AS $$
DECLARE
	l payflow.step_limits;
	v_tokens numeric;
	v_items integer;
	r record;
BEGIN
	-- The common case, a step with neither, in one statement with the role
	-- check: three statements in two functions cost a claim some 20 us.
	-- The locks come after it (no row to lock: nothing was to wait for).
	SELECT a.role_ok, EXISTS (SELECT FROM payflow.step_limits x WHERE x.step_name = p_step) AS limited,
		   EXISTS (SELECT FROM payflow.step_breakers b WHERE b.step_name = p_step) AS breaker
	  INTO r
	  FROM payflow._step_access(p_step) a;
	IF NOT r.role_ok THEN
		PERFORM payflow._require_step_role(p_step);		-- (its 42501)
	ELSIF NOT r.limited AND NOT r.breaker THEN
		RETURN 'none';
	END IF;
	SELECT * INTO l FROM payflow.step_limits x WHERE x.step_name = p_step FOR UPDATE;
	PERFORM FROM payflow.step_breakers b WHERE b.step_name = p_step FOR UPDATE;	-- (step_breakers.sql)
	IF FOUND THEN
		RETURN 'admit';
	ELSIF l.step_name IS NULL THEN
		RETURN 'none';
	END IF;
	SELECT count(DISTINCT x.id) INTO v_items FROM unnest(p_ids) x(id);
	IF (SELECT count(*) FROM payflow.step_slots s WHERE s.step_name = p_step AND s.operation_id = ANY (p_ids))
	   < v_items THEN
		RETURN 'admit';
	END IF;
	IF l.per_second IS NOT NULL THEN
		v_tokens := payflow._step_limit_tokens(l);
		IF v_tokens < v_items THEN
			RETURN 'admit';
		END IF;
		UPDATE payflow.step_limits x SET tokens = v_tokens - v_items, refilled_at = now() WHERE x.step_name = p_step;
	END IF;
	RETURN 'admitted';
END
$$;

-- The step's limit, after the slots whose attempt is over (done, failed,
-- waiting for a retry, lease expired, purged) were deleted: they free
-- themselves, and their run times (up to now: an upper bound) feed the
-- average.  Only p_ids' slots when given (an attempt's end frees its own:
-- _slot_freed).  NULL fields when the step has no limit.  The caller holds
-- the step_limits row (_lock_step_limit), or passes p_average false: then
-- the row is written only when the average moves by a second or a fifth,
-- and not at all while a claim holds it.
--
-- A sweep probes the operation of every slot, so claims and dispatches
-- count the slots first and sweep only when the count says the limit is
-- reached: slots are deleted as attempts end, and what is left behind
-- (a worker that died, a cancel) waits for that moment.  Sweeping at
-- every claim cost a probe per slot, a claim (3.9x a claim without a
-- limit with 2,000 requests sent at once, step_limit_claims.sh).
CREATE OR REPLACE FUNCTION payflow._sweep_step_slots(p_step text, p_ids text[] DEFAULT NULL,
													p_average boolean DEFAULT true)
	RETURNS payflow.step_limits
	LANGUAGE plpgsql VOLATILE
	-- an index scan, which marks the entries of deleted slots dead as it
	-- passes them: a bitmap scan does not, and read every slot deleted
	-- since the last vacuum at every claim (2,000 after 2,000 claims)
	SET enable_bitmapscan = off
	AS $$
DECLARE
	l payflow.step_limits;
	v_ended numeric;
BEGIN
	SELECT * INTO l FROM payflow.step_limits x WHERE x.step_name = p_step;
	IF NOT FOUND THEN
		RETURN l;
	END IF;
	WITH gone AS (
		DELETE FROM payflow.step_slots s
		 WHERE s.step_name = p_step AND (p_ids IS NULL OR s.operation_id = ANY (p_ids))
		   AND NOT EXISTS (SELECT FROM payflow.operations r
						    WHERE r.id = s.operation_id AND r.current_step = p_step
							  AND ((r.step_status = 'RUNNING' AND r.step_lease_expires_at > now())
								   -- its request sent for the slot, not claimed yet (step_dispatch.sql)
								   OR (r.step_status = 'PENDING' AND r.held_step IS NULL)))
		RETURNING extract(epoch FROM clock_timestamp() - s.claimed_at)::numeric AS seconds
	)
	SELECT avg(g.seconds) INTO v_ended FROM gone g;
	-- without the row (p_average false): the average only when it moves by
	-- what a wait told in whole seconds can show, and only if no claim
	-- holds the row (SKIP LOCKED; the caller's own lock does not stop it)
	IF v_ended IS NOT NULL
	   AND (p_average OR l.avg_run_seconds IS NULL
			OR abs(v_ended - l.avg_run_seconds) > greatest(0.2 * l.avg_run_seconds, 1)) THEN
		UPDATE payflow.step_limits x
		   SET avg_run_seconds = round(coalesce(0.8 * x.avg_run_seconds + 0.2 * v_ended, v_ended), 3)
		 WHERE x.ctid = (SELECT y.ctid FROM payflow.step_limits y WHERE y.step_name = p_step FOR UPDATE SKIP LOCKED)
		RETURNING * INTO l;
	END IF;
	RETURN l;
END
$$;

-- The rate bucket's tokens now (refilled since the last claim), or NULL
-- for a limit without a rate.
CREATE OR REPLACE FUNCTION payflow._step_limit_tokens(l payflow.step_limits) RETURNS numeric
	LANGUAGE sql STABLE
	AS $$ SELECT CASE WHEN l.per_second IS NOT NULL
					  THEN least(greatest(l.per_second, 1),
								 l.tokens + extract(epoch FROM now() - l.refilled_at)::numeric * l.per_second) END $$;

-- Admits the claim of operation o's open step p_step under its breaker and
-- its limit, and records its slot: NULL.  Else the "limited" answer, and
-- nothing changed.  The caller holds the step's rows (_lock_step_limit).
CREATE OR REPLACE FUNCTION payflow._take_step_slot(o payflow.operations, p_step text) RETURNS jsonb
	LANGUAGE plpgsql VOLATILE
	-- an index scan, which marks the entries of deleted slots dead as it
	-- passes them: a bitmap scan does not, and read every slot deleted
	-- since the last vacuum at every claim (2,000 after 2,000 claims)
	SET enable_bitmapscan = off
	AS $$
DECLARE
	g record := payflow._breaker_gate(p_step);
	l payflow.step_limits;
	v_running integer;
	v_tenant_running integer;
	v_tokens numeric;
BEGIN
	IF g.allowed = 0 THEN
		RETURN g.answer;
	END IF;
	SELECT * INTO l FROM payflow.step_limits x WHERE x.step_name = p_step;
	IF l.step_name IS NULL THEN
		IF g.present THEN
			PERFORM payflow._breaker_admitted(p_step, ARRAY[o.id]);
		END IF;
		RETURN NULL;
	END IF;
	IF EXISTS (SELECT FROM payflow.step_slots s WHERE s.step_name = p_step AND s.operation_id = o.id) THEN
		-- It holds a slot: its request was sent with it (step_dispatch.sql), or
		-- this takes over its own attempt.  Every count includes it already.
		v_running := 0;
		v_tenant_running := 0;
	ELSE
		SELECT count(*), count(*) FILTER (WHERE s.tenant = o.tenant) INTO v_running, v_tenant_running
		  FROM payflow.step_slots s WHERE s.step_name = p_step;
		IF v_running >= l.max_running OR v_tenant_running >= l.max_running_per_tenant THEN
			-- at the limit by the count: sweep the slots left behind, count again
			l := payflow._sweep_step_slots(p_step);
			SELECT count(*), count(*) FILTER (WHERE s.tenant = o.tenant) INTO v_running, v_tenant_running
			  FROM payflow.step_slots s WHERE s.step_name = p_step;
		END IF;
	END IF;
	IF v_running >= l.max_running THEN
		RETURN jsonb_build_object('action', 'limited', 'reason', 'max_running', 'running', v_running,
								  'retryAfterSeconds', payflow._step_limit_retry_seconds(l));
	ELSIF v_tenant_running >= l.max_running_per_tenant THEN
		RETURN jsonb_build_object('action', 'limited', 'reason', 'max_running_per_tenant', 'running', v_tenant_running,
								  'retryAfterSeconds', payflow._step_limit_retry_seconds(l));
	END IF;
	IF l.per_second IS NOT NULL THEN
		v_tokens := payflow._step_limit_tokens(l);
		IF v_tokens < 1 THEN
			RETURN jsonb_build_object('action', 'limited', 'reason', 'per_second',
									  'retryAfterSeconds', greatest(1, ceil((1 - v_tokens) / l.per_second))::integer);
		END IF;
		UPDATE payflow.step_limits x SET tokens = v_tokens - 1, refilled_at = now() WHERE x.step_name = p_step;
	END IF;
	-- a slot it holds keeps its time: the slot is taken from when its
	-- request was sent, which is what the average of how long one is held
	-- wants (and no write of the row)
	INSERT INTO payflow.step_slots (step_name, operation_id, tenant) VALUES (p_step, o.id, o.tenant)
	ON CONFLICT (step_name, operation_id) DO NOTHING;
	IF g.present THEN
		PERFORM payflow._breaker_admitted(p_step, ARRAY[o.id]);
	END IF;
	RETURN NULL;
END
$$;

-- A batch claim of a step with a limit or a breaker (claim_steps), decided once for the
-- batch as _take_step_slot decides one claim: of p_ids, the operations
-- whose step can be claimed now (PENDING, or a retry that is due), in
-- their order, each admitted (answer NULL) or answered "limited".  One
-- sweep and one count for the batch: taking each item through the full
-- claim cost 5.5x a batch claim without a limit (step_limit_claims.sh).
-- The caller holds the step_limits row and records the slots of the
-- operations it then claims (_record_step_slots); the rate's tokens are
-- spent here.
CREATE OR REPLACE FUNCTION payflow._admit_step_claims(p_step text, p_ids text[])
	RETURNS TABLE (operation_id text, answer jsonb)
	LANGUAGE plpgsql VOLATILE
	SET enable_bitmapscan = off		-- as _sweep_step_slots
	AS $$
DECLARE
	g record := payflow._breaker_gate(p_step);
	l payflow.step_limits;
	c record;
	v_running integer;
	v_tenants jsonb := '{}'::jsonb;		-- tenant -> its running slots, as counted (and admitted) so far
	v_tenant_running integer;
	v_tokens numeric;
	v_retry integer;
	v_admitted text[] := '{}'::text[];
	v_tenant_most integer;
	v_held text[] := '{}'::text[];	-- the items that hold a slot already
	v_holds boolean;
	v_new integer;
BEGIN
	SELECT * INTO l FROM payflow.step_limits x WHERE x.step_name = p_step;
	IF l.step_name IS NOT NULL THEN
		-- An item that holds a slot (its request was sent with it:
		-- step_dispatch.sql) is admitted without a count, which includes it
		-- already; the others count every slot.
		SELECT coalesce(array_agg(s.operation_id), '{}'::text[]) INTO v_held
		  FROM payflow.step_slots s WHERE s.step_name = p_step AND s.operation_id = ANY (p_ids);
		v_new := (SELECT count(DISTINCT x.id) FROM unnest(p_ids) x(id) WHERE x.id <> ALL (v_held));
		FOR v_sweep IN 0 .. 1 LOOP
			EXIT WHEN v_new = 0;
			IF v_sweep = 1 THEN
				l := payflow._sweep_step_slots(p_step);
			END IF;
			SELECT count(*)::integer INTO v_running FROM payflow.step_slots s WHERE s.step_name = p_step;
			IF l.max_running_per_tenant IS NOT NULL THEN
				SELECT max(t.n) INTO v_tenant_most
				  FROM (SELECT count(*)::integer AS n FROM payflow.step_slots x
						 WHERE x.step_name = p_step GROUP BY x.tenant) t;
			END IF;
			-- room for the whole batch by the count: no sweep (see _sweep_step_slots)
			EXIT WHEN v_running + v_new <= l.max_running
				  AND (l.max_running_per_tenant IS NULL
					   OR coalesce(v_tenant_most, 0) + v_new <= l.max_running_per_tenant);
		END LOOP;
		v_retry := payflow._step_limit_retry_seconds(l);
		v_tokens := payflow._step_limit_tokens(l);
	END IF;
	FOR c IN
		SELECT o.id, o.tenant
		  FROM (SELECT x.id, min(x.n) AS n FROM unnest(p_ids) WITH ORDINALITY AS x(id, n) GROUP BY x.id) u
		  -- a probe per id (LIMIT 1 keeps it one): planned on a table that was
		  -- empty, a join walked every operation in flight (4 ms a batch of
		  -- ten with 2,000 in flight; step_limit_claims.sh)
		  CROSS JOIN LATERAL (
			SELECT o.id, o.tenant FROM payflow.operations o
			 WHERE o.id = u.id AND o.current_step = p_step AND o.terminal_at IS NULL
			   AND (o.step_status = 'PENDING' OR (o.step_status = 'RETRY_WAIT' AND o.step_next_attempt_at <= now()))
			 LIMIT 1) o
		 ORDER BY u.n
	LOOP
		operation_id := c.id;
		IF cardinality(v_admitted) >= g.allowed THEN
			-- the breaker's: open, or its probes taken
			answer := g.answer;
			RETURN NEXT;
			CONTINUE;
		END IF;
		-- one that holds its slot: only the rate (and the breaker above) may refuse it
		v_holds := c.id = ANY (v_held);
		IF l.max_running_per_tenant IS NOT NULL AND NOT v_holds AND NOT v_tenants ? c.tenant THEN
			v_tenants := v_tenants || jsonb_build_object(c.tenant,
				(SELECT count(*) FROM payflow.step_slots s WHERE s.step_name = p_step AND s.tenant = c.tenant));
		END IF;
		v_tenant_running := CASE WHEN NOT v_holds THEN (v_tenants ->> c.tenant)::integer END;
		IF v_running >= l.max_running AND NOT v_holds THEN
			answer := jsonb_build_object('action', 'limited', 'reason', 'max_running', 'running', v_running,
										 'retryAfterSeconds', v_retry);
		ELSIF v_tenant_running >= l.max_running_per_tenant THEN
			answer := jsonb_build_object('action', 'limited', 'reason', 'max_running_per_tenant',
										 'running', v_tenant_running, 'retryAfterSeconds', v_retry);
		ELSIF l.per_second IS NOT NULL AND v_tokens < 1 THEN
			answer := jsonb_build_object('action', 'limited', 'reason', 'per_second',
										 'retryAfterSeconds', greatest(1, ceil((1 - v_tokens) / l.per_second))::integer);
		ELSE
			answer := NULL;
			v_admitted := v_admitted || c.id;
			v_running := v_running + CASE WHEN v_holds THEN 0 ELSE 1 END;
			IF v_tenant_running IS NOT NULL THEN
				v_tenants := jsonb_set(v_tenants, ARRAY[c.tenant], to_jsonb(v_tenant_running + 1));
			END IF;
			v_tokens := v_tokens - 1;
		END IF;
		RETURN NEXT;
	END LOOP;
	IF l.per_second IS NOT NULL THEN
		UPDATE payflow.step_limits x SET tokens = v_tokens, refilled_at = now() WHERE x.step_name = p_step;
	END IF;
	IF g.present THEN
		PERFORM payflow._breaker_admitted(p_step, v_admitted);
	END IF;
END
$$;

-- The slots of the claims a batch made under its step's limit.
CREATE OR REPLACE FUNCTION payflow._record_step_slots(p_step text, p_ids text[]) RETURNS void
	LANGUAGE plpgsql VOLATILE
	AS $$
BEGIN
	-- (a step with a breaker and no limit keeps no slots: nothing would sweep them)
	INSERT INTO payflow.step_slots (step_name, operation_id, tenant)
	SELECT p_step, o.id, o.tenant FROM payflow.operations o
	 WHERE o.id = ANY (p_ids) AND EXISTS (SELECT FROM payflow.step_limits l WHERE l.step_name = p_step)
	ON CONFLICT (step_name, operation_id) DO NOTHING;	-- (as _take_step_slot's)
END
$$;

-- Sets a step's limits (replacing any): at most max_running attempts at
-- once across every worker, at most max_running_per_tenant of one tenant,
-- at most per_second claims a second.  Returns the limit as stored.
CREATE OR REPLACE FUNCTION payflow.set_step_limit(step_name text, max_running integer,
												  max_running_per_tenant integer DEFAULT NULL,
												  per_second numeric DEFAULT NULL)
	RETURNS jsonb
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	d payflow.step_definitions := payflow._step_definition(step_name);	-- 22023 for an unknown step
	l payflow.step_limits;
	v_old payflow.step_limits;
BEGIN
	IF max_running IS NULL THEN
		RAISE EXCEPTION 'max_running must not be null' USING ERRCODE = 'null_value_not_allowed',
			HINT = 'payflow.clear_step_limit() removes a limit.';
	ELSIF max_running < 1 THEN
		RAISE EXCEPTION 'max_running must be at least 1' USING ERRCODE = 'invalid_parameter_value',
			DETAIL = format('Got %s.', max_running);
	ELSIF max_running_per_tenant < 1 THEN
		RAISE EXCEPTION 'max_running_per_tenant must be at least 1' USING ERRCODE = 'invalid_parameter_value',
			DETAIL = format('Got %s.', max_running_per_tenant);
	ELSIF per_second <= 0 OR per_second = 'NaN'::numeric THEN
		RAISE EXCEPTION 'per_second must be positive' USING ERRCODE = 'invalid_parameter_value',
			DETAIL = format('Got %s.', per_second);
	END IF;
	SELECT * INTO v_old FROM payflow.step_limits x WHERE x.step_name = d.step_name FOR UPDATE;
	INSERT INTO payflow.step_limits AS x (step_name, max_running, max_running_per_tenant, per_second, tokens)
	VALUES (d.step_name, max_running, max_running_per_tenant, per_second, greatest(coalesce(per_second, 1), 1))
	ON CONFLICT ON CONSTRAINT step_limits_pkey DO UPDATE
	   SET max_running = EXCLUDED.max_running, max_running_per_tenant = EXCLUDED.max_running_per_tenant,
		   per_second = EXCLUDED.per_second, updated_by = session_user, updated_at = now()
	RETURNING * INTO l;
	IF l.max_running < v_old.max_running
	   OR l.max_running_per_tenant < coalesce(v_old.max_running_per_tenant, 2147483647) THEN
		-- Lowered: the slots of requests sent and not claimed yet go, so that
		-- their claims count against the new limit (a claim that holds a slot
		-- is admitted without a count).  Running attempts keep theirs.
		DELETE FROM payflow.step_slots s
		 WHERE s.step_name = l.step_name
		   AND NOT EXISTS (SELECT FROM payflow.operations r
							WHERE r.id = s.operation_id AND r.current_step = l.step_name
							  AND r.step_status = 'RUNNING' AND r.step_lease_expires_at > now());
	END IF;
	RETURN jsonb_strip_nulls(jsonb_build_object('step', l.step_name, 'maxRunning', l.max_running,
												'maxRunningPerTenant', l.max_running_per_tenant,
												'perSecond', l.per_second));
END
$$;

-- Removes a step's limits; true if it had some.
CREATE OR REPLACE FUNCTION payflow.clear_step_limit(step_name text) RETURNS boolean
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
BEGIN
	PERFORM payflow._step_definition(step_name);	-- 22023 for an unknown step
	DELETE FROM payflow.step_limits l WHERE l.step_name = clear_step_limit.step_name;
	IF NOT FOUND THEN
		RETURN false;
	END IF;
	DELETE FROM payflow.step_slots s WHERE s.step_name = clear_step_limit.step_name;
	-- what waited for a slot goes to its queue now (step_dispatch.sql)
	PERFORM payflow._release_held(clear_step_limit.step_name);
	RETURN true;
END
$$;

REVOKE ALL ON FUNCTION payflow._step_limit_retry_seconds(payflow.step_limits), payflow._step_limited(text),
	payflow._lock_step_limit(text), payflow._gate_step_claims(text, text[]),
	payflow._take_step_slot(payflow.operations, text),
	payflow._sweep_step_slots(text, text[], boolean), payflow._step_limit_tokens(payflow.step_limits),
	payflow._admit_step_claims(text, text[]), payflow._record_step_slots(text, text[]),
	payflow.set_step_limit(text, integer, integer, numeric), payflow.clear_step_limit(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION payflow.set_step_limit(text, integer, integer, numeric), payflow.clear_step_limit(text)
	TO payflow_admin;
