-- payflow, C flavour: the helpers behind SQL names that the C library
-- implements (extension/src/).  extension/sql/assemble.sh puts this file
-- where payflow.sql says "--@@ flavour helpers @@"; the C-free flavour puts
-- extension/sql/flavour-sql/helpers.sql there instead, with a twin of each
-- function under the same name, arguments and error codes.

-- Which flavour is installed: 'c' here, 'sql' in the C-free one.
CREATE FUNCTION payflow._flavour() RETURNS text
	LANGUAGE sql IMMUTABLE PARALLEL SAFE
	AS $$ SELECT 'c'::text $$;

-- A payflow GUC in its base unit; calling it loads the library (and so
-- defines the GUCs) in a backend that did not preload payflow.
CREATE FUNCTION payflow._setting(name text) RETURNS text
	AS 'MODULE_PATHNAME', 'payflow_setting' LANGUAGE C STABLE STRICT;

-- "pay_" + ULID, monotonic within a backend.
CREATE FUNCTION payflow._new_operation_id() RETURNS text
	AS 'MODULE_PATHNAME', 'payflow_new_operation_id' LANGUAGE C VOLATILE;

-- Hex of nbytes strong random bytes (API key secrets).
CREATE FUNCTION payflow._random_token(nbytes integer) RETURNS text
	AS 'MODULE_PATHNAME', 'payflow_random_token' LANGUAGE C VOLATILE STRICT;

-- min(base * 2^attempt, cap) plus up to jitter * that.
CREATE FUNCTION payflow.backoff_delay(attempt integer, base interval, cap interval, jitter float8 DEFAULT 0.2)
	RETURNS interval
	AS 'MODULE_PATHNAME', 'payflow_backoff_delay' LANGUAGE C VOLATILE STRICT PARALLEL SAFE;

-- Marks this transaction as one that wrote the outbox (relay wake-up at commit).
CREATE FUNCTION payflow._outbox_written() RETURNS void
	AS 'MODULE_PATHNAME', 'payflow_outbox_written' LANGUAGE C VOLATILE;

-- Marks this transaction as one that changed an operation's status
-- (NOTIFY payflow_status for event streams at commit).
CREATE FUNCTION payflow._status_changed() RETURNS void
	AS 'MODULE_PATHNAME', 'payflow_status_changed' LANGUAGE C VOLATILE;

-- The tenant payflow.authenticate() bound to this transaction, else ''.
-- Backend-local state, hence PARALLEL RESTRICTED.
CREATE FUNCTION payflow._current_tenant() RETURNS text
	AS 'MODULE_PATHNAME', 'payflow_current_tenant' LANGUAGE C STABLE PARALLEL RESTRICTED;

-- The role the caller acts as (login role or SET ROLE), also inside a
-- SECURITY DEFINER function, where current_user is the owner.
CREATE FUNCTION payflow._outer_role() RETURNS text
	AS 'MODULE_PATHNAME', 'payflow_outer_role' LANGUAGE C STABLE;

-- Binds a tenant to the current transaction; only authenticate() calls it.
CREATE FUNCTION payflow._set_tenant(tenant text) RETURNS void
	AS 'MODULE_PATHNAME', 'payflow_set_tenant' LANGUAGE C VOLATILE STRICT;

