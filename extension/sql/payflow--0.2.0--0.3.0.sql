-- payflow 0.2.0 -> 0.3.0.
--
-- The C-free flavour for Amazon RDS and Aurora (make dist-sql) shares this
-- version's SQL: _flavour(), the scheduler driven by pg_cron
-- (schedule_scheduler, run_scheduler_for; schedule_purge uses
-- cron.schedule, which non-superusers may call), the listeners' wake-up
-- after a scheduler pass (_wake_listeners, which the C-free flavour
-- needs), and a tenant policy that evaluates the tenant once per query.
--
-- Hardening: card numbers masked in every stored error; pg payload
-- references only within the caller's tenant; step results written only by
-- the step's lease holder (payload_put takes step and worker_id) and result
-- references only to the operation's own payloads; outbox claims capped
-- (1,000 events, 600 s); webhooks only for events payflow published
-- (operation_events; webhook_target takes the event id and body, PF008).
--
-- extension/sql/payflow.sql is the shared source of 0.3.0; a test checks
-- that installing 0.3.0 and updating from each older version give the same
-- schema.

\echo Use "ALTER EXTENSION payflow UPDATE TO '0.3.0'" to load this file. \quit

-- Which flavour is installed: 'c' here, 'sql' in the C-free one.
--@@ include released/0.3.0/functions/_flavour.sql @@

-- After a scheduler pass: nothing to do here.  The scheduler background
-- worker sends the NOTIFYs for the commits that flagged a wake-up in shared
-- memory (wakeup.c); the C-free flavour has no shared memory and notifies
-- from this function instead.
--@@ include released/0.3.0/functions/_wake_listeners.sql @@

-- Periodic work, run by the background worker (or pg_cron):
-- 1. expired leases: the step is retried (attempt + 1 at the next claim),
--    or the operation fails once max_attempts runs all died;
-- 2. due retries: the step's request event is emitted again;
-- 3. stuck steps, PENDING for payflow.stuck_after with no event of their
--    payment waiting in the outbox: the request event is emitted again.
--    This recovers operations whose message a queue lost.
-- Each part handles at most max_rows rows; rows locked by a worker are
-- skipped and seen next time.
--@@ include released/0.3.0/functions/run_scheduler.sql @@

-- Runs the scheduler every payflow.scheduler_naptime for about "seconds",
-- one transaction per pass (so no snapshot outlives a pass and vacuum is
-- never held back), then returns.  What a pg_cron older than 1.5, which
-- cannot schedule in seconds, runs once a minute.  A procedure without SET
-- or SECURITY DEFINER, because only such a procedure may COMMIT; it runs
-- as its caller and names everything with its schema.
--@@ include released/0.3.0/functions/run_scheduler_for.sql @@

-- Registers (or replaces) a pg_cron job that runs in this database as the
-- caller; 0A000 with a hint when pg_cron is missing.  pg_cron lives in one
-- database (cron.database_name), so finding it here means this is that
-- database and cron.schedule, which non-superusers may call, is enough.
--@@ include released/0.3.0/functions/_cron_schedule.sql @@

-- Registers purge with pg_cron (job "payflow-purge", replaced if present).
-- SECURITY INVOKER: the job runs as the role that scheduled it, which must
-- be allowed to use pg_cron and to call payflow.purge().
--@@ include released/0.3.0/functions/schedule_purge.sql @@

-- Registers the scheduler with pg_cron (job "payflow-scheduler", replaced
-- if present): every second with pg_cron 1.5 or later (Amazon RDS and
-- Aurora), else a job every minute that runs it each second for 58 s.
-- What the C-free flavour has instead of the scheduler background worker;
-- the C flavour needs it only when payflow is not preloaded.  SECURITY
-- INVOKER like schedule_purge: the job runs as the caller.
--@@ include released/0.3.0/functions/schedule_scheduler.sql @@

REVOKE ALL ON FUNCTION payflow._flavour(), payflow._wake_listeners(), payflow._cron_schedule(text, text, text),
	payflow.schedule_scheduler() FROM PUBLIC;
