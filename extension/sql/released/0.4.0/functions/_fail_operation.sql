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
	PERFORM payflow._emit(o.id, o.payment_id, o.correlation_id,
						  (SELECT p.failed_event FROM payflow.pipelines p WHERE p.version = o.pipeline_version),
						  'operation-events', s.attempt,
						  jsonb_build_object('status', 'FAILED', 'failedStep', s.step_name, 'error', v_summary));
END
$$;
