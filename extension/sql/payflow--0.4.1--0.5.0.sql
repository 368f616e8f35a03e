-- payflow 0.4.1 -> 0.5.0 (in development: storage v2, issue 25).
--
-- submit_many(jsonb): many submits in one statement and one commit
-- (submit_many.sql).  Identifiers with U+FFFE or U+FFFF, which SQS refuses
-- in a message, are refused at submit (_require_printable, submit).
-- _admin_bad, which only raises, is VOLATILE: an IMMUTABLE one was folded
-- while a statement that calls it was planned.  outbox_dead_letter: an
-- event SQS refuses for good leaves the outbox as a dead letter (source
-- 'event') and fails the step it requested, instead of a nack for ever.
-- reconcile(): legacy charges and returned ids payflow does not account
-- for, after a failover or an incident (reconcile.sql).  authenticate()
-- reads tenant keys only: "payflow-admin:<admin secret>" matched an admin
-- key's hash and bound the empty tenant (authenticate.sql).
-- Storage v2, phase 1: the outbox becomes a log written once
-- (outbox_events) and an unlogged work list (outbox); the published log is
-- a row per ack (outbox_batches) behind the view outbox_published (see
-- tables.sql and the migration below).
-- Webhook secrets are sealed at rest under a key of their own table
-- (webhooks.sql, _seal: AES-256), a rotation keeps the previous secret
-- signing for payflow.webhook_secret_overlap, and payflow_admin no longer
-- holds the webhook worker's role, whose webhook_target returns them
-- (admin_roles.sql).

\echo Use "ALTER EXTENSION payflow UPDATE TO '0.5.0'" to load this file. \quit

--@@ include submit_many.sql @@

ALTER TABLE payflow.dead_letters DROP CONSTRAINT dead_letters_source_check,
	ADD CONSTRAINT dead_letters_source_check CHECK (source IN ('step', 'message', 'event'));
--@@ include outbox_dead_letter.sql @@
--@@ include reconcile.sql @@
--@@ include authenticate.sql @@

ALTER FUNCTION payflow._admin_bad(text, text) VOLATILE;

