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
	-- operation ids are random: mask them so expected output is stable
	RETURN QUERY SELECT SQLSTATE::text, regexp_replace(SQLERRM, 'pay_[0-9A-HJKMNP-TV-Z]{26}', 'pay_<id>', 'g');
END
$$;

SELECT extname, extversion FROM pg_extension WHERE extname = 'payflow';
SELECT nspname FROM pg_namespace WHERE nspname = 'payflow';
