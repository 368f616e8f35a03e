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
