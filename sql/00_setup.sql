-- Helpers for the regression tests.  pf_try() runs a statement and shows
-- the SQLSTATE and message of its error, so expected output names the exact
-- code without depending on source line numbers or random ids.
CREATE FUNCTION pf_try(statement text)
	RETURNS TABLE (sqlstate text, message text)
	LANGUAGE plpgsql AS $$
BEGIN
	EXECUTE statement;
	RETURN QUERY SELECT '00000'::text, 'ok'::text;
EXCEPTION WHEN OTHERS THEN
	-- operation and event ids are random: mask them so expected output is stable
	RETURN QUERY SELECT SQLSTATE::text,
						regexp_replace(regexp_replace(SQLERRM, 'pay_[0-9A-HJKMNP-TV-Z]{26}', 'pay_<id>', 'g'),
									   '[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}', '<uuid>', 'g');
END
$$;

-- The same files test both flavours: the C extension (CREATE EXTENSION
-- payflow), and the C-free one, which is an extension when installed
-- through pg_tle and plain objects when installed with psql -f.
CREATE FUNCTION pf_installed_version() RETURNS text
	LANGUAGE plpgsql AS $$
BEGIN
	IF to_regprocedure('payflow._dist_version()') IS NOT NULL THEN
		RETURN payflow._dist_version();
	END IF;
	RETURN (SELECT extversion FROM pg_extension WHERE extname = 'payflow');
END
$$;
SELECT pf_installed_version() AS version;
SELECT payflow._flavour() IN ('c', 'sql') AS flavour_known;
SELECT nspname FROM pg_namespace WHERE nspname = 'payflow';
