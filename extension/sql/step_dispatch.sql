-- payflow: the backlog of a limited step waits in the database, which
-- hands its slots out fairly and by priority (issue 27).
--
-- A step with a limit (step_limits.sql) can run max_running attempts at
-- once.  Were every request of it in its queue, a tenant's burst of 10,000
-- would sit in front of another tenant's ten, and SQS, not payflow, would
-- pick who runs next: claims could only refuse ("limited") and hand the
-- message back, over and over.  So the request of a limited step is not
-- sent when the step opens: the operation is held (operations.held_step)
-- and the database sends requests only while the step has a free slot, one
-- per slot, choosing among the held operations:
--
--   1. a higher priority first (submit's priority; 0 by default);
--   2. among equals, the tenant that holds the fewest of the step's slots
--      (the fair share: a tenant's first operation goes before another's
--      thousandth), skipping a tenant at max_running_per_tenant;
--   3. then the oldest.
--
-- The slot is taken when the request is sent (step_slots, as a claim takes
-- it), so the requests in flight never pass the limit and the claim that
-- follows is admitted.  Slots are handed out when one frees (a completion
-- or failure of the step, in its transaction), at submit when one is free,
-- and at each scheduler pass (a lease that expired, a limit raised, a
-- moment when the step's row was busy).  Each of these takes the step's
-- limit row with SKIP LOCKED and never waits: a claim holds that row while
-- it locks operations, so waiting for it here, holding an operation's row,
-- could deadlock; whoever skips leaves the slot to the next of them.
--
-- What a held operation looks like: status and step PENDING as before, no
-- event in the outbox, no message in any queue.  It is not stuck
-- (run_scheduler does not re-drive it, admin_stuck() does not list it); metrics() counts
-- the held operations of each limited step (steps.<step>.limit.held).
-- Priorities and fair shares apply where there is a backlog to order, so
-- only to limited steps: a step without a limit sends every request at
-- once, and its queue's order is SQS's.

-- Sends the requests of p_step's held operations while the step has free
-- slots, in the order above; returns how many it sent.  0 when the step has no limit, or when its row
-- is held by another session (which frees or takes slots itself).
CREATE OR REPLACE FUNCTION payflow._dispatch_held(p_step text) RETURNS integer
	LANGUAGE plpgsql VOLATILE
	SET enable_bitmapscan = off		-- as _sweep_step_slots
	AS $$
DECLARE
	l payflow.step_limits;
	c record;
	o payflow.operations;
	v_free integer;
	v_sent integer := 0;
	v_skip text[] := '{}'::text[];	-- candidates another session holds
	v_swept boolean := false;
BEGIN
	IF NOT EXISTS (SELECT FROM payflow.operations h WHERE h.held_step = p_step) THEN
		RETURN 0;					-- nothing waits (the common case of a completion)
	END IF;
	SELECT * INTO l FROM payflow.step_limits x WHERE x.step_name = p_step FOR UPDATE SKIP LOCKED;
	IF NOT FOUND THEN
		RETURN 0;
	END IF;
	v_free := l.max_running - (SELECT count(*)::integer FROM payflow.step_slots s WHERE s.step_name = p_step);
	IF v_free <= 0 THEN
		-- full by the count: sweep the slots left behind (_sweep_step_slots)
		l := payflow._sweep_step_slots(p_step);
		v_swept := true;
		v_free := l.max_running - (SELECT count(*)::integer FROM payflow.step_slots s WHERE s.step_name = p_step);
	END IF;
	WHILE v_sent < v_free LOOP
		-- The tenants with held operations (a skip scan of operations_held_idx),
		-- each with its best one and its slots; the best of those.  A query a
		-- slot: a few index probes per tenant, whatever the backlog.
		WITH RECURSIVE t(tenant) AS (
			(SELECT h.tenant FROM payflow.operations h WHERE h.held_step = p_step ORDER BY h.tenant LIMIT 1)
			UNION ALL
			SELECT (SELECT h.tenant FROM payflow.operations h
					 WHERE h.held_step = p_step AND h.tenant > t.tenant ORDER BY h.tenant LIMIT 1)
			  FROM t WHERE t.tenant IS NOT NULL
		)
		SELECT b.id, b.priority, k.slots INTO c
		  FROM t
		  CROSS JOIN LATERAL (SELECT count(*)::integer AS slots FROM payflow.step_slots s
							   WHERE s.step_name = p_step AND s.tenant = t.tenant) k
		  CROSS JOIN LATERAL (SELECT h.id, h.priority FROM payflow.operations h
							   WHERE h.held_step = p_step AND h.tenant = t.tenant AND h.id <> ALL (v_skip)
							   ORDER BY h.priority DESC, h.id LIMIT 1) b
		 WHERE t.tenant IS NOT NULL
		   AND (l.max_running_per_tenant IS NULL OR k.slots < l.max_running_per_tenant)
		 ORDER BY b.priority DESC, k.slots, b.id
		 LIMIT 1;
		IF NOT FOUND AND NOT v_swept AND l.max_running_per_tenant IS NOT NULL THEN
			-- every tenant at its cap by the count: sweep once, look again
			l := payflow._sweep_step_slots(p_step);
			v_swept := true;
			CONTINUE;
		END IF;
		EXIT WHEN NOT FOUND;
		SELECT * INTO o FROM payflow.operations h WHERE h.id = c.id FOR UPDATE SKIP LOCKED;
		IF NOT FOUND THEN
			-- another session holds it (a cancel, say): the next candidate
			v_skip := v_skip || c.id;
			CONTINUE;
		ELSIF o.held_step IS DISTINCT FROM p_step OR o.current_step <> p_step OR o.step_status <> 'PENDING'
			  OR o.terminal_at IS NOT NULL THEN
			-- no longer waits (ended some way that left the mark): unmark it
			UPDATE payflow.operations SET held_step = NULL WHERE id = o.id AND held_step = p_step;
			v_skip := v_skip || c.id;
			CONTINUE;
		END IF;
		UPDATE payflow.operations SET held_step = NULL, step_pending_since = now()
		 WHERE id = o.id
		RETURNING * INTO o;
		PERFORM payflow._emit_step_request(o);	-- (outbox.sql)
		INSERT INTO payflow.step_slots (step_name, operation_id, tenant) VALUES (p_step, o.id, o.tenant)
		ON CONFLICT (step_name, operation_id) DO UPDATE SET claimed_at = now();
		v_sent := v_sent + 1;
	END LOOP;
	RETURN v_sent;
END
$$;

-- Attempts of p_step ended (done, failed, a retry later) for p_ids: their
-- slots are deleted (those whose operation no longer runs the step: an
-- item refused, say, keeps its own) and go to the next held operations.
-- One index probe for a step without a limit.  Only with the step's row
-- when it is free (SKIP LOCKED, see above): the run times then feed the
-- average, and held operations get the slots.
CREATE OR REPLACE FUNCTION payflow._slot_freed(p_step text, p_ids text[]) RETURNS void
	LANGUAGE plpgsql VOLATILE
	AS $$
BEGIN
	IF NOT EXISTS (SELECT FROM payflow.step_limits l WHERE l.step_name = p_step) THEN
		RETURN;
	END IF;
	IF NOT EXISTS (SELECT FROM payflow.operations h WHERE h.held_step = p_step) THEN
		-- nothing waits: the slots go, without the step's row (its lock and
		-- the average at each completion cost 0.3 ms, 1.4x a completion
		-- without a limit: step_limit_claims.sh)
		PERFORM payflow._sweep_step_slots(p_step, p_ids, false);
		RETURN;
	END IF;
	PERFORM FROM payflow.step_limits x WHERE x.step_name = p_step FOR UPDATE SKIP LOCKED;
	IF FOUND THEN
		PERFORM payflow._sweep_step_slots(p_step, p_ids);
		PERFORM payflow._dispatch_held(p_step);
	ELSE
		-- a claim holds the row: the slots go, the held wait for the next
		PERFORM payflow._sweep_step_slots(p_step, p_ids, false);
	END IF;
END
$$;

-- Asks for operation o's open step to run (o PENDING, its row locked by
-- the caller): held for a slot when the step has a limit, then sent at
-- once if one is free and p_dispatch; else its request emitted.  For
-- retries that fall due and replays; submit and completions do the same
-- in their own statements.
CREATE OR REPLACE FUNCTION payflow._request_step(o payflow.operations, p_dispatch boolean) RETURNS void
	LANGUAGE plpgsql VOLATILE
	AS $$
