-- payflow: the pipeline as data.
--
-- payflow.pipelines and payflow.step_definitions (payflow.sql) are the one
-- definition of the pipeline: step order, each step's queue, request event,
-- statuses, input field, result payload name and retry policy, and the
-- terminal events.  The transition check (_guard_transition, a trigger on
-- payflow.operations), _create_operation, the step functions and the
-- workers read it.  This file holds the triggers, the look-ups the step
-- functions share, and the admin functions that write a new version:
-- add_step, remove_step and add_destination.  payflow.sql and the update
-- script that brings the definition both include it.

-- A step of a version (all NULL when the version has no such step).  The
-- look-ups are PL/pgSQL, whose plans are kept: as SQL functions reading a
-- table (never inlined) each call parsed and planned its query again
-- (118 us a call in the step-engine bench).
CREATE OR REPLACE FUNCTION payflow._step_of(p_version integer, p_step text) RETURNS payflow.step_definitions
	LANGUAGE plpgsql STABLE
	AS $$
DECLARE
	d payflow.step_definitions;
BEGIN
	SELECT * INTO d FROM payflow.step_definitions sd WHERE sd.pipeline_version = p_version AND sd.step_name = p_step;
	RETURN d;
END
$$;

-- The step after position p_position of a version (all NULL after the last).
CREATE OR REPLACE FUNCTION payflow._next_step(p_version integer, p_position integer) RETURNS payflow.step_definitions
	LANGUAGE plpgsql STABLE
	AS $$
DECLARE
	d payflow.step_definitions;
BEGIN
	SELECT * INTO d FROM payflow.step_definitions sd
	 WHERE sd.pipeline_version = p_version AND sd.position = p_position + 1;
	RETURN d;
END
$$;

-- "A, B and C": the steps of a version, for messages.
CREATE OR REPLACE FUNCTION payflow._step_list(p_version integer) RETURNS text
	LANGUAGE sql STABLE
	AS $$
	SELECT CASE WHEN count(*) <= 1 THEN string_agg(d.step_name, '')
				ELSE string_agg(d.step_name, ', ' ORDER BY d.position) FILTER (WHERE d.position < max_pos)
					 || ' and ' || max(d.step_name) FILTER (WHERE d.position = max_pos) END
	  FROM payflow.step_definitions d,
		   LATERAL (SELECT max(m.position) AS max_pos FROM payflow.step_definitions m
					 WHERE m.pipeline_version = p_version) m
	 WHERE d.pipeline_version = p_version
$$;

-- The one place every status change is checked: it follows the graph of
-- the operation's version, and the version never changes
-- (_guard_transition: C, or its PL/pgSQL twin).  An update that leaves
-- both alone costs nothing (WHEN).  AFTER, not BEFORE: PostgreSQL locks
-- the row before every update of a table with a BEFORE row trigger,
-- whatever its WHEN clause says (a lock record in the WAL before each
-- claim, heartbeat and completion of the open step in this row); an AFTER
-- trigger that raises undoes the update all the same.  New operations are written by
-- _create_operation only, in the first ready status of the newest version.
DROP TRIGGER IF EXISTS operations_transition ON payflow.operations;
CREATE TRIGGER operations_transition AFTER UPDATE OF status, pipeline_version ON payflow.operations
	FOR EACH ROW
	WHEN (OLD.status IS DISTINCT FROM NEW.status OR OLD.pipeline_version IS DISTINCT FROM NEW.pipeline_version)
	EXECUTE FUNCTION payflow._guard_transition();

---------------------------------------------------------------------------
-- Public API: the pipeline (workers read it, admins change it)
---------------------------------------------------------------------------

-- A version of the pipeline (NULL: the newest) as workers check it at
-- start-up: its steps in order with everything a worker needs, and the
-- terminal statuses and events.  22023 for a version that does not exist.
CREATE OR REPLACE FUNCTION payflow.pipeline(version integer DEFAULT NULL) RETURNS jsonb
	LANGUAGE plpgsql STABLE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	v_newest integer := payflow._pipeline_version();
	v_doc jsonb;
