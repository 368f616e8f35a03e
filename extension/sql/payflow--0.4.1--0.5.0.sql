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
-- Storage v2, phase 2: the open step moves into the operations row and a
-- step that is done leaves a row in step_results; payflow.steps becomes a
-- view of both (tables.sql, step_results.sql, the migration below).
-- set_step_breaker / clear_step_breaker: a circuit breaker per step (issue
-- 27, step_breakers.sql).  set_tenant_quota / clear_tenant_quota: submits
-- past a tenant's open operations are refused, PF011 (tenant_quotas.sql).
-- s3_unretained_keys(): the S3 objects no operation keeps any more, for
-- payflow-s3-sweep (issue 26, L3; s3_purge.sql).
-- Storage v2, phase 3: claims, completions and submits write no history
-- row; history(), changes() and the view operation_history render them
-- from the operation's row, step_results and step_attempts, and the table
-- becomes history_events, of the changes that say more (history.sql).

\echo Use "ALTER EXTENSION payflow UPDATE TO '0.5.0'" to load this file. \quit

-- Storage v2, phase 2: the open step in the operation's row.  What took a
-- steps row goes first: the trigger and the functions whose arguments are
-- of its row type.
DROP TRIGGER steps_attempt_ended ON payflow.steps;
DROP FUNCTION payflow._lock_step(text, text);
DROP FUNCTION payflow._require_lease_holder(payflow.steps, text, text, text);
DROP FUNCTION payflow._fail_operation(payflow.operations, payflow.steps, jsonb, text);
DROP FUNCTION payflow._emit_step_request(payflow.operations, payflow.steps);

