-- payflow @VERSION@, C-free flavour, registered with pg_tle (make dist-sql).
--
-- For Amazon RDS and Aurora with pg_tle: run it with psql as a role granted
-- pgtle_admin (e.g. the master user), then CREATE EXTENSION payflow (a
-- first install) or ALTER EXTENSION payflow UPDATE (an older version is
-- installed):
--
--     psql "$DATABASE_URL" -f payflow-tle--@VERSION@.sql
--     psql "$DATABASE_URL" -c 'CREATE EXTENSION payflow CASCADE'
--
-- Run again, it registers nothing twice.  It registers version @VERSION@ and
-- the update paths it carries, and makes @VERSION@ the default version.

\set ON_ERROR_STOP on
SET client_min_messages = warning;
BEGIN;

DO $payflow_tle$
BEGIN
	IF NOT EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'pg_tle') THEN
		RAISE EXCEPTION 'pg_tle is not installed in database "%"', current_database()
			USING ERRCODE = 'feature_not_supported',
				  HINT = 'Add pg_tle to shared_preload_libraries (on Amazon RDS and Aurora: in the DB parameter '
						 'group), restart, run CREATE EXTENSION pg_tle; and GRANT pgtle_admin TO the installing role.  '
						 'Or install dist/payflow--@VERSION@.sql with psql instead, which needs no pg_tle.';
	END IF;
END
$payflow_tle$;

SELECT NOT EXISTS (SELECT FROM pgtle.available_extensions() WHERE name = 'payflow') AS payflow_new,
	   NOT EXISTS (SELECT FROM pgtle.available_extension_versions()
					WHERE name = 'payflow' AND version = '@VERSION@') AS payflow_version_new \gset
\if :payflow_new
SELECT pgtle.install_extension('payflow', '@VERSION@',
	'tracked asynchronous payment operations: state machine, step leases, outbox, retries, purge (C-free flavour)',
$_pgtle_$
