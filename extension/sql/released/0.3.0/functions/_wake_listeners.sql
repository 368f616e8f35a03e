CREATE FUNCTION payflow._wake_listeners() RETURNS void
	LANGUAGE sql VOLATILE
	AS $$ SELECT $$;