-- (in tables.sql's order, at the end of the row as there)
ALTER TABLE payflow.operations
	ADD COLUMN step_created_at timestamptz NOT NULL DEFAULT now(),
	ADD COLUMN step_external_ref text,
	ADD COLUMN step_attempt integer NOT NULL DEFAULT 0,
	ADD COLUMN step_claimed_at timestamptz,
	ADD COLUMN step_lease_owner text,
	ADD COLUMN step_lease_token uuid,
	ADD COLUMN step_status text NOT NULL DEFAULT 'PENDING'
		CHECK (step_status IN ('PENDING', 'RUNNING', 'RETRY_WAIT', 'SUCCEEDED', 'FAILED', 'CANCELLED')),
	ADD COLUMN step_pending_since timestamptz DEFAULT now(),
	ADD COLUMN step_next_attempt_at timestamptz,
	ADD COLUMN step_last_error jsonb,
	ADD COLUMN step_lease_expires_at timestamptz,
	SET (fillfactor = 70, autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.05);
CREATE INDEX operations_retry_idx ON payflow.operations (step_next_attempt_at)
	WHERE step_next_attempt_at IS NOT NULL;

-- Storage v2, phase 4: the rows that hang off an operation are partitioned
-- by its day (partitions.sql).  step_attempts and payloads are made again,
-- partitioned, with their rows (as are step_results and history_events
-- below); the days of the operations kept get their partitions after
-- purge.sql.  A long statement on a large installation: docs/install.md
-- says to run the update in a quiet hour.
ALTER TABLE payflow.step_attempts RENAME TO step_attempts_0_4;
ALTER INDEX payflow.step_attempts_pkey RENAME TO step_attempts_0_4_pkey;
ALTER SEQUENCE payflow.step_attempts_id_seq RENAME TO step_attempts_0_4_id_seq;
CREATE TABLE payflow.step_attempts (
	operation_id text COLLATE "C" NOT NULL,
	id bigint GENERATED ALWAYS AS IDENTITY,
	step_name text NOT NULL,
	attempt integer NOT NULL,
	worker text,
	started_at timestamptz,
	finished_at timestamptz NOT NULL DEFAULT now(),
	outcome text NOT NULL,
	error jsonb,
	claim_no smallint
) PARTITION BY RANGE (operation_id);
CREATE TABLE payflow.step_attempts_default PARTITION OF payflow.step_attempts DEFAULT;
ALTER TABLE payflow.step_attempts_default ADD PRIMARY KEY (operation_id, id);
INSERT INTO payflow.step_attempts OVERRIDING SYSTEM VALUE
SELECT operation_id, id, step_name, attempt, worker, started_at, finished_at, outcome, error, NULL
  FROM payflow.step_attempts_0_4;	-- claim_no: new in 0.5.0 (history.sql)
SELECT setval(pg_get_serial_sequence('payflow.step_attempts', 'id'),
			  greatest((SELECT max(id) FROM payflow.step_attempts_0_4), 1));
ALTER EXTENSION payflow DROP SEQUENCE payflow.step_attempts_0_4_id_seq;
ALTER EXTENSION payflow DROP TABLE payflow.step_attempts_0_4;
DROP TABLE payflow.step_attempts_0_4;
DROP TRIGGER operations_forget_attempts ON payflow.operations;	-- purge deletes them (partitions.sql)
DROP FUNCTION payflow._forget_step_attempts();

ALTER TABLE payflow.payloads RENAME TO payloads_0_4;
ALTER INDEX payflow.payloads_pkey RENAME TO payloads_0_4_pkey;
-- (key and bytes only, tables.sql: the operation is named in the key; a
-- plain "sha256:" checksum kept by 0.4 is computed keyed now, and
-- references in flight with the plain one still verify, _checksum_matches)
CREATE TABLE payflow.payloads (
	created_at timestamptz NOT NULL DEFAULT now(),
	key text COLLATE "C" NOT NULL,
	content bytea NOT NULL
) PARTITION BY RANGE (key);
CREATE TABLE payflow.payloads_default PARTITION OF payflow.payloads DEFAULT;
ALTER TABLE payflow.payloads_default ADD PRIMARY KEY (key);
INSERT INTO payflow.payloads (created_at, key, content)
SELECT created_at, key, content FROM payflow.payloads_0_4;
ALTER EXTENSION payflow DROP TABLE payflow.payloads_0_4;
DROP TABLE payflow.payloads_0_4;
DROP INDEX payflow.operations_payloads_idx;	-- purge reads payloads by a cursor (purge.sql)
-- only the operations that have a tenant, and by payment id only those
-- with a key of their own, the idempotency key's index key first (admin.sql)
DROP INDEX payflow.operations_tenant_id_idx;
CREATE INDEX operations_tenant_id_idx ON payflow.operations (tenant, id) WHERE tenant <> '';
DROP INDEX payflow.operations_payment_id_idx;
CREATE INDEX operations_payment_id_idx ON payflow.operations (payment_id, id) WHERE payment_id <> idempotency_key;
ALTER TABLE payflow.operations DROP CONSTRAINT operations_idempotency_key,
	ADD CONSTRAINT operations_idempotency_key UNIQUE (idempotency_key, tenant);

-- The rest of the row, in tables.sql's order (chosen for the WAL), before
-- the steps view (step_results.sql) reads it: the history's numbers
-- (history.sql), dispatch by the database (step_dispatch.sql), the trace
-- context (trace_context.sql), and the request's reference as its checksum
-- and size (the references stored before stay whole in request_ref).
ALTER TABLE payflow.operations
	ADD COLUMN history_no smallint NOT NULL DEFAULT 1,
	ADD COLUMN step_claim_no smallint,
	ADD COLUMN held_step text COLLATE "C",
	ADD COLUMN priority smallint NOT NULL DEFAULT 0,
	ADD COLUMN request_size integer,
	ADD COLUMN submitted_by text,
	ADD COLUMN traceparent bytea,
	ADD COLUMN request_mac bytea,
	ALTER COLUMN request_ref DROP NOT NULL,
	ADD CONSTRAINT operations_request_kept CHECK (request_ref IS NOT NULL OR request_mac IS NOT NULL);

ALTER TABLE payflow.steps RENAME TO steps_0_4;
--@@ include payload_key.sql @@
--@@ include step_results.sql @@

-- Each operation's current step, as it stands, into its row (its input
-- follows from the steps done: _step_input) ...
UPDATE payflow.operations o
   SET step_created_at = s.created_at, step_external_ref = s.external_ref, step_attempt = s.attempt,
	   step_claimed_at = s.claimed_at, step_lease_owner = s.lease_owner, step_status = s.status,
	   step_pending_since = s.pending_since, step_next_attempt_at = s.next_attempt_at,
	   step_last_error = s.last_error, step_lease_expires_at = s.lease_expires_at
  FROM payflow.steps_0_4 s
 WHERE s.operation_id = o.id AND s.step_name = o.current_step;
