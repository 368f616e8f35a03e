-- payflow 0.2.0 -> 0.3.0.
--
-- The C-free flavour for Amazon RDS and Aurora (make dist-sql) shares this
-- version's SQL: _flavour(), the scheduler driven by pg_cron
-- (schedule_scheduler, run_scheduler_for; schedule_purge uses
-- cron.schedule, which non-superusers may call), the listeners' wake-up
-- after a scheduler pass (_wake_listeners, which the C-free flavour
-- needs), and a tenant policy that evaluates the tenant once per query.
--
-- Hardening: card numbers masked in every stored error; pg payload
-- references only within the caller's tenant; step results written only by
-- the step's lease holder (payload_put takes step and worker_id) and result
-- references only to the operation's own payloads; outbox claims capped
-- (1,000 events, 600 s); webhooks only for events payflow published
-- (operation_events; webhook_target takes the event id and body, PF008).
--
-- extension/sql/payflow.sql is the shared source of 0.3.0; a test checks
-- that installing 0.3.0 and updating from each older version give the same
-- schema.

\echo Use "ALTER EXTENSION payflow UPDATE TO '0.3.0'" to load this file. \quit

-- Which flavour is installed: 'c' here, 'sql' in the C-free one.
CREATE FUNCTION payflow._flavour() RETURNS text
	LANGUAGE sql IMMUTABLE PARALLEL SAFE
	AS $$ SELECT 'c'::text $$;

-- After a scheduler pass: nothing to do here.  The scheduler background
-- worker sends the NOTIFYs for the commits that flagged a wake-up in shared
-- memory (wakeup.c); the C-free flavour has no shared memory and notifies
-- from this function instead.
CREATE FUNCTION payflow._wake_listeners() RETURNS void
	LANGUAGE sql VOLATILE
	AS $$ SELECT $$;

-- Periodic work, run by the background worker (or pg_cron):
-- 1. expired leases: the step is retried (attempt + 1 at the next claim),
--    or the operation fails once max_attempts runs all died;
-- 2. due retries: the step's request event is emitted again;
-- 3. stuck steps, PENDING for payflow.stuck_after with no event of their
--    payment waiting in the outbox: the request event is emitted again.
--    This recovers operations whose message a queue lost.
-- Each part handles at most max_rows rows; rows locked by a worker are
-- skipped and seen next time.
CREATE OR REPLACE FUNCTION payflow.run_scheduler(max_rows integer DEFAULT 1000) RETURNS jsonb
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	r record;
	o payflow.operations;
	s payflow.steps;
	d payflow.step_definitions;
	v_max integer;
	v_stuck_after interval := payflow._seconds('stuck_after');
	v_expired integer := 0;
	v_failed integer := 0;
	v_due integer := 0;
	v_stuck integer := 0;
BEGIN
	IF max_rows IS NULL THEN
		RAISE EXCEPTION 'max_rows must not be null' USING ERRCODE = 'null_value_not_allowed';
	ELSIF max_rows < 1 THEN
		RAISE EXCEPTION 'max_rows must be positive' USING ERRCODE = 'invalid_parameter_value';
	END IF;

	FOR r IN SELECT operation_id, step_name FROM payflow.steps
			  WHERE status = 'RUNNING' AND lease_expires_at < now()
			  ORDER BY claimed_at LIMIT max_rows
	LOOP
		SELECT * INTO o FROM payflow.operations WHERE id = r.operation_id FOR UPDATE SKIP LOCKED;
		CONTINUE WHEN NOT FOUND;
		s := payflow._lock_step(r.operation_id, r.step_name);
		CONTINUE WHEN s.status IS DISTINCT FROM 'RUNNING' OR s.lease_expires_at >= now();
		d := payflow._step_definition(s.step_name);
		v_max := coalesce(d.max_attempts, payflow._setting('max_attempts')::integer);
		IF s.attempt >= v_max THEN
			PERFORM payflow._fail_operation(o, s,
				jsonb_build_object('code', 'lease_expired',
								   'message', format('lease expired on attempt %s of %s', s.attempt, v_max)),
				'payflow scheduler');
			v_failed := v_failed + 1;
		ELSE
			-- lease_owner stays: the late worker may still report its outcome
			-- until another worker claims the step.
			UPDATE payflow.steps
			   SET status = 'RETRY_WAIT', next_attempt_at = now(), lease_expires_at = NULL,
				   last_error = jsonb_build_object('code', 'lease_expired',
												   'message', format('lease of %s expired', s.lease_owner))
			 WHERE operation_id = s.operation_id AND step_name = s.step_name;
			v_expired := v_expired + 1;
		END IF;
	END LOOP;

	FOR r IN SELECT operation_id, step_name FROM payflow.steps
			  WHERE status = 'RETRY_WAIT' AND next_attempt_at <= now()
			  ORDER BY next_attempt_at LIMIT max_rows
	LOOP
		SELECT * INTO o FROM payflow.operations WHERE id = r.operation_id FOR UPDATE SKIP LOCKED;
		CONTINUE WHEN NOT FOUND;
		s := payflow._lock_step(r.operation_id, r.step_name);
		CONTINUE WHEN s.status IS DISTINCT FROM 'RETRY_WAIT' OR s.next_attempt_at > now();
		UPDATE payflow.steps
		   SET status = 'PENDING', pending_since = now(), next_attempt_at = NULL
		 WHERE operation_id = s.operation_id AND step_name = s.step_name;
		PERFORM payflow._emit_step_request(o, s);
		v_due := v_due + 1;
	END LOOP;

	FOR r IN SELECT operation_id, step_name FROM payflow.steps
			  WHERE status = 'PENDING' AND pending_since < now() - v_stuck_after
			  ORDER BY pending_since LIMIT max_rows
	LOOP
		SELECT * INTO o FROM payflow.operations WHERE id = r.operation_id FOR UPDATE SKIP LOCKED;
		CONTINUE WHEN NOT FOUND;
		s := payflow._lock_step(r.operation_id, r.step_name);
		CONTINUE WHEN s.status IS DISTINCT FROM 'PENDING' OR s.pending_since >= now() - v_stuck_after;
		-- Re-armed either way, so the scan moves on to older rows next time.
		UPDATE payflow.steps SET pending_since = now()
		 WHERE operation_id = s.operation_id AND step_name = s.step_name;
		-- An event of this payment still in the outbox will be delivered;
		-- another copy would only be a duplicate.
		CONTINUE WHEN EXISTS (SELECT FROM payflow.outbox
							   WHERE message_group_id = payflow._message_group_id(o.payment_id));
		PERFORM payflow._emit_step_request(o, s);
		v_stuck := v_stuck + 1;
	END LOOP;

	PERFORM payflow._wake_listeners();
	RETURN jsonb_build_object('expiredLeases', v_expired,
							  'failedAfterLeaseExpiry', v_failed,
							  'retriesDue', v_due,
							  'stuckRedriven', v_stuck);
