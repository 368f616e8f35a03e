-- payflow, C-free flavour: SQL and PL/pgSQL twins of the C flavour's
-- helpers (extension/sql/flavour-c/helpers.sql), for servers that load no
-- custom C library (Amazon RDS, Aurora).  Each twin has the name,
-- arguments, result and error codes of its C original; the shared source
-- (payflow.sql) calls them without knowing which flavour it runs in.
-- extension/sql/assemble.sh puts this file where payflow.sql says
-- "--@@ flavour helpers @@".
--
-- What the C library keeps in backend memory or shared memory lives here
-- in tables the payflow roles cannot read or write, and in session
-- settings whose values are signed so that they cannot be forged:
--
--   settings     payflow.settings, written by payflow.set_setting() (admin);
--                a placeholder SET counts only for a superuser, as a
--                SUSET GUC would
--   tenant       payflow.tenant_binding, HMAC-signed and bound to this
--                backend and this transaction
--   wake-ups     no NOTIFY per commit: run_scheduler (pg_cron, every second)
--                notifies when there is something to publish or a status
--                moved; relays and event streams poll as a fallback

-- Needs pgcrypto (strong random bytes, HMAC) and pg_cron (the scheduler);
-- stop before anything is created, naming what is missing and how to add it.
DO $preflight$
DECLARE
	v_missing text[] := '{}';
	v_hints text[] := '{}';
