CREATE OR REPLACE FUNCTION payflow._outbox_write(p_event_id uuid, p_operation_id text, p_group_key text,
									  p_event_type text, p_destination text, p_body jsonb)
	RETURNS uuid
	LANGUAGE plpgsql
	AS $$
BEGIN
	PERFORM payflow._outbox_write_all(ARRAY[p_event_id], ARRAY[p_operation_id], ARRAY[p_group_key],
									  ARRAY[p_event_type], ARRAY[p_destination], ARRAY[p_body]);
	RETURN p_event_id;
END
$$;
