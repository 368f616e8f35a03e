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