-- ... and every step that succeeded into step_results, its result only
-- where no payload and no operation result holds it.
INSERT INTO payflow.step_results (operation_id, step_name, created_at, claimed_at, finished_at, attempt,
								  lease_owner, external_ref, result_ref, completed_event_id, result)
SELECT s.operation_id, s.step_name, s.created_at, s.claimed_at, coalesce(s.finished_at, now()), s.attempt,
	   s.lease_owner, s.external_ref, s.result_ref, s.completed_event_id,
	   CASE WHEN s.result_ref IS NULL
				 AND (payflow._next_step(o.pipeline_version, d.position)).step_name IS NOT NULL
			THEN s.result END
  FROM payflow.steps_0_4 s
  JOIN payflow.operations o ON o.id = s.operation_id
  JOIN payflow.step_definitions d ON d.pipeline_version = o.pipeline_version AND d.step_name = s.step_name
 WHERE s.status = 'SUCCEEDED';
ALTER EXTENSION payflow DROP TABLE payflow.steps_0_4;	-- (out of pg_dump's list too, as the outbox's below)
DROP TABLE payflow.steps_0_4;
REVOKE ALL ON payflow.step_results, payflow.steps FROM PUBLIC;
GRANT SELECT ON payflow.step_results, payflow.steps TO payflow_admin;

-- Storage v2, phase 3: the history of the common path is rendered from the
-- rows above (history.sql); the rows 0.4 wrote stay, with their ids, in
-- history_events, and every change from now on is numbered above them.
DO $history_v2$
BEGIN
	IF (SELECT max(h.id) FROM payflow.operation_history h) >= 1000000000000000 THEN
		RAISE EXCEPTION 'payflow.operation_history has ids from 10^15 on; 0.5.0 numbers its changes from there';
	END IF;
END
$history_v2$;
CREATE INDEX operations_held_idx ON payflow.operations (held_step, tenant, priority DESC, id)
	WHERE held_step IS NOT NULL;
DROP POLICY history_of_tenant ON payflow.operation_history;
DROP POLICY history_for_admin ON payflow.operation_history;
ALTER TABLE payflow.operation_history DISABLE ROW LEVEL SECURITY;
DROP FUNCTION payflow._set_status(text, text, text, text, text);

-- The history's table, partitioned by day (partitions.sql, as above)
CREATE TABLE payflow.history_events (
	operation_id text COLLATE "C" NOT NULL,
	id bigint NOT NULL,
	from_status text,
	to_status text NOT NULL,
	reason text,
	actor text NOT NULL,
	at timestamptz NOT NULL DEFAULT now()
) PARTITION BY RANGE (operation_id);
CREATE TABLE payflow.history_events_default PARTITION OF payflow.history_events DEFAULT;
ALTER TABLE payflow.history_events_default ADD PRIMARY KEY (operation_id, id);
INSERT INTO payflow.history_events (operation_id, id, from_status, to_status, reason, actor, at)
SELECT operation_id, id, from_status, to_status, reason, actor, at FROM payflow.operation_history;
-- out of the extension first, which takes them out of pg_dump's list
-- (pg_extension.extconfig, backup.sql) too, as the outbox's below
ALTER EXTENSION payflow DROP SEQUENCE payflow.operation_history_id_seq;
ALTER EXTENSION payflow DROP TABLE payflow.operation_history;
DROP TABLE payflow.operation_history;


REVOKE ALL ON payflow.history_events, payflow.history_events_default, payflow.step_attempts,
	payflow.step_attempts_default, payflow.payloads, payflow.payloads_default, payflow.step_results_default
	FROM PUBLIC;
GRANT SELECT ON payflow.history_events, payflow.history_events_default, payflow.step_attempts,
	payflow.step_attempts_default, payflow.payloads, payflow.payloads_default, payflow.step_results_default
	TO payflow_admin;