-- Identifiers that end up in hashes, message attributes and logs may not
-- hold control characters: the request hash of submit_ref joins fields with
-- newlines, and SQS refuses control characters in attribute values.  Nor
-- U+FFFE or U+FFFF, the only other characters PostgreSQL's UTF-8 can hold
-- that SQS refuses in a message body or attribute (it takes #x9, #xA, #xD,
-- #x20-#xD7FF, #xE000-#xFFFD, #x10000-#x10FFFF): an event naming one would
-- be refused at every try of the relay.  The same class of bad input as a
-- control character, so the same SQLSTATE (22023).
CREATE OR REPLACE FUNCTION payflow._require_printable(arg_name text, value text) RETURNS void
	LANGUAGE plpgsql IMMUTABLE
	AS $$
BEGIN
	IF value ~ '[[:cntrl:]]' THEN
		RAISE EXCEPTION '% must not contain control characters', arg_name
			USING ERRCODE = 'invalid_parameter_value';
	ELSIF value ~ '[\uFFFE\uFFFF]' THEN
		RAISE EXCEPTION '% must not contain U+FFFE or U+FFFF', arg_name
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = 'SQS refuses these characters in messages.';
	END IF;
END
$$;

-- Creates an operation for a payment request and returns its id at once.
CREATE OR REPLACE FUNCTION payflow.submit(payment_id text, details jsonb,
							   idempotency_key text DEFAULT NULL,
							   correlation_id text DEFAULT NULL)
	RETURNS text
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	v_content bytea;
BEGIN
	-- The checks as one expression (no statement to run); only bad input
	-- takes the helpers, which raise the precise error.
	IF payment_id IS NULL OR payment_id = '' OR length(payment_id) > 255 OR payment_id ~ '[[:cntrl:]\uFFFE\uFFFF]'
	   OR idempotency_key = '' OR length(idempotency_key) > 255 OR idempotency_key ~ '[[:cntrl:]\uFFFE\uFFFF]'
	   OR correlation_id = '' OR length(correlation_id) > 255 OR correlation_id ~ '[[:cntrl:]\uFFFE\uFFFF]'
	   OR details IS NULL OR jsonb_typeof(details) <> 'object' THEN
		PERFORM payflow._require_submit(payment_id, idempotency_key, correlation_id);
		PERFORM payflow._require_object('details', details);
	END IF;
	v_content := convert_to(details::text, 'UTF8');
	IF octet_length(v_content) > payflow._setting('payload_max_bytes')::bigint THEN
		PERFORM payflow._require_size('details', octet_length(v_content));
	END IF;
	RETURN payflow._create_operation(
		payment_id, coalesce(idempotency_key, payment_id), correlation_id,
		sha256(convert_to(payment_id, 'UTF8') || '\x00'::bytea || v_content),
		NULL, v_content);
END
$$;

-- Storage v2, phase 1: the outbox's log and work list (tables.sql).  The
-- events waiting now move into the log with their seqs; the work list
-- keeps them, claims included, and becomes unlogged.
DO $outbox_v2$
DECLARE
	v_next bigint;
BEGIN
	SELECT CASE WHEN s.is_called THEN s.last_value + 1 ELSE s.last_value END INTO v_next
	  FROM payflow.outbox_seq_seq s;
	-- out of the extension first, which also takes it out of pg_dump's
	-- list (pg_extension.extconfig): a plain drop left its oid there
	ALTER EXTENSION payflow DROP SEQUENCE payflow.outbox_seq_seq;
	ALTER TABLE payflow.outbox ALTER COLUMN seq DROP IDENTITY;
	CREATE SEQUENCE payflow.outbox_seq_seq;
	PERFORM setval('payflow.outbox_seq_seq', v_next, false);
END
$outbox_v2$;
ALTER TABLE payflow.outbox ALTER COLUMN seq SET DEFAULT nextval('payflow.outbox_seq_seq'),
	ADD CHECK (seq > 0);

ALTER TABLE payflow.outbox_published RENAME TO outbox_published_0_4;
--@@ include outbox_log.sql @@
INSERT INTO payflow.outbox_events (seq, event_id, operation_id, event_type, destination, message_group_id, created_at, body)
SELECT o.seq, o.event_id, o.operation_id, o.event_type, o.destination, o.message_group_id, o.created_at, o.body
  FROM payflow.outbox o;
ALTER TABLE payflow.outbox SET UNLOGGED;

INSERT INTO payflow.outbox_position (done_below)
SELECT coalesce(min(o.seq), (SELECT s.last_value FROM payflow.outbox_seq_seq s)) FROM payflow.outbox o;

-- 0.4's published rows stay until their retention ends, each as an event
-- of the log (new seqs, above every waiting event; the body was not kept
-- then: '{}') and a batch of one.
WITH old AS (
	SELECT nextval('payflow.outbox_seq_seq') AS seq, p.*
	  FROM (SELECT * FROM payflow.outbox_published_0_4 ORDER BY published_at) p
), logged AS (
	INSERT INTO payflow.outbox_events (seq, event_id, operation_id, event_type, destination, message_group_id,
									   created_at, body)
	SELECT o.seq, o.event_id, o.operation_id, o.event_type, o.destination, '', o.published_at, '{}'
	  FROM old o
)
INSERT INTO payflow.outbox_batches (published_at, first_seq, last_seq, seqs, message_ids)
SELECT o.published_at, o.seq, o.seq, ARRAY[o.seq], ARRAY[o.message_id] FROM old o;
ALTER EXTENSION payflow DROP TABLE payflow.outbox_published_0_4;	-- (as the sequence above)
DROP TABLE payflow.outbox_published_0_4;
REVOKE ALL ON payflow.outbox_events, payflow.outbox_position, payflow.outbox_batches, payflow.outbox_published
	FROM PUBLIC;
GRANT SELECT ON payflow.outbox_events, payflow.outbox_position, payflow.outbox_batches, payflow.outbox_published
	TO payflow_admin;

--@@ include outbox.sql @@
--@@ include purge.sql @@
--@@ include admin_operation.sql @@
REVOKE ALL ON FUNCTION payflow._outbox_rebuild(), payflow._event_envelope(uuid, text, text, timestamptz),
	payflow._outbox_event_body(payflow.outbox_events) FROM PUBLIC;

-- Webhook secrets sealed at rest (issue 26, M5): the clear column goes.
--@@ flavour include seal.sql @@
ALTER TABLE payflow.webhooks ADD COLUMN secret_sealed bytea, ADD COLUMN previous_secret_sealed bytea,
	ADD COLUMN previous_until timestamptz;
--@@ include webhooks.sql @@
UPDATE payflow.webhooks SET secret_sealed = payflow._seal(secret, payflow._webhook_key_make());
ALTER TABLE payflow.webhooks ALTER COLUMN secret_sealed SET NOT NULL, DROP COLUMN secret;
REVOKE ALL ON payflow._webhook_key FROM PUBLIC;
GRANT SELECT (previous_until) ON payflow.webhooks TO payflow_admin;
REVOKE ALL ON FUNCTION payflow._webhook_key_get(), payflow._webhook_key_make() FROM PUBLIC;
--@@ include admin_roles.sql @@
--@@ include backup.sql @@
