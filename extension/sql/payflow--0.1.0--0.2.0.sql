-- payflow 0.1.0 -> 0.2.0: tenants for the HTTP edge (authenticate, tenant-
-- scoped submit/status/history/cancel, row-level security for payflow_app),
-- the status-change feed for event streams (changes, NOTIFY payflow_status)
-- and webhooks (set_webhook, webhook_target, failures and their replay);
-- fixes from the bad-input review: no control characters in identifiers,
-- FIFO-safe message group ids, size limits on step results, NULL checks.
-- extension/sql/payflow.sql is the full script of 0.2.0; a test checks that
-- installing 0.2.0 and updating 0.1.0 give the same schema.

\echo Use "ALTER EXTENSION payflow UPDATE TO '0.2.0'" to load this file. \quit

-- Marks this transaction as one that changed an operation's status
-- (NOTIFY payflow_status for event streams at commit).
--@@ include released/0.2.0/functions/_status_changed.sql @@

-- The tenant payflow.authenticate() bound to this transaction, else ''.
-- Backend-local state, hence PARALLEL RESTRICTED.
--@@ include released/0.2.0/functions/_current_tenant.sql @@

-- The role the caller acts as (login role or SET ROLE), also inside a
-- SECURITY DEFINER function, where current_user is the owner.
--@@ include released/0.2.0/functions/_outer_role.sql @@

-- Binds a tenant to the current transaction; only authenticate() calls it.
--@@ include released/0.2.0/functions/_set_tenant.sql @@

-- Identifiers that end up in hashes, message attributes and logs may not
-- hold control characters: the request hash of submit_ref joins fields with
-- newlines, and SQS refuses control characters in attribute values.
--@@ include released/0.2.0/functions/_require_printable.sql @@

-- The message group of a payment's events: the payment id itself when SQS
-- FIFO accepts it as a MessageGroupId (at most 128 characters of letters,
-- digits and ASCII punctuation), else "sha256:" and its hash, which keeps
-- one group per payment.
--@@ include released/0.2.0/functions/_message_group_id.sql @@

-- Whether the caller may see an operation of this tenant: one of the
-- tenant authenticate() bound to the transaction ('' when none), or, for an
-- administrator (a member of payflow_admin, superusers included) who bound
-- none, every tenant's, so that operators can look up any operation.  The
-- caller's role decides (login or SET ROLE), not the functions' owner.
--@@ include released/0.2.0/functions/_visible.sql @@

-- A tenant's webhook: where its OperationCompleted / OperationFailed events
-- are POSTed, and the secret they are signed with (HMAC-SHA256).  The
-- secret is kept in clear because the webhook worker must sign with it;
-- only set_webhook (once) and webhook_target (payflow_worker) return it.
CREATE TABLE payflow.webhooks (
	tenant text COLLATE "C" PRIMARY KEY,
	url text NOT NULL,
	secret text NOT NULL,
	created_at timestamptz NOT NULL DEFAULT now(),
	updated_at timestamptz NOT NULL DEFAULT now()
);

-- Webhook deliveries that failed their last attempt: one row per event,
-- kept until replayed and purged like failed operations.
CREATE TABLE payflow.webhook_failures (
	id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	event_id uuid NOT NULL UNIQUE,
	operation_id text COLLATE "C" NOT NULL,
	tenant text COLLATE "C" NOT NULL,
	url text NOT NULL,
	body jsonb NOT NULL,
	attempts integer NOT NULL,
	error jsonb,
	created_at timestamptz NOT NULL DEFAULT now(),
	updated_at timestamptz NOT NULL DEFAULT now(),
	replayed_at timestamptz
);

CREATE INDEX webhook_failures_updated_idx ON payflow.webhook_failures (updated_at);

-- metrics(): the steps finished in the last hour, without reading the others.
CREATE INDEX steps_finished_idx ON payflow.steps (finished_at) WHERE finished_at IS NOT NULL;

-- Validates the arguments submit and submit_ref share.
--@@ include released/0.2.0/functions/_require_submit.sql @@

-- Appends an event to the outbox and returns its id.
--@@ include released/0.2.0/functions/_emit.sql @@