BEGIN
	SELECT jsonb_build_object(
			   'version', p.version,
			   'newest', p.version = v_newest,
			   'createdAt', payflow._iso(p.created_at),
			   'note', p.note,
			   'initialStatus', (SELECT d.ready_status FROM payflow.step_definitions d
								  WHERE d.pipeline_version = p.version ORDER BY d.position LIMIT 1),
			   'completedStatus', (SELECT d.done_status FROM payflow.step_definitions d
									WHERE d.pipeline_version = p.version ORDER BY d.position DESC LIMIT 1),
			   'failedStatus', 'FAILED',
			   'cancelledStatus', 'CANCELLED',
			   'completedEvent', p.completed_event,
			   'failedEvent', p.failed_event,
			   'terminalDestination', 'operation-events',
			   'steps', (SELECT jsonb_agg(jsonb_strip_nulls(jsonb_build_object(
								'step', d.step_name,
								'position', d.position,
								'readyStatus', d.ready_status,
								'runningStatus', d.running_status,
								'doneStatus', d.done_status,
								'requestEvent', d.request_event,
								'destination', d.destination,
								'inputField', d.input_field,
								'resultName', d.result_name,
								'maxAttempts', d.max_attempts,
								'retryBaseDelaySeconds', extract(epoch FROM d.retry_base_delay),
								'retryMaxDelaySeconds', extract(epoch FROM d.retry_max_delay))) ORDER BY d.position)
						   FROM payflow.step_definitions d WHERE d.pipeline_version = p.version))
	  INTO v_doc
	  FROM payflow.pipelines p
	 WHERE p.version = coalesce(pipeline.version, v_newest);
	IF v_doc IS NULL THEN
		RAISE EXCEPTION 'pipeline version % does not exist', version
			USING ERRCODE = 'invalid_parameter_value',
				  HINT = format('The newest version is %s.', v_newest);
	END IF;
	RETURN v_doc;
END
$$;
COMMENT ON FUNCTION payflow.pipeline(integer) IS
	'A pipeline version (NULL: the newest) as jsonb: steps with statuses, queue, events, input field, result name, retries; terminal statuses and events.';

-- Registers a queue a step may send its requests to.  True if added,
-- false if it was there already.  The relays need a queue URL for it
-- (PAYFLOW_QUEUE_URLS) before a step uses it.
CREATE OR REPLACE FUNCTION payflow.add_destination(name text, description text DEFAULT NULL) RETURNS boolean
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
BEGIN
	PERFORM payflow._require_text('name', name, 80);
	IF name !~ '^[A-Za-z0-9_-]{1,80}$' THEN
		RAISE EXCEPTION 'invalid destination name "%"', name
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = 'Destination names use letters, digits, "-" and "_" (an SQS queue name without .fifo).';
	END IF;
	IF description IS NOT NULL THEN
		PERFORM payflow._require_text('description', description, 500);
	END IF;
	INSERT INTO payflow.destinations AS t (name, description)
	VALUES (add_destination.name, add_destination.description)
	ON CONFLICT ON CONSTRAINT destinations_pkey DO NOTHING;
	RETURN FOUND;
END
$$;
COMMENT ON FUNCTION payflow.add_destination(text, text) IS
	'Registers a destination (queue) step requests may go to; false if known already.';

-- A status name of a new step (22004, 22023).
CREATE OR REPLACE FUNCTION payflow._require_status_name(arg_name text, value text) RETURNS void
	LANGUAGE plpgsql IMMUTABLE
	AS $$
BEGIN
	IF value IS NULL THEN
		RAISE EXCEPTION '% must not be null', arg_name USING ERRCODE = 'null_value_not_allowed';
	ELSIF value !~ '^[A-Z][A-Z0-9_]{0,63}$' THEN
		RAISE EXCEPTION 'invalid status name "%"', value
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = format('%s: upper-case letters, digits and "_", starting with a letter, at most 64.', arg_name);
	END IF;
END
$$;

-- Refuses a new status of a step that another part of the version already
-- has: one that an operation passes before the new step would make the
-- pipeline loop (PF010), any other would join two places of it (42710).
-- p_order maps the version's statuses to their place in the chain; those
-- at or before p_cut come before the new step.
CREATE OR REPLACE FUNCTION payflow._require_new_status(p_version integer, p_status text, p_cut integer,
													   p_step text)
	RETURNS void
	LANGUAGE plpgsql STABLE
	AS $$
DECLARE
	v_place integer;
	v_owner text;
