CREATE OR REPLACE FUNCTION payflow._emit(p_operation_id text, p_payment_id text, p_correlation_id text,
							  p_event_type text, p_destination text, p_attempt integer,
							  p_extra jsonb)
	RETURNS uuid
	LANGUAGE plpgsql
	AS $$
DECLARE
	v_event_id uuid := gen_random_uuid();
BEGIN
	RETURN payflow._outbox_write(v_event_id, p_operation_id, p_payment_id, p_event_type, p_destination,
								 payflow._event_body(v_event_id, p_operation_id, p_payment_id, p_correlation_id,
													 p_event_type, p_attempt, p_extra));
END
$$;
