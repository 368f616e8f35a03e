CREATE OR REPLACE FUNCTION payflow._set_status(p_operation_id text, p_from text, p_to text,
									p_reason text, p_actor text)
	RETURNS void
	LANGUAGE plpgsql
	AS $$
BEGIN
	UPDATE payflow.operations
	   SET status = p_to,
		   updated_at = now(),
		   terminal_at = CASE WHEN payflow._is_terminal(p_to) THEN now() END
	 WHERE id = p_operation_id;
	INSERT INTO payflow.operation_history (operation_id, from_status, to_status, reason, actor)
	VALUES (p_operation_id, p_from, p_to, left(p_reason, 500), p_actor);
	PERFORM payflow._status_changed();
END
$$;
