-- payflow: periodic work and the admin's operations on operations.
--
-- replay of a FAILED operation, run_scheduler (expired leases, due
-- retries, lost messages), purge (TTL), and their pg_cron schedules.

---------------------------------------------------------------------------
-- Public API: operations (payflow_admin)
---------------------------------------------------------------------------

-- Re-runs a FAILED operation from the step that failed, with a fresh
-- attempt budget and the same idempotency key.  False if not FAILED.
CREATE OR REPLACE FUNCTION payflow.replay(operation_id text) RETURNS boolean
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	o payflow.operations;
	d payflow.step_definitions;
BEGIN
	PERFORM payflow._require_operation_id(operation_id);
	o := payflow._lock_operation(operation_id);
	IF o.status <> 'FAILED' THEN
		RETURN false;
	END IF;
	IF o.step_status <> 'FAILED' THEN
		RAISE EXCEPTION 'operation "%" has no failed step to replay', o.id
			USING ERRCODE = 'PF001';
	END IF;
	d := payflow._step_of(o.pipeline_version, o.current_step);

	-- the one FAILED -> ready move operations_transition lets through
	PERFORM payflow._allow_replay(o.id);
	UPDATE payflow.operations
	   SET status = d.ready_status, updated_at = now(), terminal_at = NULL,
		   error = NULL, payloads_purged_at = NULL,
		   step_attempt = 0, step_status = 'PENDING', step_pending_since = now(),
		   step_next_attempt_at = NULL, step_lease_expires_at = NULL, history_no = history_no + 1
	 WHERE id = o.id
	RETURNING * INTO o;
	PERFORM payflow._status_recorded(o.id, o.history_no, 'FAILED', d.ready_status, 'replay', session_user);
	UPDATE payflow.dead_letters SET replayed_at = now()
	 WHERE dead_letters.operation_id = o.id AND replayed_at IS NULL;
	-- its request, or held for a slot of a limited step (step_dispatch.sql)
	PERFORM payflow._request_step(o, true);
	RETURN true;
END
$$;

-- Periodic work, run by the background worker (or pg_cron):
-- 1. expired leases: the step is retried (attempt + 1 at the next claim),
--    or the operation fails once max_attempts runs all died;
-- 2. stuck steps, PENDING for payflow.stuck_after with no event of their
--    payment waiting in the outbox: the request event is emitted again.
--    This recovers operations whose message a queue lost;
-- 3. due retries: the step's request event is emitted again;
-- 4. limited steps' free slots go to the operations held for them.
-- 1 and 2 come from a sweep of the operations in flight
-- (operations_open_idx), each with its one open step in its row: no
-- index names a lease or a status, so that claims, heartbeats and
-- completions stay HOT updates.  A call looks at up to 10 x max_rows
-- operations from where the last one stopped (payflow.scheduler_sweep) and
-- starts over from the first when it reaches the end: with fewer in flight
-- than that, every call sees them all; with more, a lease is found expired
-- within (operations in flight / (10 x max_rows)) calls, which the README
-- states.  3 comes from steps_retry_idx by due time.  Each part handles at
-- most max_rows rows; rows locked by a worker are skipped and seen next
-- time.
CREATE OR REPLACE FUNCTION payflow.run_scheduler(max_rows integer DEFAULT 1000) RETURNS jsonb
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	r record;
	o payflow.operations;
	d payflow.step_definitions;
	v_max integer;
	v_stuck_after interval := payflow._seconds('stuck_after');
	v_expired integer := 0;
	v_failed integer := 0;
	v_due integer := 0;
	v_stuck integer := 0;
	v_sweep payflow.scheduler_sweep;
	v_scan integer;
	v_seen integer := 0;