BEGIN
	IF NOT EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'pgcrypto') THEN
		v_missing := v_missing || 'pgcrypto'::text;
		v_hints := v_hints || 'Run CREATE EXTENSION pgcrypto; in this database (a trusted extension: '
							  'the database owner or a role with CREATE on it can).'::text;
	END IF;
	IF NOT EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'pg_cron') THEN
		v_missing := v_missing || 'pg_cron'::text;
		v_hints := v_hints || ('Add pg_cron to shared_preload_libraries (on Amazon RDS and Aurora: '
							   'in the DB parameter group), set cron.database_name = '''
							   || current_database() || ''', restart, then run CREATE EXTENSION pg_cron; '
							   'in this database as the master user (rds_superuser) or a superuser.')::text;
	END IF;
	IF cardinality(v_missing) > 0 THEN
		RAISE EXCEPTION 'payflow needs the extension% % in database "%"',
			CASE WHEN cardinality(v_missing) > 1 THEN 's' ELSE '' END,
			array_to_string(v_missing, ' and '), current_database()
			USING ERRCODE = 'feature_not_supported',
				  DETAIL = 'Nothing was installed.',
				  HINT = array_to_string(v_hints, '  ');
	END IF;
END
$preflight$;

-- The C extension's control file makes the schema; here the script does
-- (or takes the empty one a dropped C extension leaves behind).
CREATE SCHEMA IF NOT EXISTS payflow;

-- Which flavour is installed: 'sql' here, 'c' in the C extension.
CREATE FUNCTION payflow._flavour() RETURNS text
	LANGUAGE sql IMMUTABLE PARALLEL SAFE
	AS $$ SELECT 'sql'::text $$;

-- pgcrypto, wherever it was installed.  SQL-standard bodies, so that the
-- dependency is recorded: DROP EXTENSION pgcrypto cannot break payflow.
DO $pgcrypto$
DECLARE
	v_schema name := (SELECT n.nspname FROM pg_catalog.pg_extension e
						JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace
					   WHERE e.extname = 'pgcrypto');
BEGIN
	EXECUTE format($f$
		CREATE FUNCTION payflow._random_bytes(n integer) RETURNS bytea
			LANGUAGE sql VOLATILE STRICT
			RETURN %I.gen_random_bytes(n)$f$, v_schema);
	EXECUTE format($f$
		CREATE FUNCTION payflow._hmac(data text, key bytea) RETURNS bytea
			LANGUAGE sql IMMUTABLE STRICT
			RETURN %I.hmac(pg_catalog.convert_to(data, 'UTF8'), key, 'sha256')$f$, v_schema);
END
$pgcrypto$;
COMMENT ON FUNCTION payflow._random_bytes(integer) IS 'n bytes from pgcrypto''s strong random source';

---------------------------------------------------------------------------
-- Settings
---------------------------------------------------------------------------

-- Policy settings of the C-free flavour, with their definitions: type,
-- base unit, default and range as payflow.c defines the GUCs
-- (test/integration/flavour_sql.sh compares the two).  In the C flavour
-- they are SUSET GUCs; here a placeholder "SET payflow.max_attempts = 1000"
-- is allowed to anyone, so the source of truth is this table, written only
-- through payflow.set_setting() and reset_setting() (payflow_admin).  One
-- row per setting, so that reading one is a single index probe.
CREATE TABLE payflow.settings (
	name text PRIMARY KEY,
	value text NOT NULL,			-- in the base unit, as _setting() returns it
	default_value text NOT NULL,
	kind text NOT NULL CHECK (kind IN ('integer', 'real')),
	unit text CHECK (unit IN ('ms', 's', 'B')),
	min_value numeric NOT NULL,
	max_value numeric NOT NULL,
	updated_at timestamptz,
	updated_by text
);

-- A setting's value as text with an optional unit ("30s", "1min", "64kB")
-- in its base unit, or 22023 with the message a GUC would give.
CREATE FUNCTION payflow._setting_parse(name text, value text) RETURNS text
	LANGUAGE plpgsql STABLE
	AS $$
DECLARE
	d payflow.settings;
	v_parts text[] := regexp_match(value, '^\s*(-?[0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*$');
	v_number numeric;
	v_factor numeric;
BEGIN
	SELECT * INTO d FROM payflow.settings s WHERE s.name = _setting_parse.name;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'unrecognized payflow setting "%"', name USING ERRCODE = 'undefined_object';
	END IF;
	IF v_parts IS NULL OR (d.kind = 'real' AND v_parts[2] <> '') THEN
		RAISE EXCEPTION 'invalid value for parameter "payflow.%": "%"', name, value
			USING ERRCODE = 'invalid_parameter_value';
	END IF;
	v_number := v_parts[1]::numeric;
	IF v_parts[2] = '' THEN
		v_factor := 1;
	ELSIF d.unit IN ('s', 'ms') THEN
		-- microseconds per unit, then per base unit
		v_factor := CASE v_parts[2] WHEN 'us' THEN 1 WHEN 'ms' THEN 1000 WHEN 's' THEN 1000000
					WHEN 'min' THEN 60000000 WHEN 'h' THEN 3600000000 WHEN 'd' THEN 86400000000 END
					/ CASE d.unit WHEN 's' THEN 1000000 ELSE 1000 END;
	ELSIF d.unit = 'B' THEN
		v_factor := CASE v_parts[2] WHEN 'B' THEN 1 WHEN 'kB' THEN 1024 WHEN 'MB' THEN 1048576
					WHEN 'GB' THEN 1073741824 WHEN 'TB' THEN 1099511627776 END;
	END IF;
	IF v_factor IS NULL THEN
		RAISE EXCEPTION 'invalid value for parameter "payflow.%": "%"', name, value
			USING ERRCODE = 'invalid_parameter_value',
				  HINT = CASE WHEN d.unit IN ('s', 'ms') THEN 'Valid units for this parameter are "us", "ms", "s", "min", "h", and "d".'
							  WHEN d.unit = 'B' THEN 'Valid units for this parameter are "B", "kB", "MB", "GB", and "TB".'
							  ELSE 'This parameter takes no unit.' END;
	END IF;
	v_number := v_number * v_factor;
	IF d.kind = 'integer' THEN
		v_number := round(v_number);
	END IF;
	IF v_number < d.min_value OR v_number > d.max_value THEN
		RAISE EXCEPTION '% is outside the valid range for parameter "payflow.%" (% .. %)',
			value, name, d.min_value, d.max_value
			USING ERRCODE = 'invalid_parameter_value';
	END IF;
	RETURN CASE WHEN d.kind = 'integer' THEN v_number::bigint::text ELSE v_number::float8::text END;
END
$$;

-- Whether the caller (login role or SET ROLE) is a superuser: a SET of a
-- payflow.* placeholder counts for such a caller only, as it would for a
-- SUSET GUC.
CREATE FUNCTION payflow._caller_is_superuser() RETURNS boolean
	LANGUAGE plpgsql STABLE
	AS $$
BEGIN
	RETURN coalesce((SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = payflow._outer_role()), false);
END
$$;

-- 42704, as the C flavour's _setting() raises it.
CREATE FUNCTION payflow._unknown_setting(name text) RETURNS text
	LANGUAGE plpgsql IMMUTABLE
	AS $$
BEGIN
	RAISE EXCEPTION 'unrecognized payflow setting "%"', name USING ERRCODE = 'undefined_object';
END
$$;

-- payflow._setting(name): a payflow setting in its base unit, without the
-- unit (seconds, bytes, ms), like the C flavour's: a superuser's SET of the
-- placeholder, else the value in payflow.settings.  Settings are read on
-- every hot path, so this function is not a table probe: it is generated
-- from payflow.settings (a trigger remakes it after every change, also
-- after a restore) as one CASE over constants, an SQL function the
-- planner inlines into its callers.
CREATE FUNCTION payflow._make_setting_function() RETURNS trigger
	LANGUAGE plpgsql
	AS $make$
BEGIN
	EXECUTE format($f$
		CREATE OR REPLACE FUNCTION payflow._setting(name text) RETURNS text
			LANGUAGE sql STABLE
			AS $body$
			SELECT CASE
				WHEN name IS NULL THEN NULL
				WHEN coalesce(current_setting('payflow.' || name, true), '') <> '' AND payflow._caller_is_superuser()
					THEN payflow._setting_parse(name, current_setting('payflow.' || name, true))
				ELSE CASE name %s ELSE payflow._unknown_setting(name) END
			END
			$body$
		$f$,
		(SELECT string_agg(format('WHEN %L THEN %L', s.name, s.value), ' ' ORDER BY s.name)
		   FROM payflow.settings s));
	RETURN NULL;
END
$make$;

CREATE TRIGGER settings_make_function AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON payflow.settings
	FOR EACH STATEMENT EXECUTE FUNCTION payflow._make_setting_function();

-- The settings, at their defaults (which also makes _setting())
INSERT INTO payflow.settings (name, value, default_value, kind, unit, min_value, max_value)
SELECT d.name, d.default_value, d.default_value, d.kind, d.unit, d.min_value, d.max_value
  FROM (VALUES
	('scheduler_naptime', 'integer', 'ms', '1000', 10, 3600000),
	('scheduler_batch_size', 'integer', NULL, '1000', 1, 1000000),
	('retry_base_delay', 'integer', 's', '10', 0, 2147483647),
	('retry_max_delay', 'integer', 's', '900', 0, 2147483647),
	('retry_jitter', 'real', NULL, '0.2', 0, 1),
	('max_attempts', 'integer', NULL, '5', 1, 1000),
	('retention_completed', 'integer', 's', '604800', 0, 2147483647),
	('retention_failed', 'integer', 's', '2592000', 0, 2147483647),
	('retention_payloads', 'integer', 's', '86400', 0, 2147483647),
	('retention_consumed', 'integer', 's', '1209600', 0, 2147483647),
	('retention_published', 'integer', 's', '3600', 0, 2147483647),
	('payload_max_bytes', 'integer', 'B', '262144', 1, 536870911),
	('stuck_after', 'integer', 's', '600', 1, 2147483647)
  ) AS d(name, kind, unit, default_value, min_value, max_value);

-- Changes a payflow setting for the whole database, from the next call on
-- (the C flavour's ALTER SYSTEM / ALTER DATABASE ... SET payflow.name).
-- Units as in postgresql.conf; returns the value in its base unit.
CREATE FUNCTION payflow.set_setting(name text, value text) RETURNS text
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	v_value text;
BEGIN
	PERFORM payflow._require_text('name', name, 64);
	PERFORM payflow._require_text('value', value, 100);
	v_value := payflow._setting_parse(name, value);
	UPDATE payflow.settings s
	   SET value = v_value, updated_at = now(), updated_by = payflow._outer_role()
	 WHERE s.name = set_setting.name;
	RETURN v_value;
END
$$;

-- Back to the default; false when it had the default already.
CREATE FUNCTION payflow.reset_setting(name text) RETURNS boolean
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	s payflow.settings;
BEGIN
	PERFORM payflow._require_text('name', name, 64);
	SELECT * INTO s FROM payflow.settings t WHERE t.name = reset_setting.name FOR UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'unrecognized payflow setting "%"', name USING ERRCODE = 'undefined_object';
	ELSIF s.value = s.default_value THEN
		RETURN false;
	END IF;
	UPDATE payflow.settings t
	   SET value = t.default_value, updated_at = now(), updated_by = payflow._outer_role()
	 WHERE t.name = s.name;
	RETURN true;
END
$$;

---------------------------------------------------------------------------
-- Ids, tokens, the state machine, backoff
---------------------------------------------------------------------------

-- The low "chars" * 5 bits of value in Crockford's base32.
CREATE FUNCTION payflow._crockford(value bigint, chars integer) RETURNS text
	LANGUAGE plpgsql IMMUTABLE STRICT
	AS $$
DECLARE
	c_alphabet constant text := '0123456789ABCDEFGHJKMNPQRSTVWXYZ';
	v_out text := '';
BEGIN
	FOR i IN REVERSE chars - 1..0 LOOP
		v_out := v_out || substr(c_alphabet, ((value >> (5 * i)) & 31)::integer + 1, 1);
	END LOOP;
	RETURN v_out;
END
$$;

-- "pay_" + ULID (48 bits of Unix ms, 80 random bits, Crockford base32),
-- monotonic within a backend as in operation_id.c: the last id and its
-- millisecond are kept in the session setting payflow.ulid_state, and an
-- id in the same millisecond (or after the clock stepped back) is the last
-- one plus one.  The random part is 12 strong random bytes in base64, each
-- character cut to its low 5 bits by translate(): 16 uniform base32
-- digits in one cheap expression.  A forged state can only make the
-- caller's own ids predictable or collide (the primary key refuses
-- those); it is ignored unless well-formed.
CREATE FUNCTION payflow._new_operation_id() RETURNS text
	LANGUAGE plpgsql VOLATILE
	AS $$
DECLARE
	c_alphabet constant text := '0123456789ABCDEFGHJKMNPQRSTVWXYZ';
	v_now bigint := floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint;
	v_state text := current_setting('payflow.ulid_state', true);
	v_ms bigint;
	v_id text;
	v_pos integer := 26;
	v_digit integer;
BEGIN
	IF v_state ~ '^[0-9]{1,14}:[0-9A-HJKMNP-TV-Z]{26}$' THEN
		v_ms := split_part(v_state, ':', 1)::bigint;
	END IF;
	IF v_ms IS NULL OR v_now > v_ms OR v_ms >= 281474976710655 THEN
		-- within 1024 ms of the last id, its first 8 time digits still hold
		v_id := CASE WHEN v_ms >> 10 = v_now >> 10
					 THEN substr(split_part(v_state, ':', 2), 1, 8)
						  || substr(c_alphabet, ((v_now >> 5) & 31)::integer + 1, 1)
						  || substr(c_alphabet, (v_now & 31)::integer + 1, 1)
					 ELSE payflow._crockford(v_now, 10) END
			|| translate(encode(payflow._random_bytes(12), 'base64'),
						 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/',
						 '0123456789ABCDEFGHJKMNPQRSTVWXYZ0123456789ABCDEFGHJKMNPQRSTVWXYZ');
		v_ms := v_now;
	ELSE
		-- the last id plus one, carrying from the right
		v_id := split_part(v_state, ':', 2);
		LOOP
			v_digit := strpos(c_alphabet, substr(v_id, v_pos, 1));
			IF v_digit < 32 THEN
				v_id := overlay(v_id PLACING substr(c_alphabet, v_digit + 1, 1) FROM v_pos FOR 1);
				EXIT;
			END IF;
			v_id := overlay(v_id PLACING '0' FROM v_pos FOR 1);
			v_pos := v_pos - 1;
			IF v_pos = 10 THEN
				-- 2^80 ids in one millisecond: borrow the next millisecond
				v_ms := v_ms + 1;
				v_id := payflow._crockford(v_ms, 10) || repeat('0', 16);
				EXIT;
			END IF;
		END LOOP;
	END IF;
	PERFORM set_config('payflow.ulid_state', v_ms || ':' || v_id, false);
	RETURN 'pay_' || v_id;
END
$$;

-- Hex of nbytes strong random bytes (API key and webhook secrets).
CREATE FUNCTION payflow._random_token(nbytes integer) RETURNS text
	LANGUAGE plpgsql VOLATILE STRICT
	AS $$
BEGIN
	IF nbytes < 16 OR nbytes > 64 THEN
		RAISE EXCEPTION 'token length must be between 16 and 64 bytes' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	RETURN encode(payflow._random_bytes(nbytes), 'hex');
END
$$;

-- min(base * 2^attempt, cap) plus up to jitter * that, computed as
-- backoff.c does: in microseconds, a month counted as 30 days, saturating
-- at cap without overflow.
CREATE FUNCTION payflow.backoff_delay(attempt integer, base interval, cap interval, jitter float8 DEFAULT 0.2)
	RETURNS interval
	LANGUAGE plpgsql VOLATILE STRICT PARALLEL SAFE
	AS $$
DECLARE
	v_base bigint := payflow._interval_usecs(base, 'base');
	v_cap bigint := payflow._interval_usecs(cap, 'cap');
	v_delay bigint;
BEGIN
	IF attempt < 0 THEN
		RAISE EXCEPTION 'attempt must not be negative' USING ERRCODE = 'invalid_parameter_value';
	ELSIF NOT (jitter >= 0.0 AND jitter <= 1.0) OR jitter = 'NaN' THEN
		RAISE EXCEPTION 'jitter must be between 0 and 1' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	IF v_base = 0 THEN
		v_delay := 0;
	ELSIF attempt >= 62 OR v_base > (v_cap >> attempt) THEN
		v_delay := v_cap;
	ELSE
		v_delay := v_base << attempt;
	END IF;
	IF jitter > 0.0 AND v_delay > 0 THEN
		v_delay := v_delay + trunc(random() * jitter * v_delay)::bigint;
	END IF;
	RETURN make_interval(secs => (v_delay / 1000000)::float8) + (v_delay % 1000000) * interval '1 microsecond';
END
$$;

-- An interval in microseconds as backoff.c counts it; 22023 if negative.
CREATE FUNCTION payflow._interval_usecs(value interval, arg_name text) RETURNS bigint
	LANGUAGE plpgsql IMMUTABLE STRICT
	AS $$
DECLARE
	v_months bigint := extract(year FROM value)::bigint * 12 + extract(month FROM value)::bigint;
	v_days bigint := extract(day FROM value)::bigint;
	v_usecs numeric;
BEGIN
	v_usecs := extract(epoch FROM value - make_interval(months => v_months::integer, days => v_days::integer)) * 1000000
			   + (v_days + v_months * 30) * 86400000000;
	IF v_usecs < 0 THEN
		RAISE EXCEPTION '% must not be negative', arg_name USING ERRCODE = 'invalid_parameter_value';
	END IF;
	RETURN v_usecs::bigint;
END
$$;

---------------------------------------------------------------------------
-- The tenant of the transaction
---------------------------------------------------------------------------

-- The key that signs tenant bindings: made at install, readable by the
-- owner only (SECURITY DEFINER functions below).
CREATE TABLE payflow._tenant_key (
	key bytea NOT NULL
);
INSERT INTO payflow._tenant_key (key) VALUES (payflow._random_bytes(32));

-- What ties a binding to this backend and this transaction: the backend's
-- pid and the transaction's start time in microseconds, which no two
-- transactions of one backend share.
CREATE FUNCTION payflow._binding_context() RETURNS text
	LANGUAGE sql STABLE
	AS $$
	SELECT pg_backend_pid() || ':' || (extract(epoch FROM transaction_timestamp()) * 1000000)::bigint
$$;

-- The tenant payflow.authenticate() bound to this transaction, else ''.
-- The binding is the session setting payflow.tenant_binding =
-- "<context>.<tenant hex>.<HMAC-SHA256 of both under payflow._tenant_key>".
-- Anyone may SET it; only this file's functions can sign it, a binding of
-- another transaction or backend has the wrong context, and a rolled-back
-- transaction or savepoint restores the value it replaced, as GUCs do.
CREATE FUNCTION payflow._current_tenant() RETURNS text
	LANGUAGE plpgsql STABLE PARALLEL RESTRICTED SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	v_binding text := current_setting('payflow.tenant_binding', true);
	v_parts text[];
BEGIN
	IF v_binding IS NULL OR v_binding = '' THEN
		RETURN '';
	END IF;
	v_parts := regexp_match(v_binding, '^([0-9]+:[0-9]+)\.([0-9a-f]*)\.([0-9a-f]{64})$');
	IF v_parts IS NULL OR v_parts[1] <> payflow._binding_context()
	   OR v_parts[3] <> encode(payflow._hmac(v_parts[1] || '.' || v_parts[2],
											  (SELECT k.key FROM payflow._tenant_key k)), 'hex') THEN
		RETURN '';
	END IF;
	RETURN convert_from(decode(v_parts[2], 'hex'), 'UTF8');
END
$$;

-- The role the caller acts as (login role, or the one it SET ROLE to),
-- also inside a SECURITY DEFINER function, where current_user is the
-- owner.  The "role" setting is what SET ROLE changed (membership is
-- checked when it is set, and SET ROLE is refused inside SECURITY DEFINER
-- functions); "none" means the session user.
CREATE FUNCTION payflow._outer_role() RETURNS text
	LANGUAGE sql STABLE
	AS $$
	SELECT CASE WHEN current_setting('role') = 'none' THEN session_user::text ELSE current_setting('role') END
$$;

-- Binds a tenant to the current transaction; only authenticate() calls it
-- (as payflow's owner, who may read the key).  A session-level set_config,
-- because a SET LOCAL made inside a function with a SET clause is undone
-- when the function returns; the context in the signed value ends the
-- binding with the transaction.
CREATE FUNCTION payflow._set_tenant(tenant text) RETURNS void
	LANGUAGE plpgsql VOLATILE STRICT
	AS $$
DECLARE
	v_payload text;
BEGIN
	IF octet_length(tenant) > 800 THEN
		RAISE EXCEPTION 'tenant is longer than 800 bytes' USING ERRCODE = 'string_data_right_truncation';
	END IF;
	v_payload := payflow._binding_context() || '.' || encode(convert_to(tenant, 'UTF8'), 'hex');
	PERFORM set_config('payflow.tenant_binding',
					   v_payload || '.' || encode(payflow._hmac(v_payload, (SELECT k.key FROM payflow._tenant_key k)), 'hex'),
					   false);
END
$$;

---------------------------------------------------------------------------
-- Wake-ups
---------------------------------------------------------------------------

-- No per-commit wake-up: a NOTIFY in every submit serialises commits on
-- the notification queue's lock.  run_scheduler notifies instead (below).
-- (PL/pgSQL: an empty one costs a third of an SQL function's call.)
CREATE FUNCTION payflow._outbox_written() RETURNS void
	LANGUAGE plpgsql VOLATILE
	AS $$ BEGIN END $$;

-- (payflow._status_changed: status_changes.sql)

-- The count of status changes (status_changes.sql) last announced with
-- NOTIFY payflow_status.  Unlogged: a crash forgets it and costs one extra
-- NOTIFY.
CREATE UNLOGGED TABLE payflow._wakeup_marks (
	history_last_value bigint NOT NULL
);
INSERT INTO payflow._wakeup_marks VALUES (0);