-- Changes an operation's status after the C transition check and appends
-- the history row.  The caller holds the operation's row lock.
--@@ include released/0.2.0/functions/_set_status.sql @@

-- Creates an operation, or returns the one its idempotency key already
-- names.  Concurrent calls with one key serialise on the unique index: the
-- second waits for the first to commit, then finds its row.  One statement
-- writes all five rows: submit is the hottest path and every statement
-- costs an executor start-up.
--@@ include released/0.2.0/functions/_create_operation.sql @@

-- Same as submit, for a request whose payload is already stored (S3, or a
-- "pg" payload written earlier); only its reference is kept.
--@@ include released/0.2.0/functions/submit_ref.sql @@

-- The status document of an operation of the current tenant (another
-- tenant's operation is reported like an unknown one: PF003; see _visible).
--@@ include released/0.2.0/functions/status.sql @@

-- The status transitions of an operation of the current tenant, oldest first.
--@@ include released/0.2.0/functions/history.sql @@

-- Cancels a PENDING operation of the current tenant.  False if it was already cancelled; PF006
-- if it ended otherwise; PF001 once a worker has started it.
--@@ include released/0.2.0/functions/cancel.sql @@

-- Renews a lease; false when this worker no longer holds it.  Touches one
-- unindexed column: a HOT update.
--@@ include released/0.2.0/functions/heartbeat.sql @@

-- Saves an external job reference with a running step (submit-poll mode),
-- so a worker that takes the step over resumes polling instead of
-- submitting again.
--@@ include released/0.2.0/functions/save_step_ref.sql @@

-- Records a step's success in one transaction: step done, status advanced,
-- result stored, the next event in the outbox.  A repeated call returns the
-- first call's answer.
--@@ include released/0.2.0/functions/complete_step.sql @@

-- Records a step's failure: a retry scheduled with backoff while attempts
-- remain and the error is retryable, else the operation fails.
-- error is {"code":…, "message":…} and may carry "retryAfterSeconds"
-- (e.g. from an HTTP Retry-After) which lengthens the delay up to
-- retry_max_delay.
--@@ include released/0.2.0/functions/fail_step.sql @@

-- Claims up to max_events outbox rows for a relay, oldest first, at most
-- one per message group: a later event of a group is never handed out
-- while an earlier one is unacked, so per-payment order holds even with
-- several relays.  A claim is a lease: rows of a relay that died come
-- back after lease_seconds.
--@@ include released/0.2.0/functions/outbox_claim.sql @@

-- Periodic work, run by the background worker (or pg_cron):
-- 1. expired leases: the step is retried (attempt + 1 at the next claim),
--    or the operation fails once max_attempts runs all died;
-- 2. due retries: the step's request event is emitted again;
-- 3. stuck steps, PENDING for payflow.stuck_after with no event of their
--    payment waiting in the outbox: the request event is emitted again.
--    This recovers operations whose message a queue lost.
-- Each part handles at most max_rows rows; rows locked by a worker are
-- skipped and seen next time.
--@@ include released/0.2.0/functions/run_scheduler.sql @@

-- TTL clean-up in bounded batches (each kind at most max_rows rows per
-- call; "more" says whether to call again):
-- payloads of completed/cancelled operations after retention_payloads;
-- operations (with steps, history, payloads, dead letters) after
-- retention_completed, or retention_failed for FAILED ones; the published
-- log; old consumed-event ids; and pg_cron's run details of payflow's jobs,
-- which pg_cron never prunes itself.
--@@ include released/0.2.0/functions/purge.sql @@

-- Health figures for dashboards and alarms.  Scraped often (the HTTP edge's
-- /metrics), so it never scans all retained operations: every operation not
-- yet terminal has exactly one step PENDING, RUNNING or RETRY_WAIT, found
-- through the steps' partial indexes; recent terminal operations and
-- finished steps come from the terminal_at and finished_at indexes.  Its
-- cost follows the work in flight and the last hour, not the retention.
--@@ include released/0.2.0/functions/metrics.sql @@

-- Checks an API key of the HTTP edge and binds its tenant to the current
-- transaction: submit, status, history, cancel and changes then act in that
-- tenant, and row-level security shows payflow_app only its rows.  An
-- autocommit caller puts both in one statement:
--   SELECT payflow.status($2) FROM payflow.authenticate($1);
-- Unknown, revoked or empty keys all get the same error (28000).
--@@ include released/0.2.0/functions/authenticate.sql @@

-- The status changes of the given operations of the current tenant after
-- history id after_id, for event streams (the HTTP edge's SSE).  Ids grow
-- in commit order within one operation (its row lock serialises them), not
-- across operations: callers keep a last-seen id per operation.
--@@ include released/0.2.0/functions/changes.sql @@

-- Where and how to deliver the webhook of an operation's tenant:
-- {"tenant","url","secret"}, or NULL when the tenant has no webhook.
--@@ include released/0.2.0/functions/webhook_target.sql @@

-- Records a webhook delivery that failed its last attempt (the delivery's
-- dead letter).  Idempotent per event: a second failure of the same event
-- (after a replay) updates the row, which is open for replay again.
--@@ include released/0.2.0/functions/record_webhook_failure.sql @@

-- Revokes an API key: authenticate() refuses it from the next call on.
-- False when it was already revoked.
--@@ include released/0.2.0/functions/revoke_api_key.sql @@

-- Registers (or replaces) a tenant's webhook URL and returns a new signing
-- secret, once.  Replacing rotates the secret.
--@@ include released/0.2.0/functions/set_webhook.sql @@

-- Removes a tenant's webhook; false when it had none.
--@@ include released/0.2.0/functions/delete_webhook.sql @@

-- Sends a failed webhook delivery again: the same event body goes back to
-- the operation-events queue (a new outbox row; the body's eventId is
-- unchanged, so receivers can de-duplicate).  False if already replayed.
--@@ include released/0.2.0/functions/replay_webhook.sql @@

-- Privileges of what is new (re-running the blanket revokes is harmless).
REVOKE ALL ON ALL TABLES IN SCHEMA payflow FROM PUBLIC;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA payflow FROM PUBLIC;

GRANT EXECUTE ON FUNCTION
	payflow.authenticate(text),
	payflow.changes(text[], bigint),
	payflow._current_tenant()
	TO payflow_app;

GRANT EXECUTE ON FUNCTION
	payflow.webhook_target(text),
	payflow.record_webhook_failure(uuid, text, text, integer, jsonb)
	TO payflow_worker;

GRANT EXECUTE ON FUNCTION
	payflow.revoke_api_key(bigint),
	payflow.set_webhook(text, text),
	payflow.delete_webhook(text),
	payflow.replay_webhook(bigint)
	TO payflow_admin;
GRANT SELECT ON payflow.webhook_failures TO payflow_admin;
GRANT SELECT (tenant, url, created_at, updated_at) ON payflow.webhooks TO payflow_admin;

-- Tenant isolation in the database, not only in the HTTP edge: payflow_app
-- reads its own tenant's operations and their history and nothing else
-- (the tenant is the one authenticate() bound to the transaction; '' for
-- plain SQL callers).  The functions above filter by tenant themselves:
-- they run as the owner, whom row-level security does not restrict.
GRANT SELECT (id, tenant, payment_id, idempotency_key, correlation_id, status, current_step,
			  result, error, created_at, updated_at, terminal_at)
	ON payflow.operations TO payflow_app;
GRANT SELECT ON payflow.operation_history TO payflow_app;
ALTER TABLE payflow.operations ENABLE ROW LEVEL SECURITY;
ALTER TABLE payflow.operation_history ENABLE ROW LEVEL SECURITY;
CREATE POLICY operations_of_tenant ON payflow.operations FOR SELECT TO payflow_app
	USING (tenant = payflow._current_tenant());
CREATE POLICY history_of_tenant ON payflow.operation_history FOR SELECT TO payflow_app
	USING (EXISTS (SELECT FROM payflow.operations o WHERE o.id = operation_history.operation_id));
CREATE POLICY operations_for_admin ON payflow.operations FOR SELECT TO payflow_admin USING (true);
CREATE POLICY history_for_admin ON payflow.operation_history FOR SELECT TO payflow_admin USING (true);