--@@ flavour include status_changes.sql @@
--@@ flavour include wake_listeners.sql @@
--@@ include history.sql @@
--@@ include admin_actions.sql @@
REVOKE ALL ON payflow._operation_history, payflow.operation_history FROM PUBLIC;
GRANT SELECT ON payflow._operation_history, payflow.operation_history TO payflow_admin;
GRANT SELECT ON payflow.operation_history TO payflow_app;

-- Steps bound to roles and lease tokens (issue 26, H1, step_grants.sql):
-- the step functions take the token as a new last argument.
DROP FUNCTION payflow.heartbeat(text, text, text, integer),
	payflow.save_step_ref(text, text, text, text),
	payflow.complete_step(text, text, text, jsonb, jsonb),
	payflow._complete_step_full(text, text, text, jsonb, jsonb),
	payflow.fail_step(text, text, text, jsonb, boolean),
	payflow.payload_put(text, text, bytea, text, text);
--@@ include step_grants.sql @@
--@@ include step_limits.sql @@
--@@ include step_breakers.sql @@
--@@ include step_dispatch.sql @@
--@@ include tenant_quotas.sql @@
-- submit and submit_ref take a priority (step_dispatch.sql) and a
-- traceparent (trace_context.sql)
--@@ include trace_context.sql @@
DROP FUNCTION payflow.submit(text, jsonb, text, text);
DROP FUNCTION payflow.submit_ref(text, text, text, text, bigint, text, text);
DROP FUNCTION payflow._create_operation(text, text, text, bytea, jsonb, bytea);
--@@ include operations.sql @@
REVOKE ALL ON FUNCTION payflow.submit(text, jsonb, text, text, integer, text),
	payflow.submit_ref(text, text, text, text, bigint, text, text, integer, text),
	payflow._create_operation(text, text, text, jsonb, bytea, smallint, bytea) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION payflow.submit(text, jsonb, text, text, integer, text),
	payflow.submit_ref(text, text, text, text, bigint, text, text, integer, text) TO payflow_app;