BEGIN
	IF p_status IN ('FAILED', 'CANCELLED') THEN
		RAISE EXCEPTION 'status % is already a status of every pipeline', p_status
			USING ERRCODE = 'duplicate_object';
	END IF;
	SELECT x.place, x.step_name INTO v_place, v_owner
	  FROM (SELECT d.step_name, d.position * 3 AS place, d.ready_status AS s FROM payflow.step_definitions d
			 WHERE d.pipeline_version = p_version
			UNION ALL SELECT d.step_name, d.position * 3 + 1, d.running_status FROM payflow.step_definitions d
			 WHERE d.pipeline_version = p_version
			UNION ALL SELECT d.step_name, d.position * 3 + 2, d.done_status FROM payflow.step_definitions d
			 WHERE d.pipeline_version = p_version) x
	 WHERE x.s = p_status
	 ORDER BY x.place LIMIT 1;
	IF NOT FOUND THEN
		RETURN;
	ELSIF v_place <= p_cut THEN
		RAISE EXCEPTION 'status % would make the pipeline loop', p_status
			USING ERRCODE = 'PF010',
				  DETAIL = format('Operations reach %s at step %s, before step %s; a status is passed once.',
								  p_status, v_owner, p_step);
	END IF;
	RAISE EXCEPTION 'status % is already used by step %', p_status, v_owner
		USING ERRCODE = 'duplicate_object',
			  DETAIL = format('Pipeline version %s; every step needs statuses of its own.', p_version);
END
$$;

-- Adds a step to the pipeline, after or before one of the newest
-- version's steps, and returns the new version; new operations take it,
-- operations in flight finish on theirs.  The step waits in ready_status,
-- runs in running_status (may equal ready_status) and ends in done_status.
-- One boundary is given by its neighbour: after X it ends in the status X
-- ended in (X now ends in the new ready_status); before X it waits in the
-- status X waited in (X now waits in the new done_status).  Its input is
-- the previous step's result payload, or, when that step has no result
-- name, the previous step's own input (the request, for the first steps).
-- Nothing changes when it is refused: 22004/22023 bad arguments, 22023 a
-- position that does not exist, 42704 an unknown destination, 42710 a name,
-- event, queue, result name or status another step has, PF010 a cycle,
-- 54000 more than 30 steps.
CREATE OR REPLACE FUNCTION payflow.add_step(step text, request_event text, destination text,
											after_step text DEFAULT NULL, before_step text DEFAULT NULL,
											ready_status text DEFAULT NULL, running_status text DEFAULT NULL,
											done_status text DEFAULT NULL, input_field text DEFAULT 'input',
											result_name text DEFAULT NULL, max_attempts integer DEFAULT NULL,
											retry_base_delay interval DEFAULT NULL,
											retry_max_delay interval DEFAULT NULL, note text DEFAULT NULL)
	RETURNS integer
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
#variable_conflict use_variable
DECLARE
	v_version integer;
	v_new integer;
	a payflow.step_definitions;
	v_after boolean := after_step IS NOT NULL;
	v_ready text;
	v_done text;
	v_cut integer;
	v_other text;
