CREATE FUNCTION payflow._require_items(items jsonb) RETURNS void
	LANGUAGE plpgsql IMMUTABLE
	AS $$
BEGIN
	IF items IS NULL THEN
		RAISE EXCEPTION 'items must not be null' USING ERRCODE = 'null_value_not_allowed';
	ELSIF jsonb_typeof(items) <> 'array' THEN
		RAISE EXCEPTION 'items must be a JSON array' USING ERRCODE = 'invalid_parameter_value',
			DETAIL = format('Got a JSON %s.', jsonb_typeof(items));
	ELSIF jsonb_array_length(items) > 100 THEN
		RAISE EXCEPTION 'items has % entries; the limit is 100', jsonb_array_length(items)
			USING ERRCODE = 'invalid_parameter_value';
	ELSIF EXISTS (SELECT FROM jsonb_array_elements(items) e WHERE jsonb_typeof(e) <> 'object') THEN
		RAISE EXCEPTION 'every item must be a JSON object' USING ERRCODE = 'invalid_parameter_value';
	END IF;
END
$$;