REVOKE ALL ON PROCEDURE payflow.run_scheduler_for(integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION payflow.schedule_scheduler() TO payflow_admin;
GRANT EXECUTE ON PROCEDURE payflow.run_scheduler_for(integer) TO payflow_admin;
GRANT EXECUTE ON FUNCTION payflow._cron_schedule(text, text, text) TO payflow_admin;

DROP POLICY operations_of_tenant ON payflow.operations;
CREATE POLICY operations_of_tenant ON payflow.operations FOR SELECT TO payflow_app
	USING (tenant = (SELECT payflow._current_tenant()));

---------------------------------------------------------------------------
-- Hardening (issue 12): card numbers masked in stored errors, payload
-- references kept within a tenant, step results written by the lease
-- holder only, capped outbox claims, webhooks only for published events.
---------------------------------------------------------------------------

-- The events payflow published to operation-events, by id and a sha256 of
-- the body: the webhook worker signs and delivers only those, so that
-- whoever may send to that queue cannot have payflow sign "payment
-- completed" for an operation that failed.  Kept as long as its operation.
CREATE TABLE payflow.operation_events (
	event_id uuid PRIMARY KEY,
	operation_id text COLLATE "C" NOT NULL,
	body_sha256 bytea NOT NULL,
	created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX operation_events_operation_idx ON payflow.operation_events (operation_id);

-- Card numbers in error texts (a legacy DBMS that echoes its input, say):
-- every run of 13 to 19 digits, spaces or dashes between them allowed, that
-- passes the Luhn check keeps its last four digits and loses the others.
-- Applied to errors before they are stored (PCI DSS 3.4); the workers
-- redact before that already.
--@@ include released/0.3.0/functions/_mask_card_numbers-text.sql @@

-- The same over every string and number of a JSON document (keys stay).
--@@ include released/0.3.0/functions/_mask_card_numbers-jsonb.sql @@

-- Appends an event to the outbox and returns its id.
--@@ include released/0.3.0/functions/_emit.sql @@

-- Fails an operation at a step: step FAILED, operation FAILED, a dead
-- letter, and an OperationFailed event.  Caller holds both row locks.
--@@ include released/0.3.0/functions/_fail_operation.sql @@

-- Same as submit, for a request whose payload is already stored (S3, or a
-- "pg" payload written earlier); only its reference is kept.
--@@ include released/0.3.0/functions/submit_ref.sql @@

-- Records a step's success in one transaction: step done, status advanced,
-- result stored, the next event in the outbox.  A repeated call returns the
-- first call's answer.
--@@ include released/0.3.0/functions/complete_step.sql @@

-- Records a step's failure: a retry scheduled with backoff while attempts
-- remain and the error is retryable, else the operation fails.
-- error is {"code":…, "message":…} and may carry "retryAfterSeconds"
-- (e.g. from an HTTP Retry-After) which lengthens the delay up to
-- retry_max_delay.
--@@ include released/0.3.0/functions/fail_step.sql @@

-- Keeps a message no worker could handle (bad JSON, unknown version,
-- checksum mismatch…) for investigation; returns the dead letter's id.
--@@ include released/0.3.0/functions/record_dead_letter.sql @@

-- Claims up to max_events outbox rows for a relay, oldest first, at most
-- one per message group: a later event of a group is never handed out
-- while an earlier one is unacked, so per-payment order holds even with
-- several relays.  A claim is a lease: rows of a relay that died come
-- back after lease_seconds.
--@@ include released/0.3.0/functions/outbox_claim.sql @@

-- Records a webhook delivery that failed its last attempt (the delivery's
-- dead letter).  Idempotent per event: a second failure of the same event
-- (after a replay) updates the row, which is open for replay again.
--@@ include released/0.3.0/functions/record_webhook_failure.sql @@

-- TTL clean-up in bounded batches (each kind at most max_rows rows per
-- call; "more" says whether to call again):
-- payloads of completed/cancelled operations after retention_payloads;
-- operations (with steps, history, payloads, dead letters) after
-- retention_completed, or retention_failed for FAILED ones; the published
-- log; old consumed-event ids; and pg_cron's run details of payflow's jobs,
-- which pg_cron never prunes itself.
--@@ include released/0.3.0/functions/purge.sql @@

-- A reference a worker hands on as a step's result must name a payload of
-- that operation: its own pg payload with the checksum it claims, or an S3
-- key under payments/<id>/ (22023 otherwise, P0002/PF005 as payload_get).
--@@ include released/0.3.0/functions/_require_own_ref.sql @@

-- PF008 unless payflow published this event of this operation to
-- operation-events with this body (compared as JSON, so formatting does
-- not matter).
--@@ include released/0.3.0/functions/_require_published.sql @@

DROP FUNCTION payflow.payload_put(text, text, bytea);

-- Writes a payload of the "pg" store for a step's result; returns its ref
-- (for complete_step's result_ref).  Only the worker holding the lease of
-- the running step may, and only under the step's result name: anyone else
-- could take the key first, and the step's completion would then fail
-- after the payment was made.
--@@ include released/0.3.0/functions/payload_put.sql @@

DROP FUNCTION payflow.webhook_target(text);

-- Where and how to deliver the webhook of an operation's tenant:
-- {"tenant","url","secret"}, or NULL when the tenant has no webhook.  Only
-- for an event payflow published to operation-events, with exactly that
-- body (compared as JSON): anything else is PF008, for the worker to dead-
-- letter instead of signing it.
--@@ include released/0.3.0/functions/webhook_target.sql @@


REVOKE ALL ON payflow.operation_events FROM PUBLIC;
GRANT SELECT ON payflow.operation_events TO payflow_admin;
REVOKE ALL ON FUNCTION payflow._mask_card_numbers(text), payflow._mask_card_numbers(jsonb),
	payflow._require_own_ref(text, jsonb), payflow._require_published(uuid, text, text),
	payflow.payload_put(text, text, bytea, text, text), payflow.webhook_target(text, uuid, text) FROM PUBLIC;

DROP FUNCTION payflow.outbox_ack(uuid[], text[]);
-- Acknowledges published events: removes them from the outbox and logs
-- their message ids.  Only the relay holding an event's claim may: another
-- login could otherwise ack events that were never sent.  Returns how many
-- were acked (an event another relay claimed since is left to that one).
--@@ include released/0.3.0/functions/outbox_ack.sql @@

DROP FUNCTION payflow.outbox_nack(uuid, text);
-- Returns an event that failed to publish to the outbox, available again
-- after a backoff (1 s doubling to 5 min).  Events are never dropped: a
-- destination that keeps failing shows in metrics() as outbox age.
--@@ include released/0.3.0/functions/outbox_nack.sql @@

REVOKE ALL ON FUNCTION payflow.outbox_ack(uuid[], text[], text), payflow.outbox_nack(uuid, text, text) FROM PUBLIC;

-- payflow_worker split into one role per kind of edge process (each login
-- gets only what its program calls); payflow_worker holds them all.
DO $roles$
BEGIN
	IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'payflow_relay') THEN
		CREATE ROLE payflow_relay NOLOGIN;
	END IF;
	IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'payflow_step_worker') THEN
		CREATE ROLE payflow_step_worker NOLOGIN;
	END IF;
	IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'payflow_postprocess_worker') THEN
		CREATE ROLE payflow_postprocess_worker NOLOGIN;
	END IF;
	IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'payflow_webhook_worker') THEN
		CREATE ROLE payflow_webhook_worker NOLOGIN;
	END IF;