BEGIN
	-- the arguments, before anything is read
	PERFORM payflow._require_text('step', step, 64);
	IF step !~ '^[A-Z][A-Z0-9_]{0,63}$' THEN
		RAISE EXCEPTION 'invalid step name "%"', step
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = 'Step names are upper-case letters, digits and "_", starting with a letter, at most 64.';
	END IF;
	PERFORM payflow._require_text('request_event', request_event, 100);
	IF request_event !~ '^[A-Z][A-Za-z0-9]*$' THEN
		RAISE EXCEPTION 'invalid event type "%"', request_event
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = 'Event types are letters and digits, starting with an upper-case letter (PascalCase).';
	END IF;
	PERFORM payflow._require_text('destination', destination, 80);
	PERFORM payflow._require_text('input_field', input_field, 64);
	IF input_field !~ '^[a-z][A-Za-z0-9]*$'
	   OR input_field IN ('eventType', 'eventVersion', 'eventId', 'operationId', 'paymentId', 'attempt',
						  'correlationId', 'createdAt', 'status', 'result', 'error', 'failedStep') THEN
		RAISE EXCEPTION 'invalid input field "%"', input_field
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = 'camelCase letters and digits, and none of the fields every event has.';
	END IF;
	IF result_name IS NOT NULL THEN
		PERFORM payflow._require_text('result_name', result_name, 100);
		IF result_name !~ '^[A-Za-z0-9][A-Za-z0-9._-]*$' OR result_name = 'request.json' THEN
			RAISE EXCEPTION 'invalid result name "%"', result_name
				USING ERRCODE = 'invalid_parameter_value',
					  DETAIL = 'Payload names use letters, digits, ".", "_" and "-"; request.json is the request''s.';
		END IF;
	END IF;
	IF after_step IS NULL AND before_step IS NULL THEN
		RAISE EXCEPTION 'after_step or before_step must be given' USING ERRCODE = 'null_value_not_allowed';
	ELSIF after_step IS NOT NULL AND before_step IS NOT NULL THEN
		RAISE EXCEPTION 'give after_step or before_step, not both' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	PERFORM payflow._require_status_name('running_status', running_status);
	IF v_after THEN
		PERFORM payflow._require_status_name('ready_status', ready_status);
		IF done_status IS NOT NULL THEN
			PERFORM payflow._require_status_name('done_status', done_status);
		END IF;
	ELSE
		PERFORM payflow._require_status_name('done_status', done_status);
		IF ready_status IS NOT NULL THEN
			PERFORM payflow._require_status_name('ready_status', ready_status);
		END IF;
	END IF;
	IF max_attempts IS NOT NULL AND max_attempts NOT BETWEEN 1 AND 1000 THEN
		RAISE EXCEPTION 'max_attempts must be between 1 and 1000' USING ERRCODE = 'invalid_parameter_value';
	ELSIF retry_base_delay < interval '0' OR retry_max_delay < interval '0' THEN
		RAISE EXCEPTION 'retry delays must not be negative' USING ERRCODE = 'invalid_parameter_value';
	ELSIF retry_base_delay > retry_max_delay THEN
		RAISE EXCEPTION 'retry_base_delay must not exceed retry_max_delay' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	IF note IS NOT NULL THEN
		PERFORM payflow._require_text('note', note, 500);
	END IF;

	-- One change at a time; readers (submit, workers) are not blocked.
	LOCK TABLE payflow.pipelines IN SHARE ROW EXCLUSIVE MODE;
	v_version := payflow._pipeline_version();
	a := payflow._step_of(v_version, coalesce(after_step, before_step));
	IF a.step_name IS NULL THEN
		RAISE EXCEPTION 'step % is not in pipeline version %', coalesce(after_step, before_step), v_version
			USING ERRCODE = 'invalid_parameter_value',
				  HINT = format('Its steps are %s.', payflow._step_list(v_version));
	END IF;
	IF (SELECT count(*) FROM payflow.step_definitions d WHERE d.pipeline_version = v_version) >= 30 THEN
		RAISE EXCEPTION 'pipeline version % has 30 steps, the most a pipeline may have', v_version
			USING ERRCODE = 'program_limit_exceeded';
	END IF;
	IF (payflow._step_of(v_version, step)).step_name IS NOT NULL THEN
		RAISE EXCEPTION 'step % already exists in pipeline version %', step, v_version
			USING ERRCODE = 'duplicate_object';
	END IF;
	IF NOT EXISTS (SELECT FROM payflow.destinations t WHERE t.name = destination) THEN
		RAISE EXCEPTION 'unknown destination "%"', destination
			USING ERRCODE = 'undefined_object',
				  HINT = 'Register it with payflow.add_destination() and give the relays its queue URL (PAYFLOW_QUEUE_URLS).';
	ELSIF destination = 'operation-events' THEN
		RAISE EXCEPTION 'destination operation-events carries the terminal events only'
			USING ERRCODE = 'invalid_parameter_value';
	END IF;
	SELECT d.step_name INTO v_other FROM payflow.step_definitions d
	 WHERE d.pipeline_version = v_version AND d.destination = destination;
	IF FOUND THEN
		RAISE EXCEPTION 'destination % already carries the requests of step %', destination, v_other
			USING ERRCODE = 'duplicate_object', HINT = 'Each step has a queue of its own; add one with payflow.add_destination().';
	END IF;
	SELECT coalesce((SELECT 'step ' || d.step_name FROM payflow.step_definitions d
					  WHERE d.pipeline_version = v_version AND d.request_event = request_event),
					(SELECT 'the terminal events' FROM payflow.pipelines p
					  WHERE p.version = v_version AND request_event IN (p.completed_event, p.failed_event)))
	  INTO v_other;
	IF v_other IS NOT NULL THEN
		RAISE EXCEPTION 'event type % is already used by %', request_event, v_other USING ERRCODE = 'duplicate_object';
	END IF;
	SELECT d.step_name INTO v_other FROM payflow.step_definitions d
	 WHERE d.pipeline_version = v_version AND d.result_name = result_name;
	IF FOUND THEN
		RAISE EXCEPTION 'result name % is already used by step %', result_name, v_other USING ERRCODE = 'duplicate_object';
	END IF;

	-- The statuses: the neighbour gives one boundary, the others are new.
	IF v_after THEN
		v_ready := ready_status;
		v_done := a.done_status;
		v_cut := a.position * 3 + 1;
		IF done_status IS DISTINCT FROM NULL AND done_status <> a.done_status THEN
			RAISE EXCEPTION 'a step after % ends in %', a.step_name, a.done_status
				USING ERRCODE = 'invalid_parameter_value',
					  DETAIL = format('%s now ends in the new step''s ready_status (%s); leave done_status out.',
									  a.step_name, v_ready);
		END IF;
		PERFORM payflow._require_new_status(v_version, v_ready, v_cut, step);
	ELSE
		v_ready := a.ready_status;
		v_done := done_status;
		v_cut := a.position * 3;
		IF ready_status IS DISTINCT FROM NULL AND ready_status <> a.ready_status THEN
			RAISE EXCEPTION 'a step before % waits in %', a.step_name, a.ready_status
				USING ERRCODE = 'invalid_parameter_value',
					  DETAIL = format('%s now waits in the new step''s done_status (%s); leave ready_status out.',
									  a.step_name, v_done);
		END IF;
		PERFORM payflow._require_new_status(v_version, v_done, v_cut, step);
	END IF;
	IF running_status = v_done THEN
		RAISE EXCEPTION 'status % would make the pipeline loop', running_status
			USING ERRCODE = 'PF010', DETAIL = 'A step''s running_status and done_status differ.';
	ELSIF running_status <> v_ready THEN
		PERFORM payflow._require_new_status(v_version, running_status, v_cut, step);
	END IF;
	IF NOT v_after AND v_done = running_status THEN
		RAISE EXCEPTION 'status % would make the pipeline loop', v_done USING ERRCODE = 'PF010';
	END IF;

	-- The new version: a copy with the step in place and its neighbour joined to it.
	v_new := v_version + 1;
	INSERT INTO payflow.pipelines (version, completed_event, failed_event, note)
	SELECT v_new, p.completed_event, p.failed_event,
		   coalesce(note, format('add_step %s %s %s', step, CASE WHEN v_after THEN 'after' ELSE 'before' END, a.step_name))
	  FROM payflow.pipelines p WHERE p.version = v_version;
	INSERT INTO payflow.step_definitions
		(pipeline_version, step_name, position, ready_status, running_status, done_status, request_event,
		 destination, input_field, result_name, max_attempts, retry_base_delay, retry_max_delay)
	SELECT v_new, d.step_name,
		   d.position + CASE WHEN d.position > a.position OR (NOT v_after AND d.position = a.position) THEN 1 ELSE 0 END,
		   CASE WHEN NOT v_after AND d.position = a.position THEN v_done ELSE d.ready_status END,
		   -- a step that claims without a status of its own keeps doing so
		   CASE WHEN NOT v_after AND d.position = a.position AND d.running_status = d.ready_status THEN v_done
				ELSE d.running_status END,
		   CASE WHEN v_after AND d.position = a.position THEN v_ready ELSE d.done_status END,
		   d.request_event, d.destination, d.input_field, d.result_name, d.max_attempts, d.retry_base_delay,
		   d.retry_max_delay
	  FROM payflow.step_definitions d WHERE d.pipeline_version = v_version
	UNION ALL
	SELECT v_new, step, CASE WHEN v_after THEN a.position + 1 ELSE a.position END, v_ready, running_status, v_done,
		   request_event, destination, input_field, result_name, max_attempts, retry_base_delay, retry_max_delay;
	RETURN v_new;
