
-- The version of this plain SQL install (an extension keeps it in
-- pg_extension; this is what a later file reads to update it).
CREATE FUNCTION payflow._dist_version() RETURNS text
	LANGUAGE sql IMMUTABLE
	AS $$ SELECT '@VERSION@'::text $$;
REVOKE ALL ON FUNCTION payflow._dist_version() FROM PUBLIC;

\else
SELECT payflow._dist_version() AS payflow_installed \gset