BEGIN
	IF EXISTS (SELECT FROM payflow.step_limits l WHERE l.step_name = o.current_step) THEN
		UPDATE payflow.operations SET held_step = o.current_step WHERE id = o.id;
		IF p_dispatch THEN
			PERFORM payflow._dispatch_held(o.current_step);
		END IF;
	ELSE
		PERFORM payflow._emit_step_request(o);
	END IF;
END
$$;

-- Sends the request of every operation p_step holds, whatever its slots:
-- the step's limit is gone (clear_step_limit).  Returns how many.
CREATE OR REPLACE FUNCTION payflow._release_held(p_step text) RETURNS integer
	LANGUAGE plpgsql VOLATILE
	AS $$
DECLARE
	o payflow.operations;
	v_sent integer := 0;
BEGIN
	FOR o IN UPDATE payflow.operations h SET held_step = NULL, step_pending_since = now()
			  WHERE h.held_step = p_step
			  RETURNING h.*
	LOOP
		IF o.current_step = p_step AND o.step_status = 'PENDING' AND o.terminal_at IS NULL THEN
			PERFORM payflow._emit_step_request(o);
			v_sent := v_sent + 1;
		END IF;
	END LOOP;
	RETURN v_sent;
END
$$;

-- A priority as submit takes it: -100 (last) to 100 (first), 0 by default.
CREATE OR REPLACE FUNCTION payflow._require_priority(value integer) RETURNS smallint
	LANGUAGE plpgsql IMMUTABLE
	AS $$
BEGIN
	IF value IS NULL THEN
		RETURN 0;
	ELSIF value NOT BETWEEN -100 AND 100 THEN
		RAISE EXCEPTION 'priority must be between -100 and 100' USING ERRCODE = 'invalid_parameter_value',
			DETAIL = format('Got %s.', value),
			HINT = 'A higher priority runs first on a step with a limit; 0 is the default.';
	END IF;
	RETURN value::smallint;
END
$$;

REVOKE ALL ON FUNCTION payflow._dispatch_held(text), payflow._request_step(payflow.operations, boolean),
	payflow._slot_freed(text, text[]),
	payflow._release_held(text), payflow._require_priority(integer) FROM PUBLIC;
