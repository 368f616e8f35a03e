-- payflow: webhooks.
--
-- Where a tenant's terminal events are delivered (webhook_target, which
-- also refuses events payflow did not publish), failures after the last
-- attempt, and the admin's set_webhook, delete_webhook and replay_webhook.
-- (CREATE OR REPLACE: the update to 0.5.0 takes this file whole, the key's
-- table with it.)

-- The key the webhook secrets are sealed with: 32 random bytes, made by the
-- first set_webhook (not seeded: pg_dump keeps it with the sealed secrets,
-- which a restore could not open otherwise, and a restore's CREATE
-- EXTENSION would collide with a seeded copy).  Protect dumps as the
-- database itself.
CREATE TABLE payflow._webhook_key (
	id boolean PRIMARY KEY DEFAULT true CHECK (id),
	key bytea NOT NULL CHECK (octet_length(key) = 32),
	created_at timestamptz NOT NULL DEFAULT now()
);

-- The key the webhook secrets are sealed with (above), or NULL before
-- the first set_webhook made it.
CREATE OR REPLACE FUNCTION payflow._webhook_key_get() RETURNS bytea
	LANGUAGE sql STABLE
	AS $$ SELECT k.key FROM payflow._webhook_key k $$;

-- The same, made on first use (32 strong random bytes).
CREATE OR REPLACE FUNCTION payflow._webhook_key_make() RETURNS bytea
	LANGUAGE plpgsql VOLATILE
	AS $$
BEGIN
	INSERT INTO payflow._webhook_key (key) VALUES (decode(payflow._random_token(32), 'hex'))
	ON CONFLICT (id) DO NOTHING;
	RETURN payflow._webhook_key_get();
END
$$;

-- Where and how to deliver the webhook of an operation's tenant:
-- {"tenant","url","secret"} and, while a rotation's overlap lasts,
-- "previousSecret" (the worker signs with both), or NULL when the tenant
-- has no webhook.  Only for an event payflow published to operation-events,
-- with exactly that body (compared as JSON): anything else is PF008, for
-- the worker to dead-letter instead of signing it.  Only the webhook
-- worker's role may call it (admin_roles.sql: not payflow_admin).
CREATE OR REPLACE FUNCTION payflow.webhook_target(operation_id text, event_id uuid DEFAULT NULL, body text DEFAULT NULL)
	RETURNS jsonb
	LANGUAGE plpgsql STABLE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	v_tenant text;
	v_key bytea;
BEGIN
	PERFORM payflow._require_operation_id(operation_id);
	SELECT o.tenant INTO v_tenant FROM payflow.operations o WHERE o.id = webhook_target.operation_id;
	IF NOT FOUND THEN
		PERFORM payflow._unknown_operation(operation_id);
	END IF;
	IF event_id IS NULL OR body IS NULL THEN
		RAISE EXCEPTION '% must not be null', CASE WHEN event_id IS NULL THEN 'event_id' ELSE 'body' END
			USING ERRCODE = 'null_value_not_allowed',
				  HINT = 'Pass the event being delivered: only events payflow published are signed.';
	END IF;
	PERFORM payflow._require_published(event_id, operation_id, body);
	v_key := payflow._webhook_key_get();
	RETURN (SELECT jsonb_build_object('tenant', w.tenant, 'url', w.url, 'secret', payflow._unseal(w.secret_sealed, v_key))
				   || CASE WHEN w.previous_until > now()
						   THEN jsonb_build_object('previousSecret', payflow._unseal(w.previous_secret_sealed, v_key))
						   ELSE '{}' END
			  FROM payflow.webhooks w WHERE w.tenant = v_tenant);
END
$$;

-- Records a webhook delivery that failed its last attempt (the delivery's
-- dead letter).  Idempotent per event: a second failure of the same event
-- (after a replay) updates the row, which is open for replay again.
CREATE OR REPLACE FUNCTION payflow.record_webhook_failure(event_id uuid, operation_id text, body text,
											   attempts integer, error jsonb)
	RETURNS bigint
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	v_tenant text;
	v_body jsonb;
	v_id bigint;
