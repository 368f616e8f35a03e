CREATE FUNCTION payflow._require_printable(arg_name text, value text) RETURNS void
	LANGUAGE plpgsql IMMUTABLE
	AS $$
BEGIN
	IF value ~ '[[:cntrl:]]' THEN
		RAISE EXCEPTION '% must not contain control characters', arg_name
			USING ERRCODE = 'invalid_parameter_value';
	END IF;
END
$$;