END
$roles$;
GRANT USAGE ON SCHEMA payflow TO payflow_relay, payflow_step_worker, payflow_postprocess_worker, payflow_webhook_worker;
REVOKE EXECUTE ON FUNCTION
	payflow.status(text),
	payflow.claim_step(text, text, text, integer),
	payflow.heartbeat(text, text, text, integer),
	payflow.save_step_ref(text, text, text, text),
	payflow.complete_step(text, text, text, jsonb, jsonb),
	payflow.fail_step(text, text, text, jsonb, boolean),
	payflow.payload_get(jsonb),
	payflow.payload_put(text, text, bytea, text, text),
	payflow.mark_consumed(text, uuid),
	payflow.record_dead_letter(text, text, jsonb, text),
	payflow.default_postprocess(text, jsonb),
	payflow.invoke_postprocess(regprocedure, text, jsonb),
	payflow.outbox_claim(integer, text, integer),
	payflow.outbox_ack(uuid[], text[], text),
	payflow.outbox_nack(uuid, text, text),
	payflow.backoff_delay(integer, interval, interval, float8),
	payflow.webhook_target(text, uuid, text),
	payflow.record_webhook_failure(uuid, text, text, integer, jsonb)
	FROM payflow_worker;
GRANT EXECUTE ON FUNCTION
	payflow.outbox_claim(integer, text, integer),
	payflow.outbox_ack(uuid[], text[], text),
	payflow.outbox_nack(uuid, text, text)
	TO payflow_relay;
GRANT EXECUTE ON FUNCTION
	payflow.status(text),
	payflow.claim_step(text, text, text, integer),
	payflow.heartbeat(text, text, text, integer),
	payflow.save_step_ref(text, text, text, text),
	payflow.complete_step(text, text, text, jsonb, jsonb),
	payflow.fail_step(text, text, text, jsonb, boolean),
	payflow.payload_get(jsonb),
	payflow.payload_put(text, text, bytea, text, text),
	payflow.mark_consumed(text, uuid),
	payflow.record_dead_letter(text, text, jsonb, text),
	payflow.backoff_delay(integer, interval, interval, float8)
	TO payflow_step_worker;
GRANT payflow_step_worker TO payflow_postprocess_worker;
GRANT EXECUTE ON FUNCTION
	payflow.default_postprocess(text, jsonb),
	payflow.invoke_postprocess(regprocedure, text, jsonb)
	TO payflow_postprocess_worker;
GRANT EXECUTE ON FUNCTION
	payflow.webhook_target(text, uuid, text),
	payflow.record_webhook_failure(uuid, text, text, integer, jsonb),
	payflow.mark_consumed(text, uuid),
	payflow.record_dead_letter(text, text, jsonb, text)
	TO payflow_webhook_worker;
GRANT payflow_relay, payflow_step_worker, payflow_postprocess_worker, payflow_webhook_worker TO payflow_worker;