BEGIN
	IF max_rows IS NULL THEN
		RAISE EXCEPTION 'max_rows must not be null' USING ERRCODE = 'null_value_not_allowed';
	ELSIF max_rows < 1 THEN
		RAISE EXCEPTION 'max_rows must be positive' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	v_scan := least(max_rows, 100000) * 10;

	-- One sweep at a time (pg_cron may start a call while one runs): a
	-- second caller skips 1 and 2 this time.
	SELECT * INTO v_sweep FROM payflow.scheduler_sweep FOR UPDATE SKIP LOCKED;
	IF FOUND THEN
		FOR r IN SELECT f.id, f.step_status, f.step_lease_expires_at, f.step_pending_since, f.held_step
				   FROM payflow.operations f
				  WHERE f.terminal_at IS NULL	-- operations_open_idx's predicate
					-- byte-wise, as operations_open_idx orders them
					AND f.id > v_sweep.after_operation COLLATE "C"
				  ORDER BY f.id LIMIT v_scan
		LOOP
			EXIT WHEN v_expired + v_failed >= max_rows OR v_stuck >= max_rows;
			v_seen := v_seen + 1;
			v_sweep.after_operation := r.id;
			-- (a held step waits for a slot, not for a message: step_dispatch.sql)
			CONTINUE WHEN NOT ((r.step_status = 'RUNNING' AND r.step_lease_expires_at < now())
							   OR (r.step_status = 'PENDING' AND r.step_pending_since < now() - v_stuck_after
								   AND r.held_step IS NULL));
			SELECT * INTO o FROM payflow.operations WHERE id = r.id FOR UPDATE SKIP LOCKED;
			CONTINUE WHEN NOT FOUND OR o.terminal_at IS NOT NULL;
			IF o.step_status = 'RUNNING' AND o.step_lease_expires_at < now() THEN
				d := payflow._step_of(o.pipeline_version, o.current_step);
				v_max := coalesce(d.max_attempts, payflow._setting('max_attempts')::integer);
				IF o.step_attempt >= v_max THEN
					PERFORM payflow._fail_operation(o,
						jsonb_build_object('code', 'lease_expired',
										   'message', format('lease expired on attempt %s of %s', o.step_attempt, v_max)),
						'payflow scheduler');
					v_failed := v_failed + 1;
				ELSE
					-- lease_owner stays: the late worker may still report its outcome
					-- until another worker claims the step.  Due at once: part 3
					-- below emits its request in this call.
					UPDATE payflow.operations
					   SET step_status = 'RETRY_WAIT', step_next_attempt_at = now(), step_lease_expires_at = NULL,
						   step_last_error = jsonb_build_object('code', 'lease_expired',
																'message', format('lease of %s expired', o.step_lease_owner))
					 WHERE id = o.id;
					v_expired := v_expired + 1;
				END IF;
			ELSIF o.step_status = 'PENDING' AND o.step_pending_since < now() - v_stuck_after AND o.held_step IS NULL THEN
				-- Re-armed either way, so it is not stuck again until stuck_after.
				UPDATE payflow.operations SET step_pending_since = now() WHERE id = o.id;
				-- An event of this payment still in the outbox will be delivered;
				-- another copy would only be a duplicate.
				CONTINUE WHEN EXISTS (SELECT FROM payflow.outbox
									   WHERE message_group_id = payflow._message_group_id(o.payment_id));
				PERFORM payflow._emit_step_request(o);
				v_stuck := v_stuck + 1;
			END IF;
		END LOOP;
		IF v_seen < v_scan AND v_expired + v_failed < max_rows AND v_stuck < max_rows THEN
			-- the end of the operations in flight: the next call starts from the first
			v_sweep.after_operation := '';
		END IF;
		UPDATE payflow.scheduler_sweep SET after_operation = v_sweep.after_operation, updated_at = now() WHERE id;
	END IF;

	FOR r IN SELECT f.id FROM payflow.operations f
			  WHERE f.step_next_attempt_at <= now() AND f.step_status = 'RETRY_WAIT'
			  ORDER BY f.step_next_attempt_at LIMIT max_rows
	LOOP
		SELECT * INTO o FROM payflow.operations WHERE id = r.id FOR UPDATE SKIP LOCKED;
		CONTINUE WHEN NOT FOUND;
		CONTINUE WHEN o.step_status IS DISTINCT FROM 'RETRY_WAIT' OR o.step_next_attempt_at > now();
		UPDATE payflow.operations
		   SET step_status = 'PENDING', step_pending_since = now(), step_next_attempt_at = NULL
		 WHERE id = o.id
		RETURNING * INTO o;
		-- its request, or held for a slot (handed out below)
		PERFORM payflow._request_step(o, false);
		v_due := v_due + 1;
	END LOOP;

	-- 4. the free slots of limited steps go to the operations they hold
	-- (step_dispatch.sql): slots freed by expired leases, a limit raised,
	-- a completion that found the step's row busy
	FOR r IN SELECT l.step_name FROM payflow.step_limits l LOOP
		PERFORM payflow._dispatch_held(r.step_name);
	END LOOP;

	-- the open operations of the tenants with a quota (tenant_quotas.sql)
	IF EXISTS (SELECT FROM payflow.tenant_quotas) THEN
		PERFORM payflow._count_tenant_quotas();
	END IF;
	PERFORM payflow._wake_listeners();
	RETURN jsonb_build_object('expiredLeases', v_expired,
							  'failedAfterLeaseExpiry', v_failed,
							  'retriesDue', v_due,
							  'stuckRedriven', v_stuck);
END
$$;