BEGIN
	IF event_id IS NULL THEN
		RAISE EXCEPTION 'event_id must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	PERFORM payflow._require_operation_id(operation_id);
	PERFORM payflow._require_text('body', body, 262144);
	BEGIN
		v_body := body::jsonb;
	EXCEPTION WHEN invalid_text_representation THEN
		RAISE EXCEPTION 'body is not JSON' USING ERRCODE = 'invalid_text_representation';
	END;
	IF jsonb_typeof(v_body) IS DISTINCT FROM 'object' OR jsonb_typeof(v_body -> 'eventType') IS DISTINCT FROM 'string' THEN
		RAISE EXCEPTION 'body must be an event: a JSON object with an "eventType"'
			USING ERRCODE = 'invalid_parameter_value';
	END IF;
	IF attempts IS NULL OR attempts < 1 THEN
		RAISE EXCEPTION 'attempts must be at least 1'
			USING ERRCODE = CASE WHEN attempts IS NULL THEN 'null_value_not_allowed'
								 ELSE 'invalid_parameter_value' END;
	END IF;
	IF error IS NOT NULL THEN
		PERFORM payflow._require_object('error', error);
	END IF;
	SELECT o.tenant INTO v_tenant FROM payflow.operations o
	 WHERE o.id = record_webhook_failure.operation_id;
	IF NOT FOUND THEN
		PERFORM payflow._unknown_operation(operation_id);
	END IF;
	-- what replay_webhook would send again must be payflow's own event
	PERFORM payflow._require_published(event_id, operation_id, body);
	INSERT INTO payflow.webhook_failures AS f (event_id, operation_id, tenant, url, body, attempts, error)
	VALUES (record_webhook_failure.event_id, record_webhook_failure.operation_id, v_tenant,
			coalesce((SELECT w.url FROM payflow.webhooks w WHERE w.tenant = v_tenant), ''),
			v_body, attempts, payflow._mask_card_numbers(error))
	ON CONFLICT ON CONSTRAINT webhook_failures_event_id_key DO UPDATE
		SET attempts = EXCLUDED.attempts, error = EXCLUDED.error, url = EXCLUDED.url,
			updated_at = now(), replayed_at = NULL
	RETURNING f.id INTO v_id;
	RETURN v_id;
END
$$;

-- Registers (or replaces) a tenant's webhook URL and returns a new signing
-- secret, once.  Replacing rotates the secret: the one it replaces still
-- signs too for payflow.webhook_secret_overlap (24 h unless set; 0 ends it
-- at once), so that the receiver can take the new one without a gap.
CREATE OR REPLACE FUNCTION payflow.set_webhook(tenant text, url text) RETURNS text
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	v_secret text := 'whsec_' || payflow._random_token(32);
BEGIN
	PERFORM payflow._require_text('tenant', tenant, 200);
	PERFORM payflow._require_text('url', url, 2000);
	IF url !~* '^https?://[^/?#[:space:]]+([/?#][^[:space:]]*)?$' THEN
		RAISE EXCEPTION 'invalid webhook URL "%"', url
			USING ERRCODE = 'invalid_parameter_value', HINT = 'Use an http:// or https:// URL.';
	END IF;
	INSERT INTO payflow.webhooks AS w (tenant, url, secret_sealed)
	VALUES (set_webhook.tenant, set_webhook.url, payflow._seal(v_secret, payflow._webhook_key_make()))
	ON CONFLICT ON CONSTRAINT webhooks_pkey DO UPDATE
		SET url = EXCLUDED.url, secret_sealed = EXCLUDED.secret_sealed,
			previous_secret_sealed = w.secret_sealed,
			previous_until = now() + make_interval(secs => payflow._setting('webhook_secret_overlap')::integer),
			updated_at = now();
	RETURN v_secret;
END
$$;

-- Removes a tenant's webhook; false when it had none.
CREATE OR REPLACE FUNCTION payflow.delete_webhook(tenant text) RETURNS boolean
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
BEGIN
	PERFORM payflow._require_text('tenant', tenant, 200);
	DELETE FROM payflow.webhooks w WHERE w.tenant = delete_webhook.tenant;
	RETURN FOUND;
END
$$;

-- Sends a failed webhook delivery again: the same event body goes back to
-- the operation-events queue (a new outbox row; the body's eventId is
-- unchanged, so receivers can de-duplicate).  False if already replayed.
CREATE OR REPLACE FUNCTION payflow.replay_webhook(failure_id bigint) RETURNS boolean
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	f payflow.webhook_failures;
BEGIN
	IF failure_id IS NULL THEN
		RAISE EXCEPTION 'failure_id must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	SELECT * INTO f FROM payflow.webhook_failures w WHERE w.id = failure_id FOR UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'webhook failure % does not exist', failure_id USING ERRCODE = 'no_data_found';
	ELSIF f.replayed_at IS NOT NULL THEN
		RETURN false;
	END IF;
	PERFORM payflow._outbox_write(gen_random_uuid(), f.operation_id, coalesce(f.body ->> 'paymentId', f.operation_id),
								  f.body ->> 'eventType', 'operation-events', f.body);
	UPDATE payflow.webhook_failures w SET replayed_at = now() WHERE w.id = f.id;
	RETURN true;
END
$$;