--@@ include payloads.sql @@
-- the key's pads as arguments, read once a batch (steps.sql)
DROP FUNCTION payflow._verified_content(jsonb, bytea);
--@@ include steps.sql @@
REVOKE ALL ON FUNCTION payflow._verified_content(bytea, bytea, jsonb, bytea),
	payflow.heartbeat_steps(text, text, text[], integer, text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION payflow.heartbeat_steps(text, text, text[], integer, text[]) TO payflow_step_worker;
--@@ include hooks.sql @@
--@@ include scheduler.sql @@
--@@ include step_attempts.sql @@
--@@ include admin_stuck.sql @@
--@@ include pipeline.sql @@
REVOKE ALL ON payflow.step_grants, payflow.step_limits, payflow.step_slots, payflow.step_breakers,
	payflow.step_breaker_events, payflow.tenant_quotas FROM PUBLIC;
GRANT SELECT ON payflow.step_grants, payflow.step_limits, payflow.step_slots, payflow.step_breakers,
	payflow.step_breaker_events, payflow.tenant_quotas TO payflow_admin;
REVOKE ALL ON FUNCTION payflow.heartbeat(text, text, text, integer, text),
	payflow.save_step_ref(text, text, text, text, text),
	payflow.complete_step(text, text, text, jsonb, jsonb, text),
	payflow._complete_step_full(text, text, text, jsonb, jsonb, text),
	payflow.fail_step(text, text, text, jsonb, boolean, text),
	payflow.payload_put(text, text, bytea, text, text, text)
	FROM PUBLIC;
GRANT EXECUTE ON FUNCTION payflow.heartbeat(text, text, text, integer, text),
	payflow.save_step_ref(text, text, text, text, text),
	payflow.complete_step(text, text, text, jsonb, jsonb, text),
	payflow.fail_step(text, text, text, jsonb, boolean, text),
	payflow.payload_put(text, text, bytea, text, text, text)
	TO payflow_step_worker;
REVOKE ALL ON FUNCTION payflow._step_done(text, text),
	payflow._step_input(text, integer, jsonb, bytea, integer, integer),
	payflow._result_ref(text, text, jsonb, bytea, integer), payflow._request_ref(text, jsonb, bytea, integer),
	payflow._status_recorded(text, integer, text, text, text, text),
	payflow._fail_operation(payflow.operations, jsonb, text),
	payflow._require_lease_holder(payflow.operations, text, text)
	FROM PUBLIC;

--@@ include submit_many.sql @@

ALTER TABLE payflow.dead_letters DROP CONSTRAINT dead_letters_source_check,
	ADD CONSTRAINT dead_letters_source_check CHECK (source IN ('step', 'message', 'event'));
--@@ include outbox_dead_letter.sql @@
--@@ include reconcile.sql @@
--@@ include authenticate.sql @@

ALTER FUNCTION payflow._admin_bad(text, text) VOLATILE;

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
REVOKE ALL ON payflow.outbox_events, payflow.outbox_events_default, payflow.outbox_position,
	payflow.outbox_batches, payflow.outbox_batches_default, payflow.outbox_published FROM PUBLIC;
GRANT SELECT ON payflow.outbox_events, payflow.outbox_events_default, payflow.outbox_position,
	payflow.outbox_batches, payflow.outbox_batches_default, payflow.outbox_published TO payflow_admin;

-- the attributes take the operation's trace from outbox_claim (issue 29)
DROP FUNCTION payflow._event_attributes(text, text, text);
-- the writer says which bodies the log renders (outbox.sql)
DROP FUNCTION payflow._outbox_write_all(uuid[], text[], text[], text[], text[], jsonb[]);
--@@ include outbox.sql @@
--@@ include partitions.sql @@
--@@ include purge.sql @@
-- The days of the operations kept, and the next ones, in partitions of
-- their own (their rows move in from the default partitions), made here as
-- purge makes them: not members of the extension, so that pg_dump keeps
-- them with their rows.
DO $partitions$
DECLARE
	t record;
BEGIN
	FOR t IN SELECT p.parent, p.key_prefix, d.day
			   FROM payflow._day_partitioned() p,
					(SELECT DISTINCT (o.created_at AT TIME ZONE 'UTC')::date AS day FROM payflow.operations o
					 UNION SELECT (now() AT TIME ZONE 'UTC')::date + n FROM generate_series(0, 1) n) d
			  ORDER BY d.day, p.parent
	LOOP
		IF payflow._make_day_partition(t.parent, t.key_prefix, t.day) THEN
			EXECUTE format('ALTER EXTENSION payflow DROP TABLE payflow.%I',
						   format('%s_d%s', t.parent, to_char(t.day, 'YYYYMMDD')));
		END IF;
	END LOOP;
END
$partitions$;
--@@ include admin_operation.sql @@
-- the console's dead letters name their trace (issue 29)
--@@ include admin_dead_letters.sql @@
-- the list's search by payment id reads two indexes (admin.sql)
--@@ include admin_list.sql @@
REVOKE ALL ON FUNCTION payflow._emit_step_request(payflow.operations), payflow._outbox_rebuild(), payflow._event_envelope(uuid, text, text, timestamptz),
	payflow._event_attributes(text, text, text, text),
	payflow._outbox_event_body(payflow.outbox_events), payflow._rendered_event_body(payflow.outbox_events),
	payflow._outbox_write_all(uuid[], text[], text[], text[], text[], jsonb[], smallint[]) FROM PUBLIC;

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
--@@ include metrics.sql @@
--@@ include comments.sql @@
--@@ include backup.sql @@
--@@ include s3_purge.sql @@

-- ---------------------------------------------------------------------------
-- Keyed checksums (issue 26, M4; content_mac.sql): the installation's key,
-- "hmac-sha256:" checksums for payloads written from now on.  References
-- made before keep their "sha256:" checksums, which stay readable, and
-- the idempotency check reads them in place of 0.4's request hash, which
-- goes (plain, it named a card number to whoever guessed the rest of the
-- request: operations.sql's _same_request).
--@@ include content_mac.sql @@
ALTER TABLE payflow.operations DROP COLUMN request_hash;