-- Registers (or replaces) a pg_cron job that runs in this database as the
-- caller; 0A000 with a hint when pg_cron is missing.  pg_cron lives in one
-- database (cron.database_name), so finding it here means this is that
-- database and cron.schedule, which non-superusers may call, is enough.
CREATE OR REPLACE FUNCTION payflow._cron_schedule(job_name text, schedule text, command text) RETURNS bigint
	LANGUAGE plpgsql VOLATILE
	AS $$
DECLARE
	v_job bigint;
BEGIN
	IF to_regprocedure('cron.schedule_in_database(text,text,text,text,text,boolean)') IS NULL THEN
		RAISE EXCEPTION 'pg_cron is not installed'
			USING ERRCODE = 'feature_not_supported',
				  HINT = 'Add pg_cron to shared_preload_libraries, set cron.database_name, '
						 'and run CREATE EXTENSION pg_cron in that database (pg_cron 1.4 or later).';
	END IF;
	EXECUTE 'SELECT cron.schedule($1, $2, $3)' INTO v_job USING job_name, schedule, command;
	RETURN v_job;
END
$$;

-- Registers purge with pg_cron (job "payflow-purge", replaced if present).
-- SECURITY INVOKER: the job runs as the role that scheduled it, which must
-- be allowed to use pg_cron and to call payflow.purge().
CREATE OR REPLACE FUNCTION payflow.schedule_purge(schedule text DEFAULT '*/5 * * * *') RETURNS bigint
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
BEGIN
	IF schedule IS NULL OR schedule = '' THEN
		RAISE EXCEPTION 'schedule must not be empty' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	RETURN payflow._cron_schedule('payflow-purge', schedule, 'SELECT payflow.purge()');
END
$$;

-- Runs the scheduler every payflow.scheduler_naptime for about "seconds",
-- one transaction per pass, then returns.  What a pg_cron older than 1.5,
-- which cannot schedule in seconds, runs once a minute.  A procedure
-- without SET or SECURITY DEFINER, because only such a procedure may
-- COMMIT; it runs as its caller and names everything with its schema.
--
-- The nap is slept in slices of at most 50 ms, each its own transaction.
-- The first statement after a COMMIT takes a snapshot that the procedure
-- keeps until the next COMMIT, so one pg_sleep of the whole nap held the
-- database's xmin horizon back for a second at a time, every second: rows
-- the relay acked meanwhile could be neither pruned nor skipped, and the
-- outbox claim walked them all (in the relay bench, 32-49 us of claim per
-- event against 14-18 with the C flavour's background worker).  A slice's
-- transaction writes nothing, so its COMMIT costs no WAL.
CREATE OR REPLACE PROCEDURE payflow.run_scheduler_for(seconds integer DEFAULT 58)
	LANGUAGE plpgsql
	AS $$
DECLARE
	v_until timestamptz;
	v_naptime float8;
	v_wake timestamptz;
BEGIN
	IF seconds IS NULL OR seconds < 1 OR seconds > 3600 THEN
		RAISE EXCEPTION 'seconds must be between 1 and 3600' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	v_until := pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) pg_catalog.make_interval(secs => seconds);
	LOOP
		PERFORM payflow.run_scheduler();
		COMMIT;
		v_naptime := payflow._setting('scheduler_naptime')::float8 OPERATOR(pg_catalog./) 1000;
		v_wake := pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) pg_catalog.make_interval(secs => v_naptime);
		EXIT WHEN v_wake OPERATOR(pg_catalog.>) v_until;
		LOOP
			PERFORM pg_catalog.pg_sleep(LEAST(0.05, pg_catalog.date_part('epoch',
								v_wake OPERATOR(pg_catalog.-) pg_catalog.clock_timestamp())));
			COMMIT;
			EXIT WHEN pg_catalog.clock_timestamp() OPERATOR(pg_catalog.>=) v_wake;
		END LOOP;
	END LOOP;
END
$$;

-- Registers the scheduler with pg_cron (job "payflow-scheduler", replaced
-- if present): every second with pg_cron 1.5 or later (Amazon RDS and
-- Aurora), else a job every minute that runs it each second for 58 s.
-- What the C-free flavour has instead of the scheduler background worker;
-- the C flavour needs it only when payflow is not preloaded.  SECURITY
-- INVOKER like schedule_purge: the job runs as the caller.
CREATE OR REPLACE FUNCTION payflow.schedule_scheduler() RETURNS bigint
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	v_cron text := (SELECT extversion FROM pg_extension WHERE extname = 'pg_cron');
BEGIN
	IF string_to_array(split_part(v_cron, '-', 1), '.')::integer[] >= ARRAY[1, 5] THEN
		RETURN payflow._cron_schedule('payflow-scheduler', '1 second', 'SELECT payflow.run_scheduler()');
	END IF;
	RETURN payflow._cron_schedule('payflow-scheduler', '* * * * *', 'CALL payflow.run_scheduler_for(58)');
END
$$;
