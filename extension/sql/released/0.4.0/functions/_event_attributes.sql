CREATE OR REPLACE FUNCTION payflow._event_attributes(p_operation_id text, p_correlation_id text, p_event_type text)
	RETURNS jsonb
	LANGUAGE sql STABLE
	AS $$
	SELECT jsonb_strip_nulls(jsonb_build_object('eventType', p_event_type,
												'operationId', p_operation_id,
												'correlationId', p_correlation_id))
$$;