END
$$;
COMMENT ON FUNCTION payflow.add_step(text, text, text, text, text, text, text, text, text, text, integer, interval, interval, text) IS
	'Adds a step after or before a step of the newest pipeline version; returns the new version.';

-- Removes a step from the pipeline and returns the new version; refused
-- (PF009) while an operation in flight runs on a version that has it, so
-- that no operation loses a step it still has to pass.  Its neighbours
-- are joined: the step before it now ends where it ended (or, for the
-- first step, the next one waits where it waited).  22023 for a step not
-- in the newest version, or the only one.
CREATE OR REPLACE FUNCTION payflow.remove_step(step text, note text DEFAULT NULL) RETURNS integer
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	v_version integer;
	v_new integer;
	k payflow.step_definitions;
	v_in_use bigint;
BEGIN
	PERFORM payflow._require_text('step', step, 64);
	IF note IS NOT NULL THEN
		PERFORM payflow._require_text('note', note, 500);
	END IF;
	LOCK TABLE payflow.pipelines IN SHARE ROW EXCLUSIVE MODE;
	v_version := payflow._pipeline_version();
	k := payflow._step_of(v_version, step);
	IF k.step_name IS NULL THEN
		RAISE EXCEPTION 'step % is not in pipeline version %', step, v_version
			USING ERRCODE = 'invalid_parameter_value',
				  HINT = format('Its steps are %s.', payflow._step_list(v_version));
	ELSIF NOT EXISTS (SELECT FROM payflow.step_definitions d
					   WHERE d.pipeline_version = v_version AND d.step_name <> k.step_name) THEN
		RAISE EXCEPTION 'step % is the only step of the pipeline', step USING ERRCODE = 'invalid_parameter_value';
	END IF;
	-- Operations in flight hold their row locks only briefly; one that
	-- starts after this count takes the new version.
	SELECT count(*) INTO v_in_use
	  FROM payflow.operations o
	 WHERE o.terminal_at IS NULL
	   AND EXISTS (SELECT FROM payflow.step_definitions d
					WHERE d.pipeline_version = o.pipeline_version AND d.step_name = k.step_name);
	IF v_in_use > 0 THEN
		RAISE EXCEPTION 'step % is in use by % operation(s) in flight', step, v_in_use
			USING ERRCODE = 'PF009',
				  HINT = 'Steps are removed or moved only while no operation in flight has them; operations keep the version they started with.';
	END IF;

	v_new := v_version + 1;
	INSERT INTO payflow.pipelines (version, completed_event, failed_event, note)
	SELECT v_new, p.completed_event, p.failed_event, coalesce(remove_step.note, format('remove_step %s', remove_step.step))
	  FROM payflow.pipelines p WHERE p.version = v_version;
	INSERT INTO payflow.step_definitions
		(pipeline_version, step_name, position, ready_status, running_status, done_status, request_event,
		 destination, input_field, result_name, max_attempts, retry_base_delay, retry_max_delay)
	SELECT v_new, d.step_name,
		   d.position - CASE WHEN d.position > k.position THEN 1 ELSE 0 END,
		   CASE WHEN k.position = 1 AND d.position = 2 THEN k.ready_status ELSE d.ready_status END,
		   CASE WHEN k.position = 1 AND d.position = 2 AND d.running_status = d.ready_status THEN k.ready_status
				ELSE d.running_status END,
		   CASE WHEN d.position = k.position - 1 THEN k.done_status ELSE d.done_status END,
		   d.request_event, d.destination, d.input_field, d.result_name, d.max_attempts, d.retry_base_delay,
		   d.retry_max_delay
	  FROM payflow.step_definitions d
	 WHERE d.pipeline_version = v_version AND d.step_name <> k.step_name;
	RETURN v_new;
END
$$;
COMMENT ON FUNCTION payflow.remove_step(text, text) IS
	'Removes a step from the newest pipeline version (refused while operations in flight have it); returns the new version.';

REVOKE ALL ON FUNCTION
	payflow._step_of(integer, text),
	payflow._next_step(integer, integer),
	payflow._step_list(integer),
	payflow._require_status_name(text, text),
	payflow._require_new_status(integer, text, integer, text),
	payflow.pipeline(integer),
	payflow.add_destination(text, text),
	payflow.add_step(text, text, text, text, text, text, text, text, text, text, integer, interval, interval, text),
	payflow.remove_step(text, text)
	FROM PUBLIC;
-- Step workers check their configuration against it at start-up, and the
-- webhook worker the terminal events it delivers.
GRANT EXECUTE ON FUNCTION payflow.pipeline(integer) TO payflow_step_worker, payflow_postprocess_worker,
	payflow_webhook_worker;
GRANT EXECUTE ON FUNCTION
	payflow.add_destination(text, text),
	payflow.add_step(text, text, text, text, text, text, text, text, text, text, integer, interval, interval, text),
	payflow.remove_step(text, text)
	TO payflow_admin;