END
$$;

-- Runs the scheduler every payflow.scheduler_naptime for about "seconds",
-- one transaction per pass (so no snapshot outlives a pass and vacuum is
-- never held back), then returns.  What a pg_cron older than 1.5, which
-- cannot schedule in seconds, runs once a minute.  A procedure without SET
-- or SECURITY DEFINER, because only such a procedure may COMMIT; it runs
-- as its caller and names everything with its schema.
CREATE PROCEDURE payflow.run_scheduler_for(seconds integer DEFAULT 58)
	LANGUAGE plpgsql
	AS $$
DECLARE
	v_until timestamptz;
	v_naptime float8;
BEGIN
	IF seconds IS NULL OR seconds < 1 OR seconds > 3600 THEN
		RAISE EXCEPTION 'seconds must be between 1 and 3600' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	v_until := pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) pg_catalog.make_interval(secs => seconds);
	LOOP
		PERFORM payflow.run_scheduler();
		COMMIT;
		v_naptime := payflow._setting('scheduler_naptime')::float8 OPERATOR(pg_catalog./) 1000;
		EXIT WHEN pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) pg_catalog.make_interval(secs => v_naptime)
				  OPERATOR(pg_catalog.>) v_until;
		PERFORM pg_catalog.pg_sleep(v_naptime);
	END LOOP;
END
$$;

-- Registers (or replaces) a pg_cron job that runs in this database as the
-- caller; 0A000 with a hint when pg_cron is missing.  pg_cron lives in one
-- database (cron.database_name), so finding it here means this is that
-- database and cron.schedule, which non-superusers may call, is enough.
CREATE FUNCTION payflow._cron_schedule(job_name text, schedule text, command text) RETURNS bigint
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

-- Registers the scheduler with pg_cron (job "payflow-scheduler", replaced
-- if present): every second with pg_cron 1.5 or later (Amazon RDS and
-- Aurora), else a job every minute that runs it each second for 58 s.
-- What the C-free flavour has instead of the scheduler background worker;
-- the C flavour needs it only when payflow is not preloaded.  SECURITY
-- INVOKER like schedule_purge: the job runs as the caller.
CREATE FUNCTION payflow.schedule_scheduler() RETURNS bigint
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

REVOKE ALL ON FUNCTION payflow._flavour(), payflow._wake_listeners(), payflow._cron_schedule(text, text, text),
	payflow.schedule_scheduler() FROM PUBLIC;
