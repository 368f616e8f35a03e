CREATE OR REPLACE FUNCTION payflow.status(operation_id text) RETURNS jsonb
	LANGUAGE plpgsql STABLE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	v_doc jsonb;
BEGIN
	PERFORM payflow._require_operation_id(operation_id);
	SELECT jsonb_build_object(
			   'operationId', o.id,
			   'paymentId', o.payment_id,
			   'status', o.status,
			   'currentStep', o.current_step,
			   'attempts', coalesce(s.attempt, 0),
			   'nextAttemptAt', payflow._iso(s.next_attempt_at),
			   'error', coalesce(o.error, CASE WHEN s.status = 'RETRY_WAIT' THEN s.last_error END),
			   'result', o.result,
			   'correlationId', o.correlation_id,
			   'terminal', payflow._is_terminal(o.status),
			   'createdAt', payflow._iso(o.created_at),
			   'updatedAt', payflow._iso(o.updated_at),
			   'completedAt', payflow._iso(o.terminal_at))
	  INTO v_doc
	  FROM payflow.operations o
	  LEFT JOIN payflow.steps s ON s.operation_id = o.id AND s.step_name = o.current_step
	 WHERE o.id = status.operation_id AND payflow._visible(o.tenant);
	IF v_doc IS NULL THEN
		PERFORM payflow._unknown_operation(operation_id);
	END IF;
	RETURN v_doc;
END
$$;
