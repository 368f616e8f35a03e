---------------------------------------------------------------------------
-- The admin API (new in 0.4.0): admin keys, the operator console's reads
-- and actions.  Included by payflow.sql and by the 0.3.0 -> 0.4.0 update
-- script (assemble.sh), in both flavours: plain SQL and PL/pgSQL only.
--
-- The HTTP edge logs in with payflow_app's rights and no admin role; it
-- gets payflow_console, whose functions below take an admin key as their
-- first argument and do nothing without a valid one.  So the key, not the
-- login, is the authority, and every action is recorded with the key's
-- name as its actor ("admin:<name>") in the operation's history and in
-- payflow.admin_actions.
---------------------------------------------------------------------------

DO $console_role$
BEGIN
	IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'payflow_console') THEN
		CREATE ROLE payflow_console NOLOGIN;
	END IF;
END
$console_role$;

-- Admin keys live beside the tenants' keys, so that revoke_api_key works
-- on both.  Their hash is taken over a prefixed secret: authenticate()
-- (sha256 of the plain secret) can never match one, so an admin key binds
-- no tenant and cannot submit payments.
ALTER TABLE payflow.api_keys ADD COLUMN kind text NOT NULL DEFAULT 'tenant'
	CONSTRAINT api_keys_kind_check CHECK (kind IN ('tenant', 'admin'));