REVOKE ALL ON PROCEDURE payflow.run_scheduler_for(integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION payflow.schedule_scheduler() TO payflow_admin;
GRANT EXECUTE ON PROCEDURE payflow.run_scheduler_for(integer) TO payflow_admin;
GRANT EXECUTE ON FUNCTION payflow._cron_schedule(text, text, text) TO payflow_admin;

DROP POLICY operations_of_tenant ON payflow.operations;
CREATE POLICY operations_of_tenant ON payflow.operations FOR SELECT TO payflow_app
	USING (tenant = (SELECT payflow._current_tenant()));

---------------------------------------------------------------------------
-- Hardening (issue 12): card numbers masked in stored errors, payload
-- references kept within a tenant, step results written by the lease
-- holder only, capped outbox claims, webhooks only for published events.
---------------------------------------------------------------------------

-- The events payflow published to operation-events, by id and a sha256 of
-- the body: the webhook worker signs and delivers only those, so that
-- whoever may send to that queue cannot have payflow sign "payment
-- completed" for an operation that failed.  Kept as long as its operation.
CREATE TABLE payflow.operation_events (
	event_id uuid PRIMARY KEY,
	operation_id text COLLATE "C" NOT NULL,
	body_sha256 bytea NOT NULL,
	created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX operation_events_operation_idx ON payflow.operation_events (operation_id);

-- Card numbers in error texts (a legacy DBMS that echoes its input, say):
-- every run of 13 to 19 digits, spaces or dashes between them allowed, that
-- passes the Luhn check keeps its last four digits and loses the others.
-- Applied to errors before they are stored (PCI DSS 3.4); the workers
-- redact before that already.
CREATE FUNCTION payflow._mask_card_numbers(value text) RETURNS text
	LANGUAGE plpgsql IMMUTABLE STRICT
	AS $$
DECLARE
	v_match text;
	v_digits text;
	v_sum integer;
	v_digit integer;
	v_out text := value;
BEGIN
	IF value !~ '[0-9]{4}' THEN
		RETURN value;
	END IF;
	FOR v_match IN SELECT DISTINCT m[1] FROM regexp_matches(value, '(?<![0-9])([0-9](?:[ -]?[0-9]){12,18})(?![0-9])', 'g') m LOOP
		v_digits := regexp_replace(v_match, '[^0-9]', '', 'g');
		v_sum := 0;
		FOR i IN 1..length(v_digits) LOOP
			v_digit := substr(v_digits, length(v_digits) - i + 1, 1)::integer;
			IF i % 2 = 0 THEN
				v_digit := v_digit * 2;
				IF v_digit > 9 THEN
					v_digit := v_digit - 9;
				END IF;
			END IF;
			v_sum := v_sum + v_digit;
		END LOOP;
		IF v_sum % 10 = 0 THEN
			v_out := replace(v_out, v_match, repeat('*', length(v_digits) - 4) || right(v_digits, 4));
		END IF;
	END LOOP;
	RETURN v_out;
END
$$;

-- The same over every string and number of a JSON document (keys stay).
CREATE FUNCTION payflow._mask_card_numbers(value jsonb) RETURNS jsonb
	LANGUAGE sql IMMUTABLE STRICT
	AS $$
	SELECT CASE jsonb_typeof(value)
		WHEN 'string' THEN to_jsonb(payflow._mask_card_numbers(value #>> '{}'))
		WHEN 'object' THEN (SELECT coalesce(jsonb_object_agg(k, payflow._mask_card_numbers(v)), '{}'::jsonb)
							  FROM jsonb_each(value) AS e(k, v))
		WHEN 'array' THEN (SELECT coalesce(jsonb_agg(payflow._mask_card_numbers(v) ORDER BY i), '[]'::jsonb)
							 FROM jsonb_array_elements(value) WITH ORDINALITY AS e(v, i))
		-- a number that is a card number becomes the masked string
		WHEN 'number' THEN CASE WHEN payflow._mask_card_numbers(value::text) = value::text THEN value
								ELSE to_jsonb(payflow._mask_card_numbers(value::text)) END
		ELSE value
	END
$$;

-- Appends an event to the outbox and returns its id.
CREATE OR REPLACE FUNCTION payflow._emit(p_operation_id text, p_payment_id text, p_correlation_id text,
							  p_event_type text, p_destination text, p_attempt integer,
							  p_extra jsonb)
	RETURNS uuid
	LANGUAGE plpgsql
	AS $$
DECLARE
	v_event_id uuid := gen_random_uuid();
	v_body jsonb := payflow._event_body(v_event_id, p_operation_id, p_payment_id, p_correlation_id,
										p_event_type, p_attempt, p_extra);
BEGIN
	INSERT INTO payflow.outbox (event_id, operation_id, event_type, destination,
								message_group_id, body, attributes)
	VALUES (v_event_id, p_operation_id, p_event_type, p_destination, payflow._message_group_id(p_payment_id),
			v_body, payflow._event_attributes(p_operation_id, p_correlation_id, p_event_type));
	IF p_destination = 'operation-events' THEN
		INSERT INTO payflow.operation_events (event_id, operation_id, body_sha256)
		VALUES (v_event_id, p_operation_id, sha256(convert_to(v_body::text, 'UTF8')));
	END IF;
	PERFORM payflow._outbox_written();
	RETURN v_event_id;
END
$$;

-- Fails an operation at a step: step FAILED, operation FAILED, a dead
-- letter, and an OperationFailed event.  Caller holds both row locks.
CREATE OR REPLACE FUNCTION payflow._fail_operation(o payflow.operations, s payflow.steps,
										p_error jsonb, p_actor text)
	RETURNS void
	LANGUAGE plpgsql
	AS $$
DECLARE
	v_summary jsonb := payflow._mask_card_numbers(jsonb_strip_nulls(jsonb_build_object(
		'step', s.step_name,
		'code', p_error -> 'code',
		'message', p_error -> 'message')));
BEGIN
	UPDATE payflow.steps
	   SET status = 'FAILED', last_error = p_error, finished_at = now(),
		   lease_expires_at = NULL, pending_since = NULL, next_attempt_at = NULL
	 WHERE operation_id = s.operation_id AND step_name = s.step_name;
	PERFORM payflow._set_status(o.id, o.status, 'FAILED',
								coalesce(v_summary ->> 'message', v_summary ->> 'code', 'failed'), p_actor);
	UPDATE payflow.operations SET error = v_summary WHERE id = o.id;
	INSERT INTO payflow.dead_letters (source, operation_id, step_name, error, attempts)
	VALUES ('step', o.id, s.step_name, payflow._mask_card_numbers(p_error), s.attempt);
	PERFORM payflow._emit(o.id, o.payment_id, o.correlation_id, 'OperationFailed', 'operation-events',
						  s.attempt, jsonb_build_object('status', 'FAILED', 'failedStep', s.step_name,
														'error', v_summary));
END
$$;

-- Same as submit, for a request whose payload is already stored (S3, or a
-- "pg" payload written earlier); only its reference is kept.
CREATE OR REPLACE FUNCTION payflow.submit_ref(payment_id text, store text, key text, checksum text, size bigint,
								   idempotency_key text DEFAULT NULL,
								   correlation_id text DEFAULT NULL)
	RETURNS text
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	v_stored payflow.payloads;
BEGIN
	PERFORM payflow._require_submit(payment_id, idempotency_key, correlation_id);
	PERFORM payflow._require_text('store', store, 16);
	PERFORM payflow._require_text('key', key, 1024);
	PERFORM payflow._require_printable('key', key);
	PERFORM payflow._require_text('checksum', checksum, 71);
	IF store NOT IN ('pg', 's3') THEN
		RAISE EXCEPTION 'unknown payload store "%"', store
			USING ERRCODE = 'invalid_parameter_value', HINT = 'Use "pg" or "s3".';
	END IF;
	IF checksum !~ '^sha256:[0-9a-f]{64}$' THEN
		RAISE EXCEPTION 'invalid checksum "%"', checksum
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = 'A checksum is "sha256:" followed by 64 lower-case hex digits.';
	END IF;
	IF size IS NULL OR size < 0 THEN
		RAISE EXCEPTION 'size must be a non-negative number of bytes'
			USING ERRCODE = CASE WHEN size IS NULL THEN 'null_value_not_allowed'
								 ELSE 'invalid_parameter_value' END;
	END IF;
	IF store = 'pg' THEN
		-- Only a payload of an operation the caller may see (its tenant's):
		-- another tenant's key answers exactly like an unknown one, so keys
		-- cannot be probed, checksums not guessed, and no tenant's request
		-- charged for another.
		SELECT p.* INTO v_stored
		  FROM payflow.payloads p JOIN payflow.operations o ON o.id = p.operation_id
		 WHERE p.key = submit_ref.key AND payflow._visible(o.tenant);
		IF NOT FOUND THEN
			RAISE EXCEPTION 'payload "%" does not exist', key USING ERRCODE = 'no_data_found';
		ELSIF v_stored.checksum <> checksum OR v_stored.size <> size THEN
			RAISE EXCEPTION 'checksum mismatch for payload "%"', key USING ERRCODE = 'PF005';
		END IF;
	END IF;
	RETURN payflow._create_operation(
		payment_id, coalesce(idempotency_key, payment_id), correlation_id,
		sha256(convert_to(payment_id || E'\n' || store || E'\n' || key || E'\n' || checksum, 'UTF8')),
		jsonb_build_object('store', store, 'key', key, 'checksum', checksum, 'size', size),
		NULL);
END
$$;

-- Records a step's success in one transaction: step done, status advanced,
-- result stored, the next event in the outbox.  A repeated call returns the
-- first call's answer.
CREATE OR REPLACE FUNCTION payflow.complete_step(operation_id text, step text, worker_id text, result jsonb,
									  result_ref jsonb DEFAULT NULL)
	RETURNS jsonb
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	d payflow.step_definitions;
	n payflow.step_definitions;
	o payflow.operations;
	s payflow.steps;
	v_ref jsonb := result_ref;
	v_event_id uuid;
	v_event_type text;
	v_answer jsonb;
BEGIN
	PERFORM payflow._require_operation_id(operation_id);
	d := payflow._step_definition(step);
	PERFORM payflow._require_worker(worker_id, 1);
	PERFORM payflow._require_object('result', result);
	PERFORM payflow._require_size('result', octet_length(result::text));
	IF v_ref IS NOT NULL THEN
		PERFORM payflow._require_object('result_ref', v_ref);
	END IF;

	o := payflow._lock_operation(operation_id);
	s := payflow._lock_step(o.id, d.step_name);
	IF s.status = 'SUCCEEDED' THEN
		RETURN s.completion;
	ELSIF payflow._is_terminal(o.status) THEN
		RAISE EXCEPTION 'operation "%" is already %', o.id, o.status
			USING ERRCODE = 'PF006',
				  HINT = 'A FAILED operation can be re-run with payflow.replay(); the step keeps its idempotency key.';
	END IF;
	PERFORM payflow._require_lease_holder(s, o.id, d.step_name, worker_id);
	IF v_ref IS NOT NULL THEN
		PERFORM payflow._require_own_ref(o.id, v_ref);
	END IF;

	IF v_ref IS NULL AND d.result_name IS NOT NULL THEN
		v_ref := payflow._payload_write(o.id, d.result_name, convert_to(result::text, 'UTF8'));
	END IF;

	PERFORM payflow._set_status(o.id, o.status, d.done_status, lower(d.step_name) || ' done', worker_id);

	SELECT * INTO n FROM payflow.step_definitions WHERE position = d.position + 1;
	IF FOUND THEN
		INSERT INTO payflow.steps (operation_id, step_name, input_ref, pending_since)
		VALUES (o.id, n.step_name, v_ref, now());
		UPDATE payflow.operations SET current_step = n.step_name WHERE id = o.id;
		v_event_type := n.request_event;
		v_event_id := payflow._emit(o.id, o.payment_id, o.correlation_id, n.request_event,
									n.destination, 1, jsonb_build_object(n.input_field, v_ref));
	ELSE
		-- The last result travels inline in OperationCompleted; SQS takes
		-- 256 KiB per message, so it is held to a quarter of that.
		IF octet_length(result::text) > 65536 THEN
			RAISE EXCEPTION 'result of the last step is too large'
				USING ERRCODE = 'PF007',
					  DETAIL = format('It has %s bytes; the result of %s travels in the OperationCompleted event and may have 65536.',
									  octet_length(result::text), d.step_name),
					  HINT = 'Return a reference (an id or a URL) instead of the document.';
		END IF;
		UPDATE payflow.operations SET result = complete_step.result WHERE id = o.id;
		v_event_type := 'OperationCompleted';
		v_event_id := payflow._emit(o.id, o.payment_id, o.correlation_id, 'OperationCompleted',
									'operation-events', s.attempt,
									jsonb_build_object('status', d.done_status, 'result', result));
	END IF;

	v_answer := jsonb_build_object('action', 'completed', 'status', d.done_status,
								   'eventType', v_event_type, 'eventId', v_event_id);
	UPDATE payflow.steps
	   SET status = 'SUCCEEDED', result = complete_step.result, result_ref = v_ref,
		   completion = v_answer, finished_at = now(),
		   lease_expires_at = NULL, pending_since = NULL, next_attempt_at = NULL
	 WHERE steps.operation_id = o.id AND step_name = d.step_name;
	RETURN v_answer;
END
$$;

-- Records a step's failure: a retry scheduled with backoff while attempts
-- remain and the error is retryable, else the operation fails.
-- error is {"code":…, "message":…} and may carry "retryAfterSeconds"
-- (e.g. from an HTTP Retry-After) which lengthens the delay up to
-- retry_max_delay, and "outcomeUnknown": true when the attempt may have had
-- its effect (then the last attempt ends the operation as outcome_unknown).
CREATE OR REPLACE FUNCTION payflow.fail_step(operation_id text, step text, worker_id text, error jsonb,
								  retryable boolean)
	RETURNS jsonb
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	d payflow.step_definitions;
	o payflow.operations;
	s payflow.steps;
	v_max integer;
	v_base interval;
	v_cap interval;
	v_delay interval;
	v_retry_after interval;
BEGIN
	PERFORM payflow._require_operation_id(operation_id);
	d := payflow._step_definition(step);
	PERFORM payflow._require_worker(worker_id, 1);
	PERFORM payflow._require_object('error', error);
	IF retryable IS NULL THEN
		RAISE EXCEPTION 'retryable must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	PERFORM payflow._require_size('error', octet_length(error::text));
	-- Card numbers never reach the step, the status document, history,
	-- dead letters or OperationFailed.
	error := payflow._mask_card_numbers(error);

	o := payflow._lock_operation(operation_id);
	s := payflow._lock_step(o.id, d.step_name);
	IF s.status = 'SUCCEEDED' THEN
		RETURN jsonb_build_object('action', 'skip', 'reason', 'done');
	ELSIF s.status = 'FAILED' THEN
		RETURN jsonb_build_object('action', 'failed');
	ELSIF payflow._is_terminal(o.status) THEN
		RAISE EXCEPTION 'operation "%" is already %', o.id, o.status USING ERRCODE = 'PF006';
	END IF;
	PERFORM payflow._require_lease_holder(s, o.id, d.step_name, worker_id);
	IF s.status = 'RETRY_WAIT' AND s.last_error = error THEN
		-- The same report again (a worker retrying its own call).
		RETURN jsonb_build_object('action', 'retry', 'attempt', s.attempt,
								  'nextAttemptAt', payflow._iso(s.next_attempt_at));
	END IF;

	v_max := coalesce(d.max_attempts, payflow._setting('max_attempts')::integer);
	IF retryable AND s.attempt < v_max THEN
		v_base := coalesce(d.retry_base_delay, payflow._seconds('retry_base_delay'));
		v_cap := coalesce(d.retry_max_delay, payflow._seconds('retry_max_delay'));
		v_delay := payflow.backoff_delay(greatest(s.attempt - 1, 0), v_base, v_cap,
										 payflow._setting('retry_jitter')::float8);
		IF jsonb_typeof(error -> 'retryAfterSeconds') = 'number' THEN
			-- compared as numeric: 1e400 is a JSON number but no float8
			v_retry_after := make_interval(secs => greatest(least((error ->> 'retryAfterSeconds')::numeric,
																  extract(epoch FROM v_cap)), 0)::float8);
			v_delay := greatest(v_delay, v_retry_after);
		END IF;
		UPDATE payflow.steps
		   SET status = 'RETRY_WAIT', next_attempt_at = now() + v_delay, last_error = error,
			   lease_expires_at = NULL
		 WHERE steps.operation_id = o.id AND step_name = d.step_name
		RETURNING * INTO s;
		UPDATE payflow.operations SET updated_at = now() WHERE id = o.id;
		RETURN jsonb_build_object('action', 'retry', 'attempt', s.attempt,
								  'nextAttemptAt', payflow._iso(s.next_attempt_at));
	END IF;

	IF retryable AND error -> 'outcomeUnknown' = 'true'::jsonb THEN
		-- The worker says this attempt may have had its effect (a call cut
		-- off after the DBMS got it, that no look-up cleared up): the last
		-- one must not end as a plain failure, or the client resubmits a
		-- payment that may be charged.
		error := jsonb_build_object(
			'code', 'outcome_unknown', 'class', 'outcome_unknown',
			'message', 'outcome unknown: the last attempt was cut off after the downstream system got it, '
					   'so it may have charged; do not resubmit it, reconcile it with the downstream system '
					   '(a dead letter holds it)',
			'cause', error - 'outcomeUnknown');
	END IF;
	PERFORM payflow._fail_operation(o, s,
		CASE WHEN retryable THEN error || jsonb_build_object('attemptsExhausted', true) ELSE error END,
		worker_id);
	RETURN jsonb_build_object('action', 'failed');
END
$$;

-- Keeps a message no worker could handle (bad JSON, unknown version,
-- checksum mismatch…) for investigation; returns the dead letter's id.
CREATE OR REPLACE FUNCTION payflow.record_dead_letter(queue text, message_body text, error jsonb,
										   operation_id text DEFAULT NULL)
	RETURNS bigint
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	v_id bigint;
BEGIN
	PERFORM payflow._require_text('queue', queue, 1000);
	PERFORM payflow._require_object('error', error);
	INSERT INTO payflow.dead_letters (source, queue, message_body, error, operation_id)
	VALUES ('message', queue, payflow._mask_card_numbers(left(message_body, 262144)),
			payflow._mask_card_numbers(error),
			CASE WHEN operation_id ~ '^pay_[0-9A-HJKMNP-TV-Z]{26}$' THEN operation_id END)
	RETURNING id INTO v_id;
	RETURN v_id;
END
$$;

-- Claims up to max_events outbox rows for a relay, oldest first, at most
-- one per message group: a later event of a group is never handed out
-- while an earlier one is unacked, so per-payment order holds even with
-- several relays.  A claim is a lease: rows of a relay that died come
-- back after lease_seconds.
CREATE OR REPLACE FUNCTION payflow.outbox_claim(max_events integer, relay_id text, lease_seconds integer DEFAULT 30)
	RETURNS TABLE (event_id uuid, destination text, message_group_id text, dedup_id text,
				   body text, attributes jsonb)
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
BEGIN
	PERFORM payflow._require_text('relay_id', relay_id, 200);
	-- Capped: one relay login must not be able to lease the whole outbox
	-- for a day.
	IF max_events IS NULL OR max_events < 1 OR max_events > 1000 THEN
		RAISE EXCEPTION 'max_events must be between 1 and 1000' USING ERRCODE = 'invalid_parameter_value';
	ELSIF lease_seconds IS NULL OR lease_seconds < 1 OR lease_seconds > 600 THEN
		RAISE EXCEPTION 'lease_seconds must be between 1 and 600' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	RETURN QUERY
		WITH candidates AS (
			SELECT c.ctid
			  FROM payflow.outbox c
			 WHERE c.available_at <= now()
			   AND (c.claim_expires_at IS NULL OR c.claim_expires_at <= now())
			   AND NOT EXISTS (SELECT FROM payflow.outbox e
								WHERE e.message_group_id = c.message_group_id AND e.seq < c.seq)
			 ORDER BY c.seq
			 LIMIT max_events
			   FOR UPDATE SKIP LOCKED
		)
		UPDATE payflow.outbox u
		   SET claimed_by = relay_id,
			   claim_expires_at = now() + make_interval(secs => lease_seconds),
			   attempts = u.attempts + 1
		  FROM candidates
		 WHERE u.ctid = candidates.ctid
		RETURNING u.event_id, u.destination, u.message_group_id, u.event_id::text,
				  u.body::text, u.attributes;
END
$$;

-- Records a webhook delivery that failed its last attempt (the delivery's
-- dead letter).  Idempotent per event: a second failure of the same event
-- (after a replay) updates the row, which is open for replay again.
CREATE OR REPLACE FUNCTION payflow.record_webhook_failure(event_id uuid, operation_id text, body text,
											   attempts integer, error jsonb)
	RETURNS bigint
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	v_tenant text;
	v_body jsonb;
	v_id bigint;
BEGIN
	IF event_id IS NULL THEN
		RAISE EXCEPTION 'event_id must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	PERFORM payflow._require_operation_id(operation_id);
	PERFORM payflow._require_text('body', body, 262144);
	BEGIN
		v_body := body::jsonb;
	EXCEPTION WHEN invalid_text_representation THEN
		RAISE EXCEPTION 'body is not JSON' USING ERRCODE = 'invalid_text_representation';
	END;
	IF jsonb_typeof(v_body) IS DISTINCT FROM 'object' OR jsonb_typeof(v_body -> 'eventType') IS DISTINCT FROM 'string' THEN
		RAISE EXCEPTION 'body must be an event: a JSON object with an "eventType"'
			USING ERRCODE = 'invalid_parameter_value';
	END IF;
	IF attempts IS NULL OR attempts < 1 THEN
		RAISE EXCEPTION 'attempts must be at least 1'
			USING ERRCODE = CASE WHEN attempts IS NULL THEN 'null_value_not_allowed'
								 ELSE 'invalid_parameter_value' END;
	END IF;
	IF error IS NOT NULL THEN
		PERFORM payflow._require_object('error', error);
	END IF;
	SELECT o.tenant INTO v_tenant FROM payflow.operations o
	 WHERE o.id = record_webhook_failure.operation_id;
	IF NOT FOUND THEN
		PERFORM payflow._unknown_operation(operation_id);
	END IF;
	-- what replay_webhook would send again must be payflow's own event
	PERFORM payflow._require_published(event_id, operation_id, body);
	INSERT INTO payflow.webhook_failures AS f (event_id, operation_id, tenant, url, body, attempts, error)
	VALUES (record_webhook_failure.event_id, record_webhook_failure.operation_id, v_tenant,
			coalesce((SELECT w.url FROM payflow.webhooks w WHERE w.tenant = v_tenant), ''),
			v_body, attempts, payflow._mask_card_numbers(error))
	ON CONFLICT ON CONSTRAINT webhook_failures_event_id_key DO UPDATE
		SET attempts = EXCLUDED.attempts, error = EXCLUDED.error, url = EXCLUDED.url,
			updated_at = now(), replayed_at = NULL
	RETURNING f.id INTO v_id;
	RETURN v_id;
END
$$;

-- TTL clean-up in bounded batches (each kind at most max_rows rows per
-- call; "more" says whether to call again):
-- payloads of completed/cancelled operations after retention_payloads;
-- operations (with steps, history, payloads, dead letters) after
-- retention_completed, or retention_failed for FAILED ones; the published
-- log; old consumed-event ids; and pg_cron's run details of payflow's jobs,
-- which pg_cron never prunes itself.
CREATE OR REPLACE FUNCTION payflow.purge(max_rows integer DEFAULT 10000) RETURNS jsonb
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	v_payloads integer;
	v_operations integer;
	v_published integer;
	v_consumed integer;
	v_dead integer;
	v_webhooks integer;
	v_cron integer := 0;
BEGIN
	IF max_rows IS NULL THEN
		RAISE EXCEPTION 'max_rows must not be null' USING ERRCODE = 'null_value_not_allowed';
	ELSIF max_rows < 1 THEN
		RAISE EXCEPTION 'max_rows must be positive' USING ERRCODE = 'invalid_parameter_value';
	END IF;

	WITH ops AS (
		SELECT id FROM payflow.operations
		 WHERE terminal_at IS NOT NULL AND payloads_purged_at IS NULL
		   AND terminal_at < now() - payflow._seconds('retention_payloads')
		   AND status IN ('COMPLETED', 'CANCELLED')
		 ORDER BY terminal_at LIMIT max_rows
		   FOR UPDATE SKIP LOCKED
	), marked AS (
		UPDATE payflow.operations o SET payloads_purged_at = now() FROM ops WHERE o.id = ops.id
	)
	DELETE FROM payflow.payloads p USING ops
	 WHERE p.key >= 'payments/' || ops.id || '/' AND p.key < 'payments/' || ops.id || '0';
	GET DIAGNOSTICS v_payloads = ROW_COUNT;

	WITH ops AS (
		SELECT id FROM payflow.operations
		 WHERE terminal_at IS NOT NULL
		   AND terminal_at < now() - CASE WHEN status = 'FAILED'
										  THEN payflow._seconds('retention_failed')
										  ELSE payflow._seconds('retention_completed') END
		 ORDER BY terminal_at LIMIT max_rows
		   FOR UPDATE SKIP LOCKED
	), del_steps AS (
		DELETE FROM payflow.steps c USING ops WHERE c.operation_id = ops.id
	), del_history AS (
		DELETE FROM payflow.operation_history c USING ops WHERE c.operation_id = ops.id
	), del_payloads AS (
		-- "0" follows "/": the range holds exactly the keys under payments/<id>/
		DELETE FROM payflow.payloads c USING ops
		 WHERE c.key >= 'payments/' || ops.id || '/' AND c.key < 'payments/' || ops.id || '0'
	), del_dead AS (
		DELETE FROM payflow.dead_letters c USING ops WHERE c.operation_id = ops.id
	), del_events AS (
		DELETE FROM payflow.operation_events c USING ops WHERE c.operation_id = ops.id
	)
	DELETE FROM payflow.operations o USING ops WHERE o.id = ops.id;
	GET DIAGNOSTICS v_operations = ROW_COUNT;

	DELETE FROM payflow.outbox_published
	 WHERE ctid = ANY (ARRAY(SELECT ctid FROM payflow.outbox_published
							  WHERE published_at < now() - payflow._seconds('retention_published')
							  LIMIT max_rows));
	GET DIAGNOSTICS v_published = ROW_COUNT;

	DELETE FROM payflow.consumed_events
	 WHERE ctid = ANY (ARRAY(SELECT ctid FROM payflow.consumed_events
							  WHERE consumed_at < now() - payflow._seconds('retention_consumed')
							  LIMIT max_rows));
	GET DIAGNOSTICS v_consumed = ROW_COUNT;

	-- Message dead letters have no operation; keep them as long as failures.
	DELETE FROM payflow.dead_letters
	 WHERE id = ANY (ARRAY(SELECT id FROM payflow.dead_letters
							WHERE created_at < now() - payflow._seconds('retention_failed')
							ORDER BY created_at LIMIT max_rows));
	GET DIAGNOSTICS v_dead = ROW_COUNT;

	-- Failed webhook deliveries: kept as long as failed operations, counted
	-- from their last failure.
	DELETE FROM payflow.webhook_failures
	 WHERE id = ANY (ARRAY(SELECT id FROM payflow.webhook_failures
							WHERE updated_at < now() - payflow._seconds('retention_failed')
							ORDER BY updated_at LIMIT max_rows));
	GET DIAGNOSTICS v_webhooks = ROW_COUNT;

	IF to_regclass('cron.job_run_details') IS NOT NULL THEN
		EXECUTE $sql$
			DELETE FROM cron.job_run_details
			 WHERE runid = ANY (ARRAY(
				SELECT d.runid FROM cron.job_run_details d JOIN cron.job j USING (jobid)
				 WHERE j.jobname LIKE 'payflow%' AND d.end_time < now() - $1
				 LIMIT $2))
		$sql$ USING payflow._seconds('retention_published'), max_rows;
		GET DIAGNOSTICS v_cron = ROW_COUNT;
	END IF;

	RETURN jsonb_build_object('payloads', v_payloads,
							  'operations', v_operations,
							  'publishedEvents', v_published,
							  'consumedEvents', v_consumed,
							  'deadLetters', v_dead,
							  'webhookFailures', v_webhooks,
							  'cronRunDetails', v_cron,
							  'more', greatest(v_payloads, v_operations, v_published,
											   v_consumed, v_dead, v_webhooks, v_cron) >= max_rows);
END
$$;

-- A reference a worker hands on as a step's result must name a payload of
-- that operation: its own pg payload with the checksum it claims, or an S3
-- key under payments/<id>/ (22023 otherwise, P0002/PF005 as payload_get).
CREATE FUNCTION payflow._require_own_ref(p_operation_id text, p_ref jsonb) RETURNS void
	LANGUAGE plpgsql STABLE
	AS $$
DECLARE
	p payflow.payloads;
BEGIN
	PERFORM payflow._require_text('result_ref.key', p_ref ->> 'key', 1024);
	PERFORM payflow._require_text('result_ref.checksum', p_ref ->> 'checksum', 71);
	IF p_ref ->> 'store' IS DISTINCT FROM 'pg' AND p_ref ->> 'store' IS DISTINCT FROM 's3' THEN
		RAISE EXCEPTION 'unknown payload store "%"', coalesce(p_ref ->> 'store', 'missing')
			USING ERRCODE = 'invalid_parameter_value', HINT = 'Use "pg" or "s3".';
	ELSIF left(p_ref ->> 'key', length(p_operation_id) + 10) <> 'payments/' || p_operation_id || '/' THEN
		RAISE EXCEPTION 'result_ref must name a payload of operation %', p_operation_id
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = format('Its key is %s; keys of this operation start with payments/%s/.',
								  p_ref ->> 'key', p_operation_id);
	ELSIF p_ref ->> 'store' = 'pg' THEN
		SELECT * INTO p FROM payflow.payloads WHERE key = p_ref ->> 'key' AND operation_id = p_operation_id;
		IF NOT FOUND THEN
			RAISE EXCEPTION 'payload "%" does not exist', p_ref ->> 'key' USING ERRCODE = 'no_data_found';
		ELSIF p.checksum IS DISTINCT FROM p_ref ->> 'checksum' THEN
			RAISE EXCEPTION 'checksum mismatch for payload "%"', p.key USING ERRCODE = 'PF005';
		END IF;
	END IF;
END
$$;

-- PF008 unless payflow published this event of this operation to
-- operation-events with this body (compared as JSON, so formatting does
-- not matter).
CREATE FUNCTION payflow._require_published(p_event_id uuid, p_operation_id text, p_body text) RETURNS void
	LANGUAGE plpgsql STABLE
	AS $$
DECLARE
	v_body jsonb;
BEGIN
	BEGIN
		v_body := p_body::jsonb;
	EXCEPTION WHEN invalid_text_representation THEN
		v_body := NULL;
	END;
	IF v_body IS NULL OR NOT EXISTS (
			SELECT FROM payflow.operation_events e
			 WHERE e.event_id = p_event_id AND e.operation_id = p_operation_id
			   AND e.body_sha256 = sha256(convert_to(v_body::text, 'UTF8'))) THEN
		RAISE EXCEPTION 'event % of operation % was not published by payflow', p_event_id, p_operation_id
			USING ERRCODE = 'PF008',
				  DETAIL = 'No event with this id, operation and body went to operation-events.';
	END IF;
END
$$;

DROP FUNCTION payflow.payload_put(text, text, bytea);

-- Writes a payload of the "pg" store for a step's result; returns its ref
-- (for complete_step's result_ref).  Only the worker holding the lease of
-- the running step may, and only under the step's result name: anyone else
-- could take the key first, and the step's completion would then fail
-- after the payment was made.
CREATE FUNCTION payflow.payload_put(operation_id text, name text, content bytea,
									step text DEFAULT NULL, worker_id text DEFAULT NULL)
	RETURNS jsonb
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	d payflow.step_definitions;
	s payflow.steps;
BEGIN
	PERFORM payflow._require_operation_id(operation_id);
	PERFORM payflow._require_text('name', name, 100);
	IF name !~ '^[A-Za-z0-9][A-Za-z0-9._-]*$' THEN
		RAISE EXCEPTION 'invalid payload name "%"', name
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = 'Names use letters, digits, ".", "_" and "-".';
	END IF;
	IF content IS NULL THEN
		RAISE EXCEPTION 'content must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	IF NOT EXISTS (SELECT FROM payflow.operations o WHERE o.id = payload_put.operation_id) THEN
		PERFORM payflow._unknown_operation(operation_id);
	END IF;
	IF step IS NULL OR worker_id IS NULL THEN
		RAISE EXCEPTION 'only the lease holder of a running step may write a payload'
			USING ERRCODE = 'PF004', HINT = 'Pass the step and the worker_id that claimed it.';
	END IF;
	d := payflow._step_definition(step);
	PERFORM payflow._require_worker(worker_id, 1);
	SELECT * INTO s FROM payflow.steps t
	 WHERE t.operation_id = payload_put.operation_id AND t.step_name = d.step_name;
	IF s.status IS DISTINCT FROM 'RUNNING' OR s.lease_owner IS DISTINCT FROM worker_id THEN
		RAISE EXCEPTION 'worker "%" does not hold the lease of step %', worker_id, d.step_name
			USING ERRCODE = 'PF004', DETAIL = format('Operation %s.', operation_id);
	ELSIF name IS DISTINCT FROM d.result_name THEN
		RAISE EXCEPTION 'step % writes only its result payload', d.step_name
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = CASE WHEN d.result_name IS NULL THEN format('Step %s has no result payload.', d.step_name)
								ELSE format('Its name is %s.', d.result_name) END;
	END IF;
	RETURN payflow._payload_write(operation_id, name, content);
END
$$;

DROP FUNCTION payflow.webhook_target(text);

-- Where and how to deliver the webhook of an operation's tenant:
-- {"tenant","url","secret"}, or NULL when the tenant has no webhook.  Only
-- for an event payflow published to operation-events, with exactly that
-- body (compared as JSON): anything else is PF008, for the worker to dead-
-- letter instead of signing it.
CREATE FUNCTION payflow.webhook_target(operation_id text, event_id uuid DEFAULT NULL, body text DEFAULT NULL)
	RETURNS jsonb
	LANGUAGE plpgsql STABLE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	v_tenant text;
BEGIN
	PERFORM payflow._require_operation_id(operation_id);
	SELECT o.tenant INTO v_tenant FROM payflow.operations o WHERE o.id = webhook_target.operation_id;
	IF NOT FOUND THEN
		PERFORM payflow._unknown_operation(operation_id);
	END IF;
	IF event_id IS NULL OR body IS NULL THEN
		RAISE EXCEPTION '% must not be null', CASE WHEN event_id IS NULL THEN 'event_id' ELSE 'body' END
			USING ERRCODE = 'null_value_not_allowed',
				  HINT = 'Pass the event being delivered: only events payflow published are signed.';
	END IF;
	PERFORM payflow._require_published(event_id, operation_id, body);
	RETURN (SELECT jsonb_build_object('tenant', w.tenant, 'url', w.url, 'secret', w.secret)
			  FROM payflow.webhooks w WHERE w.tenant = v_tenant);
END
$$;


REVOKE ALL ON payflow.operation_events FROM PUBLIC;
GRANT SELECT ON payflow.operation_events TO payflow_admin;
REVOKE ALL ON FUNCTION payflow._mask_card_numbers(text), payflow._mask_card_numbers(jsonb),
	payflow._require_own_ref(text, jsonb), payflow._require_published(uuid, text, text),
	payflow.payload_put(text, text, bytea, text, text), payflow.webhook_target(text, uuid, text) FROM PUBLIC;

DROP FUNCTION payflow.outbox_ack(uuid[], text[]);
-- Acknowledges published events: removes them from the outbox and logs
-- their message ids.  Only the relay holding an event's claim may: another
-- login could otherwise ack events that were never sent.  Returns how many
-- were acked (an event another relay claimed since is left to that one).
CREATE FUNCTION payflow.outbox_ack(event_ids uuid[], message_ids text[] DEFAULT NULL, relay_id text DEFAULT NULL)
	RETURNS integer
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	v_count integer;
BEGIN
	IF event_ids IS NULL THEN
		RAISE EXCEPTION 'event_ids must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	PERFORM payflow._require_text('relay_id', relay_id, 200);
	IF message_ids IS NOT NULL AND cardinality(message_ids) <> cardinality(event_ids) THEN
		RAISE EXCEPTION 'message_ids must have one entry per event id'
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = format('Got %s event ids and %s message ids.',
								  cardinality(event_ids), cardinality(message_ids));
	END IF;
	WITH acked AS (
		DELETE FROM payflow.outbox o
		 WHERE o.event_id = ANY (event_ids) AND o.claimed_by = outbox_ack.relay_id
		RETURNING o.event_id, o.operation_id, o.event_type, o.destination
	), ids AS (
		SELECT DISTINCT ON (m.event_id) m.event_id, m.message_id
		  FROM unnest(event_ids, coalesce(message_ids, '{}'::text[])) AS m(event_id, message_id)
		 ORDER BY m.event_id
	)
	INSERT INTO payflow.outbox_published (event_id, operation_id, event_type, destination, message_id)
	SELECT a.event_id, a.operation_id, a.event_type, a.destination, i.message_id
	  FROM acked a LEFT JOIN ids i ON i.event_id = a.event_id;
	GET DIAGNOSTICS v_count = ROW_COUNT;
	RETURN v_count;
END
$$;

DROP FUNCTION payflow.outbox_nack(uuid, text);
-- Returns an event that failed to publish to the outbox, available again
-- after a backoff (1 s doubling to 5 min).  Events are never dropped: a
-- destination that keeps failing shows in metrics() as outbox age.
CREATE FUNCTION payflow.outbox_nack(event_id uuid, error text, relay_id text DEFAULT NULL) RETURNS boolean
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
BEGIN
	IF event_id IS NULL THEN
		RAISE EXCEPTION 'event_id must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	PERFORM payflow._require_text('relay_id', relay_id, 200);
	UPDATE payflow.outbox o
	   SET claimed_by = NULL, claim_expires_at = NULL,
		   available_at = now() + payflow.backoff_delay(least(greatest(o.attempts - 1, 0), 30),
														'1 second', '5 minutes', 0.2),
		   last_error = left(error, 2000)
	 WHERE o.event_id = outbox_nack.event_id AND o.claimed_by = outbox_nack.relay_id;
	RETURN FOUND;
END
$$;

REVOKE ALL ON FUNCTION payflow.outbox_ack(uuid[], text[], text), payflow.outbox_nack(uuid, text, text) FROM PUBLIC;

-- payflow_worker split into one role per kind of edge process (each login
-- gets only what its program calls); payflow_worker holds them all.
DO $roles$
BEGIN
	IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'payflow_relay') THEN
		CREATE ROLE payflow_relay NOLOGIN;
	END IF;
	IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'payflow_step_worker') THEN
		CREATE ROLE payflow_step_worker NOLOGIN;
	END IF;
	IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'payflow_postprocess_worker') THEN
		CREATE ROLE payflow_postprocess_worker NOLOGIN;
	END IF;
	IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'payflow_webhook_worker') THEN
		CREATE ROLE payflow_webhook_worker NOLOGIN;
	END IF;
END
$roles$;
GRANT USAGE ON SCHEMA payflow TO payflow_relay, payflow_step_worker, payflow_postprocess_worker, payflow_webhook_worker;
REVOKE EXECUTE ON FUNCTION
	payflow.status(text),
	payflow.claim_step(text, text, text, integer),
	payflow.heartbeat(text, text, text, integer),
	payflow.save_step_ref(text, text, text, text),
	payflow.complete_step(text, text, text, jsonb, jsonb),
	payflow.fail_step(text, text, text, jsonb, boolean),
	payflow.payload_get(jsonb),
	payflow.payload_put(text, text, bytea, text, text),
	payflow.mark_consumed(text, uuid),
	payflow.record_dead_letter(text, text, jsonb, text),
	payflow.default_postprocess(text, jsonb),
	payflow.invoke_postprocess(regprocedure, text, jsonb),
	payflow.outbox_claim(integer, text, integer),
	payflow.outbox_ack(uuid[], text[], text),
	payflow.outbox_nack(uuid, text, text),
	payflow.backoff_delay(integer, interval, interval, float8),
	payflow.webhook_target(text, uuid, text),
	payflow.record_webhook_failure(uuid, text, text, integer, jsonb)
	FROM payflow_worker;
GRANT EXECUTE ON FUNCTION
	payflow.outbox_claim(integer, text, integer),
	payflow.outbox_ack(uuid[], text[], text),
	payflow.outbox_nack(uuid, text, text)
	TO payflow_relay;
GRANT EXECUTE ON FUNCTION
	payflow.status(text),
	payflow.claim_step(text, text, text, integer),
	payflow.heartbeat(text, text, text, integer),
	payflow.save_step_ref(text, text, text, text),
	payflow.complete_step(text, text, text, jsonb, jsonb),
	payflow.fail_step(text, text, text, jsonb, boolean),
	payflow.payload_get(jsonb),
	payflow.payload_put(text, text, bytea, text, text),
	payflow.mark_consumed(text, uuid),
	payflow.record_dead_letter(text, text, jsonb, text),
	payflow.backoff_delay(integer, interval, interval, float8)
	TO payflow_step_worker;
GRANT payflow_step_worker TO payflow_postprocess_worker;
GRANT EXECUTE ON FUNCTION
	payflow.default_postprocess(text, jsonb),
	payflow.invoke_postprocess(regprocedure, text, jsonb)
	TO payflow_postprocess_worker;
GRANT EXECUTE ON FUNCTION
	payflow.webhook_target(text, uuid, text),
	payflow.record_webhook_failure(uuid, text, text, integer, jsonb),
	payflow.mark_consumed(text, uuid),
	payflow.record_dead_letter(text, text, jsonb, text)
	TO payflow_webhook_worker;
GRANT payflow_relay, payflow_step_worker, payflow_postprocess_worker, payflow_webhook_worker TO payflow_worker;
