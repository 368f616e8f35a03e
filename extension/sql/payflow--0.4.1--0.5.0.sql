-- payflow 0.4.1 -> 0.5.0 (in development: storage v2, issue 25).
--
-- submit_many(jsonb): many submits in one statement and one commit
-- (submit_many.sql).  _admin_bad, which only raises, is VOLATILE: an
-- IMMUTABLE one was folded while a statement that calls it was planned.

\echo Use "ALTER EXTENSION payflow UPDATE TO '0.5.0'" to load this file. \quit

--@@ include submit_many.sql @@

ALTER FUNCTION payflow._admin_bad(text, text) VOLATILE;
