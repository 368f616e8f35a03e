-- payflow 0.4.0 -> 0.4.1.
--
-- Backups: every table whose rows are data, and their identity sequences,
-- are marked for pg_dump (backup.sql says which, and what stays out).
-- Nothing else changes.

\echo Use "ALTER EXTENSION payflow UPDATE TO '0.4.1'" to load this file. \quit

--@@ include released/0.4.1/backup.sql @@
