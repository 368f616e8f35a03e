CREATE OR REPLACE FUNCTION payflow.cancel(operation_id text, reason text DEFAULT NULL) RETURNS boolean
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	o payflow.operations;
BEGIN
	PERFORM payflow._require_operation_id(operation_id);
	IF reason IS NOT NULL THEN
		PERFORM payflow._require_text('reason', reason, 500);
	END IF;
	o := payflow._lock_operation(operation_id);
	IF NOT payflow._visible(o.tenant) THEN
		PERFORM payflow._unknown_operation(operation_id);
	END IF;
	IF o.status = 'CANCELLED' THEN
		RETURN false;
	ELSIF payflow._is_terminal(o.status) THEN
		RAISE EXCEPTION 'operation "%" is already %', o.id, o.status USING ERRCODE = 'PF006';
	END IF;
	PERFORM payflow._set_status(o.id, o.status, 'CANCELLED', coalesce(reason, 'cancelled'), session_user);
	UPDATE payflow.operations
	   SET error = jsonb_strip_nulls(jsonb_build_object('code', 'cancelled', 'message', reason))
	 WHERE id = o.id;
	UPDATE payflow.steps
	   SET status = 'CANCELLED', pending_since = NULL, next_attempt_at = NULL, finished_at = now()
	 WHERE steps.operation_id = o.id AND status IN ('PENDING', 'RETRY_WAIT');
	RETURN true;
END
$$;
