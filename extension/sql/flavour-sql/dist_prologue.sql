-- payflow @VERSION@, C-free flavour, as one plain SQL file (make dist-sql).
--
-- For PostgreSQL servers that load no custom C library (Amazon RDS for
-- PostgreSQL, Aurora PostgreSQL).  Run it with psql as a role that is not
-- a superuser but may create roles and owns (or may create in) this
-- database, e.g. the RDS master user:
--
--     psql "$DATABASE_URL" -f payflow--@VERSION@.sql
--
-- Needs pgcrypto and pg_cron in this database (it stops at once and says
-- how to add what is missing).  One transaction: it installs everything
-- or nothing.  Run again, it leaves an install of the same version as it
-- is; a newer file updates an older install along the update scripts it
-- carries; an older file never downgrades.

\set ON_ERROR_STOP on
SET client_min_messages = warning;
BEGIN;

DO $payflow_dist$
BEGIN
	IF EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'payflow') THEN
		RAISE EXCEPTION 'payflow is installed in this database as an extension (version %)',
			(SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'payflow')
			USING ERRCODE = 'duplicate_object',
				  DETAIL = 'This file installs the C-free flavour without CREATE EXTENSION; one flavour per database.',
				  HINT = 'Keep the extension (ALTER EXTENSION payflow UPDATE), or drop it first.';
	END IF;
	IF to_regprocedure('payflow._dist_version()') IS NULL
	   AND (EXISTS (SELECT FROM pg_catalog.pg_class WHERE relnamespace = to_regnamespace('payflow'))
			OR EXISTS (SELECT FROM pg_catalog.pg_proc WHERE pronamespace = to_regnamespace('payflow'))
			OR EXISTS (SELECT FROM pg_catalog.pg_type WHERE typnamespace = to_regnamespace('payflow'))) THEN
		RAISE EXCEPTION 'schema "payflow" holds objects but no payflow install'
			USING ERRCODE = 'duplicate_schema',
				  HINT = 'Rename or drop that schema, or install payflow into another database.';
	END IF;
END
$payflow_dist$;

SELECT to_regprocedure('payflow._dist_version()') IS NULL AS payflow_fresh \gset
\if :payflow_fresh
