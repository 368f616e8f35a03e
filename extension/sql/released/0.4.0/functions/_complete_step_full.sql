CREATE FUNCTION payflow._complete_step_full(operation_id text, step text, worker_id text, result jsonb,
											result_ref jsonb)
	RETURNS jsonb
	LANGUAGE plpgsql VOLATILE
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
	d := payflow._require_step_of(o, d.step_name);
	s := payflow._lock_step(o.id, d.step_name);
	IF s.status = 'SUCCEEDED' THEN
		RETURN payflow._completion_answer(o, d, s.completed_event_id);
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

	n := payflow._next_step(o.pipeline_version, d.position);
	IF n.step_name IS NOT NULL THEN
		-- A step without a result payload hands its own input on.
		INSERT INTO payflow.steps (operation_id, step_name, input_ref, pending_since)
		VALUES (o.id, n.step_name, coalesce(v_ref, s.input_ref), now());
		UPDATE payflow.operations SET current_step = n.step_name WHERE id = o.id;
		v_event_type := n.request_event;
		v_event_id := payflow._emit(o.id, o.payment_id, o.correlation_id, n.request_event,
									n.destination, 1, jsonb_build_object(n.input_field, coalesce(v_ref, s.input_ref)));
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
		UPDATE payflow.operations SET result = _complete_step_full.result WHERE id = o.id;
		SELECT p.completed_event INTO v_event_type FROM payflow.pipelines p WHERE p.version = o.pipeline_version;
		v_event_id := payflow._emit(o.id, o.payment_id, o.correlation_id, v_event_type,
									'operation-events', s.attempt,
									jsonb_build_object('status', d.done_status, 'result', result));
	END IF;

	v_answer := jsonb_build_object('action', 'completed', 'status', d.done_status,
								   'eventType', v_event_type, 'eventId', v_event_id);
	UPDATE payflow.steps
	   SET status = 'SUCCEEDED', result = _complete_step_full.result,
		   result_ref = v_ref,
		   completed_event_id = v_event_id, finished_at = now(),
		   lease_expires_at = NULL, pending_since = NULL, next_attempt_at = NULL
	 WHERE steps.operation_id = o.id AND step_name = d.step_name;
	RETURN v_answer;
END
$$;