-- Every action taken with an admin key, whatever it changed (webhook
-- replays touch no operation's history).  Written by operators only, so it
-- stays small; never purged, as an audit trail should not be.
CREATE TABLE payflow.admin_actions (
	id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	at timestamptz NOT NULL DEFAULT now(),
	key_id bigint NOT NULL,
	actor text NOT NULL,
	action text NOT NULL,
	target text NOT NULL,
	outcome jsonb NOT NULL
);

-- The admin list pages through operations newest first by id (a ULID,
-- so id order is creation order): the primary key serves it with no
-- filter, these two with a tenant or a payment id.  Neither column ever
-- changes, so status updates stay HOT; each costs an entry per submit
-- and one per terminal update (not HOT: operations_terminal_idx).  The
-- tenants' holds only operations that have one (0.5.0): an installation
-- without tenants (every tenant '') writes none of its two entries an
-- operation, and its list by tenant '' is the primary key's walk, where
-- every row matches.
CREATE INDEX operations_tenant_id_idx ON payflow.operations (tenant, id) WHERE tenant <> '';
-- By payment id only the operations submitted with an idempotency key of
-- their own (0.5.0): the key defaults to the payment id, and those whose
-- key is it are found by the idempotency key's index (its key first), so
-- most operations write none of this index's two entries.
CREATE INDEX operations_payment_id_idx ON payflow.operations (payment_id, id) WHERE payment_id <> idempotency_key;

---------------------------------------------------------------------------
-- Internal helpers
---------------------------------------------------------------------------

CREATE FUNCTION payflow._admin_key_hash(secret text) RETURNS bytea
	LANGUAGE sql IMMUTABLE STRICT
	AS $$ SELECT sha256(convert_to('payflow-admin:' || secret, 'UTF8')) $$;

-- The live admin key of this secret, else 28000 (no key, unknown, revoked)
-- or 42501 (a tenant's key: known, but not allowed here).
CREATE FUNCTION payflow._admin_key(admin_key text) RETURNS payflow.api_keys
	LANGUAGE plpgsql STABLE
	AS $$
DECLARE
	k payflow.api_keys;
BEGIN
	IF admin_key IS NOT NULL AND octet_length(admin_key) BETWEEN 1 AND 200 THEN
		SELECT * INTO k FROM payflow.api_keys a
		 WHERE a.key_hash = payflow._admin_key_hash(admin_key) AND a.kind = 'admin' AND a.revoked_at IS NULL;
		IF FOUND THEN
			RETURN k;
		END IF;
		IF EXISTS (SELECT FROM payflow.api_keys a
					WHERE a.key_hash = sha256(convert_to(admin_key, 'UTF8')) AND a.revoked_at IS NULL) THEN
			RAISE EXCEPTION 'a tenant API key cannot use the admin API'
				USING ERRCODE = 'insufficient_privilege',
					  HINT = 'Use a key made by payflow.create_admin_key().';
		END IF;
	END IF;
	RAISE EXCEPTION 'invalid admin key'
		USING ERRCODE = 'invalid_authorization_specification',
			  HINT = 'Use a key made by payflow.create_admin_key() that was not revoked.';
END
$$;

CREATE FUNCTION payflow._admin_actor(k payflow.api_keys) RETURNS text
	LANGUAGE sql IMMUTABLE
	AS $$ SELECT 'admin:' || k.name $$;

CREATE FUNCTION payflow._admin_record(k payflow.api_keys, p_action text, p_target text, p_outcome jsonb)
	RETURNS void
	LANGUAGE sql VOLATILE
	AS $$
	INSERT INTO payflow.admin_actions (key_id, actor, action, target, outcome)
	VALUES (k.id, payflow._admin_actor(k), p_action, p_target, p_outcome)
$$;

-- 22023 naming the parameter, in the form the HTTP edge reads the name
-- from: invalid parameter "<name>": <why>.
CREATE FUNCTION payflow._admin_bad(p_name text, p_why text) RETURNS void
	LANGUAGE plpgsql VOLATILE
	AS $$
BEGIN
	RAISE EXCEPTION 'invalid parameter "%": %', p_name, p_why USING ERRCODE = 'invalid_parameter_value';
END
$$;

-- A filter document: a JSON object of strings (a query string's
-- parameters), with only the names allowed.
CREATE FUNCTION payflow._admin_filters(filters jsonb, allowed text[]) RETURNS jsonb
	LANGUAGE plpgsql IMMUTABLE
	AS $$
DECLARE
	v_name text;
BEGIN
	IF filters IS NULL THEN
		RETURN '{}'::jsonb;
	ELSIF jsonb_typeof(filters) <> 'object' THEN
		PERFORM payflow._admin_bad('filters', 'must be an object');
	END IF;
	FOR v_name IN SELECT k FROM jsonb_object_keys(filters) k ORDER BY k LOOP
		IF NOT v_name = ANY (allowed) THEN
			PERFORM payflow._admin_bad(v_name, 'unknown parameter (known: ' || array_to_string(allowed, ', ') || ')');
		ELSIF jsonb_typeof(filters -> v_name) <> 'string' THEN
			PERFORM payflow._admin_bad(v_name, 'must be a string');
		ELSIF length(filters ->> v_name) > 200 THEN
			PERFORM payflow._admin_bad(v_name, 'is longer than 200 characters');
		END IF;
	END LOOP;
	RETURN filters;
END
$$;

CREATE FUNCTION payflow._admin_limit(filters jsonb, p_default integer, p_max integer) RETURNS integer
	LANGUAGE plpgsql IMMUTABLE
	AS $$
DECLARE
	v text := filters ->> 'limit';
BEGIN
	IF v IS NULL THEN
		RETURN p_default;
	ELSIF v !~ '^[0-9]{1,6}$' OR v::integer NOT BETWEEN 1 AND p_max THEN
		PERFORM payflow._admin_bad('limit', format('must be an integer from 1 to %s', p_max));
	END IF;
	RETURN v::integer;
END
$$;

CREATE FUNCTION payflow._admin_time(filters jsonb, p_name text) RETURNS timestamptz
	LANGUAGE plpgsql STABLE
	AS $$
DECLARE
	v text := filters ->> p_name;
BEGIN
	IF v IS NULL THEN
		RETURN NULL;
	-- ISO 8601 only: PostgreSQL would also take "now", "epoch" or "tomorrow"
	ELSIF v !~ '^[0-9]{4}-[0-9]{2}-[0-9]{2}([T ][0-9]{2}:[0-9]{2}(:[0-9]{2}(\.[0-9]{1,6})?)?(Z|[+-][0-9]{2}(:?[0-9]{2})?)?)?$' THEN
		PERFORM payflow._admin_bad(p_name, 'must be an ISO 8601 date or time, e.g. 2025-01-31T12:00:00Z');
	END IF;
	BEGIN
		RETURN v::timestamptz;
	EXCEPTION WHEN datetime_field_overflow OR invalid_datetime_format OR invalid_time_zone_displacement_value THEN
		PERFORM payflow._admin_bad(p_name, 'is not a valid date or time');
	END;
END
$$;

CREATE FUNCTION payflow._admin_id(filters jsonb, p_name text) RETURNS bigint
	LANGUAGE plpgsql IMMUTABLE
	AS $$
DECLARE
	v text := filters ->> p_name;
BEGIN
	IF v IS NULL THEN
		RETURN NULL;
	ELSIF v !~ '^[1-9][0-9]{0,17}$' THEN
		PERFORM payflow._admin_bad(p_name, 'must be a positive integer');
	END IF;
	RETURN v::bigint;
END
$$;

-- The smallest operation id of a millisecond: "pay_" and its 10 time
-- digits in Crockford base32, then the lowest random part.
CREATE FUNCTION payflow._admin_id_floor(ts timestamptz) RETURNS text
	LANGUAGE sql IMMUTABLE STRICT
	AS $$
	SELECT 'pay_' || string_agg(substr('0123456789ABCDEFGHJKMNPQRSTVWXYZ',
									   ((ms >> (5 * (9 - i))) & 31)::integer + 1, 1), '' ORDER BY i)
		   || repeat('0', 16)
	  FROM (SELECT greatest(least(floor(extract(epoch FROM ts) * 1000)::bigint, 281474976710655), 0) AS ms) t,
		   generate_series(0, 9) i
$$;

-- One operation as the admin list shows it: no details, no result.
CREATE FUNCTION payflow._admin_operation_row(o payflow.operations) RETURNS jsonb
	LANGUAGE sql STABLE
	AS $$
	SELECT jsonb_build_object(
		'operationId', o.id, 'tenant', o.tenant, 'paymentId', o.payment_id, 'status', o.status,
		'currentStep', o.current_step, 'error', o.error, 'correlationId', o.correlation_id,
		'terminal', payflow._is_terminal(o.status),
		'createdAt', payflow._iso(o.created_at), 'updatedAt', payflow._iso(o.updated_at),
		'completedAt', payflow._iso(o.terminal_at))
$$;

---------------------------------------------------------------------------
-- Public API
---------------------------------------------------------------------------

-- Creates an admin key for the admin API and the console: the secret
-- ("pfa_" and 64 hex digits) is returned once, only a hash is stored.
-- payflow.revoke_api_key(id) revokes it (ids in payflow.api_keys, kind
-- 'admin').
CREATE FUNCTION payflow.create_admin_key(name text) RETURNS text
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	v_secret text := 'pfa_' || payflow._random_token(32);
BEGIN
	PERFORM payflow._require_text('name', name, 200);
	PERFORM payflow._require_printable('name', name);
	INSERT INTO payflow.api_keys (tenant, name, key_hash, kind)
	VALUES ('', create_admin_key.name, payflow._admin_key_hash(v_secret), 'admin');
	RETURN v_secret;
END
$$;

-- Who an admin key is: {"keyId","name","actor"} (the console's sign-in).
CREATE FUNCTION payflow.admin_whoami(admin_key text) RETURNS jsonb
	LANGUAGE plpgsql STABLE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	k payflow.api_keys := payflow._admin_key(admin_key);
BEGIN
	RETURN jsonb_build_object('keyId', k.id, 'name', k.name, 'actor', payflow._admin_actor(k));
END
$$;

-- (admin_operations, the list: admin_list.sql)

-- (admin_cancel and admin_replay: admin_actions.sql)

-- The ids of a replay of many: a JSON array of 1 to 100 positive integers.
CREATE FUNCTION payflow._admin_ids(ids jsonb) RETURNS bigint[]
	LANGUAGE plpgsql IMMUTABLE
	AS $$
BEGIN
	IF ids IS NULL OR jsonb_typeof(ids) <> 'array' OR jsonb_array_length(ids) NOT BETWEEN 1 AND 100
	   OR EXISTS (SELECT FROM jsonb_array_elements(ids) e
				   WHERE jsonb_typeof(e) <> 'number' OR e::text !~ '^[1-9][0-9]{0,17}$') THEN
		PERFORM payflow._admin_bad('ids', 'must be an array of 1 to 100 ids (positive integers)');
	END IF;
	RETURN ARRAY(SELECT DISTINCT e::text::bigint FROM jsonb_array_elements(ids) e ORDER BY 1);
END
$$;

-- Replays dead letters, one or many (ids: a JSON array): each step dead
-- letter re-runs its FAILED operation; each id's outcome is reported on
-- its own, so one that cannot be replayed does not stop the others.
-- {"results":[{"id","replayed","operationId","code","message"}]}
CREATE FUNCTION payflow.admin_replay_dead_letters(admin_key text, ids jsonb) RETURNS jsonb
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	k payflow.api_keys := payflow._admin_key(admin_key);
	v_ids bigint[] := payflow._admin_ids(ids);
	d payflow.dead_letters;
	v_id bigint;
	v_results jsonb := '[]';
	v_one jsonb;
BEGIN
	FOREACH v_id IN ARRAY v_ids LOOP
		SELECT * INTO d FROM payflow.dead_letters x WHERE x.id = v_id;
		BEGIN
			IF d.id IS NULL THEN
				RAISE EXCEPTION 'dead letter % does not exist', v_id USING ERRCODE = 'no_data_found';
			ELSIF d.replayed_at IS NOT NULL THEN
				RAISE EXCEPTION 'dead letter % was replayed already', v_id USING ERRCODE = 'PF009';
			ELSIF d.source <> 'step' OR d.operation_id IS NULL THEN
				RAISE EXCEPTION 'dead letter % is a message no worker could read: there is no operation to re-run', v_id
					USING ERRCODE = 'PF009';
			END IF;
			v_one := payflow.admin_replay(admin_key, d.operation_id);
			v_one := jsonb_build_object('id', v_id, 'replayed', true, 'operationId', d.operation_id);
		EXCEPTION WHEN no_data_found OR SQLSTATE 'PF009' OR SQLSTATE 'PF003' OR SQLSTATE 'PF001' THEN
			v_one := jsonb_build_object('id', v_id, 'replayed', false, 'operationId', d.operation_id,
										'code', SQLSTATE, 'message', SQLERRM);
			PERFORM payflow._admin_record(k, 'replay_dead_letter', v_id::text, v_one);
		END;
		v_results := v_results || jsonb_build_array(v_one);
		d := NULL;
	END LOOP;
	RETURN jsonb_build_object('results', v_results);
END
$$;

-- Webhook deliveries that failed, newest first: open, after, limit.  No
-- bodies, and the URL without its query (it may carry a token).
CREATE FUNCTION payflow.admin_webhook_failures(admin_key text, filters jsonb DEFAULT '{}') RETURNS jsonb
	LANGUAGE plpgsql STABLE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	k payflow.api_keys := payflow._admin_key(admin_key);
	f jsonb := payflow._admin_filters(filters, ARRAY['open', 'after', 'limit']);
	v_limit integer := payflow._admin_limit(f, 50, 200);
	v_after bigint := payflow._admin_id(f, 'after');
	v_open text := coalesce(f ->> 'open', 'true');
	v_rows jsonb;
BEGIN
	IF v_open NOT IN ('true', 'false', 'all') THEN
		PERFORM payflow._admin_bad('open', 'must be true, false or all');
	END IF;
	SELECT coalesce(jsonb_agg(jsonb_build_object(
			   'id', w.id, 'eventId', w.event_id, 'eventType', w.body ->> 'eventType',
			   'operationId', w.operation_id, 'tenant', w.tenant,
			   'url', regexp_replace(w.url, '[?#].*$', ''), 'attempts', w.attempts, 'error', w.error,
			   'createdAt', payflow._iso(w.created_at), 'updatedAt', payflow._iso(w.updated_at),
			   'replayedAt', payflow._iso(w.replayed_at)) ORDER BY w.id DESC), '[]')
	  INTO v_rows
	  FROM (SELECT * FROM payflow.webhook_failures x
			 WHERE (v_after IS NULL OR x.id < v_after)
			   AND (v_open = 'all' OR (x.replayed_at IS NULL) = (v_open = 'true'))
			 ORDER BY x.id DESC LIMIT v_limit + 1) w;
	RETURN jsonb_build_object(
		'items', CASE WHEN jsonb_array_length(v_rows) > v_limit THEN v_rows - v_limit ELSE v_rows END,
		'next', CASE WHEN jsonb_array_length(v_rows) > v_limit THEN v_rows -> (v_limit - 1) ->> 'id' END);
END
$$;

-- Sends failed webhook deliveries again (payflow.replay_webhook), one or
-- many.  {"results":[{"id","replayed","code","message"}]}
CREATE FUNCTION payflow.admin_replay_webhook_failures(admin_key text, ids jsonb) RETURNS jsonb
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	k payflow.api_keys := payflow._admin_key(admin_key);
	v_ids bigint[] := payflow._admin_ids(ids);
	v_id bigint;
	v_results jsonb := '[]';
	v_one jsonb;
BEGIN
	FOREACH v_id IN ARRAY v_ids LOOP
		BEGIN
			IF NOT payflow.replay_webhook(v_id) THEN
				RAISE EXCEPTION 'webhook failure % was replayed already', v_id USING ERRCODE = 'PF009';
			END IF;
			v_one := jsonb_build_object('id', v_id, 'replayed', true);
		EXCEPTION WHEN no_data_found OR SQLSTATE 'PF009' THEN
			v_one := jsonb_build_object('id', v_id, 'replayed', false, 'code', SQLSTATE, 'message', SQLERRM);
		END;
		PERFORM payflow._admin_record(k, 'replay_webhook', v_id::text, v_one);
		v_results := v_results || jsonb_build_array(v_one);
	END LOOP;
	RETURN jsonb_build_object('results', v_results);
END
$$;

-- Figures for the console's charts: payflow.metrics() now, and the
-- operations that ended over the last hour (window "hour", per minute) or
-- day ("day", per 15 minutes), by status, through the terminal_at index.
-- {"now":metrics(),"window","bucketSeconds","buckets":[{"at","completed","failed","cancelled"}]}
CREATE FUNCTION payflow.admin_metrics(admin_key text, filters jsonb DEFAULT '{}') RETURNS jsonb
	LANGUAGE plpgsql STABLE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	k payflow.api_keys := payflow._admin_key(admin_key);
	f jsonb := payflow._admin_filters(filters, ARRAY['window']);
	v_window text := coalesce(f ->> 'window', 'hour');
	v_bucket interval;
	v_span interval;
	v_end timestamptz;
BEGIN
	IF v_window = 'hour' THEN
		v_bucket := interval '1 minute';
		v_span := interval '1 hour';
	ELSIF v_window = 'day' THEN
		v_bucket := interval '15 minutes';
		v_span := interval '1 day';
	ELSE
		PERFORM payflow._admin_bad('window', 'must be hour or day');
	END IF;
	v_end := date_bin(v_bucket, now(), timestamptz '2000-01-01 00:00:00+00') + v_bucket;
	RETURN jsonb_build_object(
		'now', payflow.metrics(),
		'window', v_window,
		'bucketSeconds', extract(epoch FROM v_bucket)::integer,
		'buckets', (
			SELECT jsonb_agg(jsonb_build_object(
					   'at', payflow._iso(b.at),
					   'completed', coalesce(c.completed, 0), 'failed', coalesce(c.failed, 0),
					   'cancelled', coalesce(c.cancelled, 0)) ORDER BY b.at)
			  FROM generate_series(v_end - v_span, v_end - v_bucket, v_bucket) AS b(at)
			  LEFT JOIN (
				SELECT date_bin(v_bucket, o.terminal_at, timestamptz '2000-01-01 00:00:00+00') AS at,
					   count(*) FILTER (WHERE o.status = 'COMPLETED') AS completed,
					   count(*) FILTER (WHERE o.status = 'FAILED') AS failed,
					   count(*) FILTER (WHERE o.status = 'CANCELLED') AS cancelled
				  FROM payflow.operations o
				 WHERE o.terminal_at IS NOT NULL AND o.terminal_at >= v_end - v_span
				 GROUP BY 1) c ON c.at = b.at));
END
$$;

---------------------------------------------------------------------------
-- Privileges
---------------------------------------------------------------------------

REVOKE ALL ON TABLE payflow.admin_actions, payflow.step_attempts FROM PUBLIC;
GRANT SELECT ON TABLE payflow.admin_actions, payflow.step_attempts TO payflow_admin;
GRANT SELECT (kind) ON payflow.api_keys TO payflow_admin;
GRANT USAGE ON SCHEMA payflow TO payflow_console;

REVOKE ALL ON FUNCTION
	payflow._admin_key_hash(text),
	payflow._admin_key(text),
	payflow._admin_actor(payflow.api_keys),
	payflow._admin_record(payflow.api_keys, text, text, jsonb),
	payflow._admin_bad(text, text),
	payflow._admin_filters(jsonb, text[]),
	payflow._admin_limit(jsonb, integer, integer),
	payflow._admin_time(jsonb, text),
	payflow._admin_id(jsonb, text),
	payflow._admin_id_floor(timestamptz),
	payflow._admin_ids(jsonb),
	payflow._admin_operation_row(payflow.operations),
	payflow.create_admin_key(text),
	payflow.admin_whoami(text),
	payflow.admin_operation(text, text),
	payflow.admin_cancel(text, text, text),
	payflow.admin_replay(text, text),
	payflow.admin_dead_letters(text, jsonb),
	payflow.admin_replay_dead_letters(text, jsonb),
	payflow.admin_webhook_failures(text, jsonb),
	payflow.admin_replay_webhook_failures(text, jsonb),
	payflow.admin_metrics(text, jsonb)
	FROM PUBLIC;
GRANT EXECUTE ON FUNCTION payflow.create_admin_key(text) TO payflow_admin;
GRANT EXECUTE ON FUNCTION
	payflow.admin_whoami(text),
	payflow.admin_operation(text, text),
	payflow.admin_cancel(text, text, text),
	payflow.admin_replay(text, text),
	payflow.admin_dead_letters(text, jsonb),
	payflow.admin_replay_dead_letters(text, jsonb),
	payflow.admin_webhook_failures(text, jsonb),
	payflow.admin_replay_webhook_failures(text, jsonb),
	payflow.admin_metrics(text, jsonb)
	TO payflow_console;
