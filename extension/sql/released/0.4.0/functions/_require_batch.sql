CREATE FUNCTION payflow._require_batch(arg_name text, n integer) RETURNS void
	LANGUAGE plpgsql IMMUTABLE
	AS $$
BEGIN
	IF n IS NULL THEN
		RAISE EXCEPTION '% must not be null or empty', arg_name USING ERRCODE = 'null_value_not_allowed';
	ELSIF n > 100 THEN
		RAISE EXCEPTION '% has % items; the limit is 100', arg_name, n USING ERRCODE = 'invalid_parameter_value';
	END IF;
END
$$;
