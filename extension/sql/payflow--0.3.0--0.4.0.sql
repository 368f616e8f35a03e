-- payflow 0.3.0 -> 0.4.0.
--
-- The lean, batched step engine: claim_steps, complete_steps and
-- fail_steps take up to 100 items, each with its own answer or error;
-- claim_step and complete_step take one statement in the common case
-- (_claim_fast, _complete_fast) and the full logic otherwise
-- (_claim_step_full, _complete_step_full); a claim returns a "pg" input
-- payload inline; outbox_claim's plan pinned to index probes; submit checks
-- its arguments in one expression and _create_operation wakes the relays
-- from its one statement; card masking leaves UUIDs alone; one outbox
-- writer (_outbox_write) and one payload key rule (_payload_key).
--
-- The pipeline as data: payflow.pipelines (versions, terminal events),
-- payflow.destinations (the queues) and step_definitions per version;
-- operations record the version they started with (those written before
-- this update: 1); the transition check is a trigger derived from the
-- definition; add_step, remove_step, add_destination and pipeline().
--
-- extension/sql/payflow.sql is the shared source of 0.4.0; a test checks
-- that installing 0.4.0 and updating from each older version give the same
-- schema.

\echo Use "ALTER EXTENSION payflow UPDATE TO '0.4.0'" to load this file. \quit

-- The pipeline as data (see payflow.sql for the tables' comments).
CREATE TABLE payflow.destinations (
	name text PRIMARY KEY CHECK (name ~ '^[A-Za-z0-9_-]{1,80}$'),
	description text,
	created_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO payflow.destinations (name, description) VALUES
	('payment-requests', 'PaymentRequested: payflow-worker --role payment'),
	('payment-completed', 'PaymentCompleted: payflow-worker --role postprocess'),
	('invoice-requests', 'InvoiceRequested: payflow-worker --role invoice'),
	('operation-events', 'the terminal events: webhooks, notifications');

CREATE TABLE payflow.pipelines (
	version integer PRIMARY KEY CHECK (version >= 1),
	completed_event text NOT NULL,
	failed_event text NOT NULL,
	note text,
	created_by text NOT NULL DEFAULT session_user,
	created_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO payflow.pipelines (version, completed_event, failed_event, note)
VALUES (1, 'OperationCompleted', 'OperationFailed', 'the default pipeline');

-- Claims, heartbeats and completions become HOT updates, and an update on
-- the same page logs a short diff (see tables.sql): steps is rebuilt with
-- its columns in the order a step's life changes them, its fillfactor 50,
-- and without the scheduler's partial indexes on status and finished_at:
-- run_scheduler sweeps the operations in flight from where it stopped
-- (operations_open_idx, made with operations below; scheduler.sql).
-- The rebuild rewrites every retained step once, under the update's lock.
-- The functions whose signatures name the row type go with the old table
-- and are created again below.
DROP FUNCTION payflow._lock_step(text, text);
DROP FUNCTION payflow._emit_step_request(payflow.operations, payflow.steps);
DROP FUNCTION payflow._fail_operation(payflow.operations, payflow.steps, jsonb, text);
DROP FUNCTION payflow._require_lease_holder(payflow.steps, text, text, text);
ALTER TABLE payflow.steps RENAME TO steps_0_3_0;
ALTER TABLE payflow.steps_0_3_0 DROP CONSTRAINT steps_pkey, DROP CONSTRAINT steps_status_check;
DROP INDEX payflow.steps_pending_idx, payflow.steps_running_idx, payflow.steps_retry_idx,
	payflow.steps_finished_idx;
CREATE TABLE payflow.steps (
	-- The columns are in the order the step's life changes them: PostgreSQL
	-- logs an update on the same page as the bytes between the longest
	-- common prefix and suffix of the old and new row, so what a claim
	-- changes sits together after what it never changes (the input ref),
	-- and what a completion adds comes last.
	operation_id text COLLATE "C" NOT NULL,
	step_name text COLLATE "C" NOT NULL,
	created_at timestamptz NOT NULL DEFAULT now(),
	input_ref jsonb,
	external_ref text,				-- e.g. the legacy job of submit-poll mode
	attempt integer NOT NULL DEFAULT 0,
	lease_owner text,
	claimed_at timestamptz,
	status text NOT NULL DEFAULT 'PENDING'
		CHECK (status IN ('PENDING', 'RUNNING', 'RETRY_WAIT', 'SUCCEEDED', 'FAILED', 'CANCELLED')),
	lease_expires_at timestamptz,
	pending_since timestamptz,		-- set while PENDING: stuck detection
	next_attempt_at timestamptz,	-- set while RETRY_WAIT, and only then
	result jsonb,
	result_ref jsonb,
	completed_event_id uuid,		-- the event its completion wrote: a repeated complete_step's answer
	last_error jsonb,
	finished_at timestamptz,		-- set when SUCCEEDED, FAILED or CANCELLED, and only then
	PRIMARY KEY (operation_id, step_name)
) WITH (fillfactor = 50,
		autovacuum_vacuum_scale_factor = 0.02,
		autovacuum_analyze_scale_factor = 0.05,
		autovacuum_vacuum_cost_delay = 0);
INSERT INTO payflow.steps (operation_id, step_name, created_at, input_ref, external_ref, attempt, lease_owner, claimed_at, status, lease_expires_at, pending_since, next_attempt_at, result, result_ref, completed_event_id, last_error, finished_at)
SELECT operation_id, step_name, created_at, input_ref, external_ref, attempt, lease_owner, claimed_at, status, lease_expires_at, pending_since, next_attempt_at, result, result_ref, (completion ->> 'eventId')::uuid, last_error, finished_at
  FROM payflow.steps_0_3_0;
DROP TABLE payflow.steps_0_3_0;
CREATE INDEX steps_retry_idx ON payflow.steps (next_attempt_at) WHERE next_attempt_at IS NOT NULL;
GRANT SELECT ON payflow.steps TO payflow_admin;

-- Locks a step's row (after its operation's); all NULL when it does not exist.
--@@ include released/0.4.0/functions/_lock_step.sql @@

-- Raises PF004 unless the worker is the one that ran the step.  A worker
-- whose lease expired may still report as long as nobody else claimed the
-- step since: its external call carried the step's idempotency key, so its
-- outcome is the outcome.
--@@ include released/0.4.0/functions/_require_lease_holder.sql @@

CREATE TABLE payflow.scheduler_sweep (
	id boolean PRIMARY KEY DEFAULT true CHECK (id),
	after_operation text COLLATE "C" NOT NULL DEFAULT '',
	updated_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO payflow.scheduler_sweep DEFAULT VALUES;
GRANT SELECT ON payflow.scheduler_sweep TO payflow_admin;

-- The outbox writer, a batch of events in one statement (see outbox.sql).
-- A payload's content if it matches its reference's checksum (see steps.sql).
--@@ include released/0.4.0/functions/_verified_content.sql @@

--@@ include released/0.4.0/functions/_outbox_write_all.sql @@

--@@ include released/0.4.0/functions/_pipeline_version.sql @@

-- The steps so far are version 1.
ALTER TABLE payflow.step_definitions
	ADD COLUMN pipeline_version integer NOT NULL DEFAULT 1 REFERENCES payflow.pipelines,
	ADD CHECK (step_name ~ '^[A-Z][A-Z0-9_]{0,63}$'),
	ADD CHECK (position >= 1),
	ADD FOREIGN KEY (destination) REFERENCES payflow.destinations,
	DROP CONSTRAINT step_definitions_pkey,
	DROP CONSTRAINT step_definitions_position_key,
	ADD PRIMARY KEY (pipeline_version, step_name),
	ADD UNIQUE (pipeline_version, position);
ALTER TABLE payflow.step_definitions ALTER COLUMN pipeline_version DROP DEFAULT;

-- operations is rebuilt with its columns in the order an operation's life
-- changes them (see tables.sql), like steps above; the operations written
-- before this update ran on version 1, new ones take the newest version.
-- Its policies, grants and row-level security are made again, and so is
-- history's policy, which reads it; the transition trigger comes with
-- pipeline.sql below.
DROP FUNCTION payflow._lock_operation(text);
DROP POLICY operations_of_tenant ON payflow.operations;
DROP POLICY operations_for_admin ON payflow.operations;
DROP POLICY history_of_tenant ON payflow.operation_history;
ALTER TABLE payflow.operations RENAME TO operations_0_3_0;
ALTER TABLE payflow.operations_0_3_0 DROP CONSTRAINT operations_pkey, DROP CONSTRAINT operations_idempotency_key;
DROP INDEX payflow.operations_terminal_idx, payflow.operations_payloads_idx;
CREATE TABLE payflow.operations (
	id text COLLATE "C" PRIMARY KEY,
	tenant text COLLATE "C" NOT NULL DEFAULT '',
	payment_id text COLLATE "C" NOT NULL,
	idempotency_key text COLLATE "C" NOT NULL,
	request_hash bytea NOT NULL,	-- sha256 of payment id + details (PF002)
	correlation_id text,
	request_ref jsonb NOT NULL,
	created_at timestamptz NOT NULL DEFAULT now(),
	pipeline_version integer NOT NULL DEFAULT payflow._pipeline_version(),	-- started on it, finishes on it
	current_step text NOT NULL DEFAULT 'PROCESS_PAYMENT',
	status text NOT NULL DEFAULT 'PENDING',
	updated_at timestamptz NOT NULL DEFAULT now(),
	terminal_at timestamptz,
	result jsonb,
	error jsonb,
	payloads_purged_at timestamptz,
	CONSTRAINT operations_idempotency_key UNIQUE (tenant, idempotency_key)
) WITH (fillfactor = 80);
INSERT INTO payflow.operations (id, tenant, payment_id, idempotency_key, request_hash, correlation_id, request_ref, created_at, pipeline_version, current_step, status, updated_at, terminal_at, result, error, payloads_purged_at)
SELECT id, tenant, payment_id, idempotency_key, request_hash, correlation_id, request_ref, created_at, 1, current_step, status, updated_at, terminal_at, result, error, payloads_purged_at
  FROM payflow.operations_0_3_0;
DROP TABLE payflow.operations_0_3_0;
CREATE INDEX operations_terminal_idx ON payflow.operations (terminal_at)
	WHERE terminal_at IS NOT NULL;
CREATE INDEX operations_payloads_idx ON payflow.operations (terminal_at)
	WHERE terminal_at IS NOT NULL AND payloads_purged_at IS NULL;
CREATE INDEX operations_open_idx ON payflow.operations (id) WHERE terminal_at IS NULL;
GRANT SELECT ON payflow.operations TO payflow_admin;
GRANT SELECT (id, tenant, payment_id, idempotency_key, correlation_id, status, current_step,
			  result, error, created_at, updated_at, terminal_at)
	ON payflow.operations TO payflow_app;
ALTER TABLE payflow.operations ENABLE ROW LEVEL SECURITY;
CREATE POLICY operations_of_tenant ON payflow.operations FOR SELECT TO payflow_app
	USING (tenant = (SELECT payflow._current_tenant()));
CREATE POLICY history_of_tenant ON payflow.operation_history FOR SELECT TO payflow_app
	USING (EXISTS (SELECT FROM payflow.operations o WHERE o.id = operation_history.operation_id));
CREATE POLICY operations_for_admin ON payflow.operations FOR SELECT TO payflow_admin USING (true);

-- Locks an operation's row, else PF003.  Lock order everywhere: the
-- operation, then its step, so step functions never deadlock each other.
--@@ include released/0.4.0/functions/_lock_operation.sql @@


-- The transition check takes the version; replay gets its permission
-- from _allow_replay instead of a flag any caller of _set_status could pass.
DROP FUNCTION payflow._check_transition(text, text, boolean);
DROP FUNCTION payflow._set_status(text, text, text, text, text, boolean);

--@@ flavour include released/0.4.0/transitions.sql @@

-- (pipeline as data: functions that read the definition; from payflow.sql)

-- Writes a payload of the "pg" store for a step's result; returns its ref
-- (for complete_step's result_ref).  Only the worker holding the lease of
-- the running step may, and only under the step's result name: anyone else
-- could take the key first, and the step's completion would then fail
-- after the payment was made.
-- A hook step for a batch of operations in one transaction (see hooks.sql).
--@@ include released/0.4.0/functions/_message_group_id.sql @@

--@@ include released/0.4.0/functions/_event_attributes.sql @@

--@@ include released/0.4.0/functions/run_hook_steps.sql @@

--@@ include released/0.4.0/functions/_require_own_ref.sql @@

--@@ include released/0.4.0/functions/replay_webhook.sql @@

--@@ include released/0.4.0/functions/purge.sql @@

--@@ include released/0.4.0/functions/_emit.sql @@

--@@ include released/0.4.0/functions/_payload_write.sql @@

--@@ include released/0.4.0/functions/_outbox_write.sql @@

--@@ include released/0.4.0/functions/_payload_keys_end.sql @@

--@@ include released/0.4.0/functions/_payload_key.sql @@

--@@ include released/0.4.0/functions/payload_put.sql @@

-- The outbox figures of metrics(), from where the live rows begin
-- (payflow._outbox_cursor) by outbox_seq_idx: a sequential scan read every
-- page of the outbox's heap at each scrape, and while a snapshot is held
-- open those are all the rows acked since.
--@@ include released/0.4.0/functions/_outbox_figures.sql @@

-- Health figures for dashboards and alarms.  Scraped often (the HTTP edge's
-- /metrics), so it never scans all retained operations: every operation not
-- yet terminal (operations_open_idx) has exactly one open step, its
-- current_step (PENDING, RUNNING or RETRY_WAIT); recent terminal
-- operations come from the terminal_at index.  A step that finished in the
-- last hour belongs to an operation still in flight or to one that ended
-- since, so those two sets' steps are all there is to read for it.  Its
-- cost follows the work in flight and the last hour, not the retention.
--@@ include released/0.4.0/functions/metrics.sql @@

-- The post-processing hook that ships with payflow: the invoice input from
-- the request details and the payment result.  Fields are copied by name,
-- so nothing else in the details (a card number, say) ever reaches the
-- invoice API.  Hooks have this signature: (operation_id text,
-- payment_result jsonb) -> jsonb, the invoice input.
--@@ include released/0.4.0/functions/default_postprocess.sql @@

-- Periodic work, run by the background worker (or pg_cron):
-- 1. expired leases: the step is retried (attempt + 1 at the next claim),
--    or the operation fails once max_attempts runs all died;
-- 2. stuck steps, PENDING for payflow.stuck_after with no event of their
--    payment waiting in the outbox: the request event is emitted again.
--    This recovers operations whose message a queue lost;
-- 3. due retries: the step's request event is emitted again.
-- 1 and 2 come from a sweep of the operations in flight
-- (operations_open_idx), each with its one open step (current_step): no
-- index names a lease or a status, so that claims, heartbeats and
-- completions stay HOT updates.  A call looks at up to 10 x max_rows
-- operations from where the last one stopped (payflow.scheduler_sweep) and
-- starts over from the first when it reaches the end: with fewer in flight
-- than that, every call sees them all; with more, a lease is found expired
-- within (operations in flight / (10 x max_rows)) calls, which the README
-- states.  3 comes from steps_retry_idx by due time.  Each part handles at
-- most max_rows rows; rows locked by a worker are skipped and seen next
-- time.
--@@ include released/0.4.0/functions/run_scheduler.sql @@

-- Re-runs a FAILED operation from the step that failed, with a fresh
-- attempt budget and the same idempotency key.  False if not FAILED.
--@@ include released/0.4.0/functions/replay.sql @@

-- Records a step's failure: a retry scheduled with backoff while attempts
-- remain and the error is retryable, else the operation fails.
-- error is {"code":…, "message":…} and may carry "retryAfterSeconds"
-- (e.g. from an HTTP Retry-After) which lengthens the delay up to
-- retry_max_delay, and "outcomeUnknown": true when the attempt may have had
-- its effect (then the last attempt ends the operation as outcome_unknown).
--@@ include released/0.4.0/functions/fail_step.sql @@

-- Fails an operation at a step: step FAILED, operation FAILED, a dead
-- letter, and its version's failed event (OperationFailed).  Caller holds
-- both row locks.
--@@ include released/0.4.0/functions/_fail_operation.sql @@

-- Changes an operation's status and appends the history row; the trigger
-- operations_transition checks the move.  The caller holds the operation's
-- row lock.
--@@ include released/0.4.0/functions/_set_status.sql @@

-- Emits the event that asks a worker to run a step (first run, retry,
-- re-drive or replay).
--@@ include released/0.4.0/functions/_emit_step_request.sql @@

-- A step of the version an operation runs on, else 22023: a report for a
-- step that operation's pipeline does not have.
--@@ include released/0.4.0/functions/_require_step_of.sql @@

-- The definition of a step by name in the newest version that has it,
-- else 22023.  Step functions check names with it before they know the
-- operation, then read the operation's own version (_step_of).
--@@ include released/0.4.0/functions/_step_definition.sql @@

REVOKE ALL ON FUNCTION
	payflow._payload_key(text, text),
	payflow._payload_keys_end(text),
	payflow._outbox_write(uuid, text, text, text, text, jsonb)
	FROM PUBLIC;
REVOKE ALL ON FUNCTION
	payflow._lock_operation(text),
	payflow._lock_step(text, text),
	payflow._require_lease_holder(payflow.steps, text, text, text),
	payflow._emit_step_request(payflow.operations, payflow.steps),
	payflow._fail_operation(payflow.operations, payflow.steps, jsonb, text)
	FROM PUBLIC;
REVOKE ALL ON FUNCTION
	payflow._pipeline_version(),
	payflow._require_step_of(payflow.operations, text),
	payflow._set_status(text, text, text, text, text)
	FROM PUBLIC;
GRANT SELECT ON payflow.destinations, payflow.pipelines TO payflow_admin;

-- At most 100 items per batch call (22023), not NULL (22004).
--@@ include released/0.4.0/functions/_require_batch.sql @@

-- A JSON array of 1 to 100 objects (22004, 22023).
--@@ include released/0.4.0/functions/_require_items.sql @@

-- The verified content of a "pg" input reference, else NULL.
--@@ include released/0.4.0/functions/_inline_input.sql @@

-- claim_step's full logic, for every case the fast path (_claim_fast)
-- does not take: "run" (new step, due retry, expired lease), "skip" (done,
-- failed, terminal, retry not yet due) or "busy" (another worker's lease is
-- live, or the step is not ready yet); and the argument errors.
--@@ include released/0.4.0/functions/_claim_step_full.sql @@

-- A completion's answer, as the first complete_step call gave it: the
-- step's done status and the event its completion wrote (the next step's
-- request, or the version's completed event).  Kept as the event id alone:
-- the rest follows from the operation's pipeline version, which never
-- changes (100 bytes less per completed step than the answer itself).
--@@ include released/0.4.0/functions/_completion_answer.sql @@


-- complete_step's full logic, for every case the fast path
-- (_complete_fast) does not take (a repeated call, a result_ref, a late
-- report after the lease expired) and the argument errors.
--@@ include released/0.4.0/functions/_complete_step_full.sql @@

-- Fast claim of the steps of several operations.  Operations are locked in
-- id order (two batches never deadlock; single-item functions lock one
-- operation), SKIP LOCKED: a locked one goes to the full path, which waits.
-- Returns the claimed items: their position in operation_ids, the claim's
-- answer, and the input payload when it is a verified "pg" payload, so
-- that the worker needs no payload_get.
--@@ include released/0.4.0/functions/_claim_fast.sql @@

-- Fast completion of steps by their lease holder: for each item
-- {"operationId", "result"} (no resultRef) whose step is RUNNING under
-- p_worker_id in a running operation, in one statement: the step done with
-- its answer, the result payload written (when the step has a result
-- name), the status advanced with its history row, the next step created
-- and its request event (or OperationCompleted) in the outbox.  Items it
-- does not take (another state, a resultRef, a result too large, a payload
-- key already written) are left to _complete_step_full.
--@@ include released/0.4.0/functions/_complete_fast.sql @@

-- The items of complete_steps (p_fail false) or fail_steps (true) not in
-- p_done (NULL: none), one by one through the single-item logic, each in a
-- subtransaction: its answer, or its error for it alone.
--@@ include released/0.4.0/functions/_outcomes_one_by_one.sql @@

-- claim_step for several operations at once (at most 100): one row per
-- item (item = its position in operation_ids; a repeated id is answered
-- again, as a second claim_step call would be: busy), with claim_step's
-- answer or, for that item alone, error = {"code": SQLSTATE, "message"}.
-- input carries the step's input payload when it is in the "pg" store.
--@@ include released/0.4.0/functions/claim_steps.sql @@

-- complete_step for several steps of one kind at once (at most 100):
-- items is a JSON array of {"operationId", "result", "resultRef"}; one row
-- per item with complete_step's answer or, for that item alone, an error.
--@@ include released/0.4.0/functions/complete_steps.sql @@

-- fail_step for several steps of one kind at once (at most 100): items is
-- a JSON array of {"operationId", "error", "retryable"}; one row per item
-- with fail_step's answer or, for that item alone, an error.  Failures are
-- the rare path: each item takes fail_step's own logic.
--@@ include released/0.4.0/functions/fail_steps.sql @@

-- Room for a second version of every row of a page, so that claims stay
-- HOT (see payflow.sql); pages written from now on.
ALTER TABLE payflow.outbox SET (fillfactor = 30);

-- An event's SQS attributes (eventType, operationId, correlationId) are
-- read from its body when it is claimed: 90 bytes less per event, and they
-- cannot disagree with the body.
ALTER TABLE payflow.outbox DROP COLUMN attributes;

-- The claim's seq-order index becomes partial on a predicate only the
-- claim states, so that no other query can use it (see tables.sql).  The
-- outbox holds only the backlog: the rebuild is short.
DROP INDEX payflow.outbox_seq_idx;
CREATE INDEX outbox_seq_idx ON payflow.outbox (seq) WHERE seq > 0;

-- A UUID's digit groups are no card number (dead-lettered bodies kept
-- their event ids altered now and then).
--@@ include released/0.4.0/functions/_mask_card_numbers.sql @@

-- Claims a step for a worker: "run" (new step, due retry, expired lease),
-- "skip" (done, failed, terminal, retry not yet due) or "busy" (another
-- worker's lease is live, or the step is not ready yet).  The common case
-- is one statement (_claim_fast); the others take _claim_step_full.
--@@ include released/0.4.0/functions/claim_step.sql @@

-- Records a step's success in one transaction: step done, status advanced,
-- result stored, the next event in the outbox.  A repeated call returns the
-- first call's answer.  The common case is one statement (_complete_fast).
--@@ include released/0.4.0/functions/complete_step.sql @@

-- Where the outbox's live rows begin: the claim starts there, not at the
-- acked rows VACUUM has not removed yet (see tables.sql and outbox.sql).
CREATE UNLOGGED TABLE payflow._outbox_cursor (
	id boolean PRIMARY KEY DEFAULT true CHECK (id),
	low_seq bigint NOT NULL DEFAULT 0,
	pending_end bigint,
	moved_at timestamptz NOT NULL DEFAULT clock_timestamp(),
	moved_by xid8,
	reset_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
INSERT INTO payflow._outbox_cursor DEFAULT VALUES;
GRANT SELECT ON payflow._outbox_cursor TO payflow_admin;

--@@ include released/0.4.0/functions/_outbox_cursor_move.sql @@

-- Claims up to max_events outbox rows for a relay, oldest first, at most
-- one per message group: a later event of a group is never handed out
-- while an earlier one is unacked, so per-payment order holds even with
-- several relays.  A claim is a lease: rows of a relay that died come
-- back after lease_seconds.
--
-- The plan is pinned to index probes whatever the statistics say (see
-- outbox.sql): the scan can use outbox_seq_idx only, the group-head probe
-- outbox_group_idx only, and no sort.
--@@ include released/0.4.0/functions/outbox_claim.sql @@

-- The C-free flavour's wake-up probe walks the outbox from the cursor too.
--@@ flavour include released/0.4.0/wake_listeners.sql @@

-- Creates an operation, or returns the one its idempotency key already
-- names.  Concurrent calls with one key serialise on the unique index: the
-- second waits for the first to commit, then finds its row.  One statement
-- writes all five rows: submit is the hottest path and every statement
-- costs an executor start-up.
--@@ include released/0.4.0/functions/_create_operation.sql @@

-- Creates an operation for a payment request and returns its id at once.
--@@ include released/0.4.0/functions/submit.sql @@

-- outbox_ack keeps one generic plan per session (see outbox.sql: it was
-- planned again in most calls).
ALTER FUNCTION payflow.outbox_ack(uuid[], text[], text)
	SET plan_cache_mode = force_generic_plan
	SET enable_seqscan = off
	SET jit = off;

REVOKE ALL ON FUNCTION
	payflow._require_batch(text, integer),
	payflow._require_items(jsonb),
	payflow._inline_input(jsonb),
	payflow._verified_content(jsonb, bytea),
	payflow._claim_step_full(text, text, text, integer),
	payflow._complete_step_full(text, text, text, jsonb, jsonb),
	payflow._completion_answer(payflow.operations, payflow.step_definitions, uuid),
	payflow._claim_fast(text, text, text[], integer),
	payflow._complete_fast(text, text, jsonb),
	payflow._outcomes_one_by_one(boolean, text, text, jsonb, boolean[]),
	payflow.claim_steps(text, text, text[], integer),
	payflow.complete_steps(text, text, jsonb),
	payflow.fail_steps(text, text, jsonb),
	payflow.run_hook_steps(text, text, regprocedure, text[], integer),
	payflow._outbox_write_all(uuid[], text[], text[], text[], text[], jsonb[]),
	payflow._outbox_cursor_move(),
	payflow._outbox_figures()
	FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
	payflow.claim_steps(text, text, text[], integer),
	payflow.complete_steps(text, text, jsonb),
	payflow.fail_steps(text, text, jsonb)
	TO payflow_step_worker;
GRANT EXECUTE ON FUNCTION payflow.run_hook_steps(text, text, regprocedure, text[], integer)
	TO payflow_postprocess_worker;

-- run_scheduler_for sleeps its nap in slices of 50 ms, each its own
-- transaction, so it no longer holds the xmin horizon back for the whole
-- nap (see scheduler.sql).
--@@ include released/0.4.0/functions/run_scheduler_for.sql @@

--@@ include released/0.4.0/pipeline.sql @@

--@@ include released/0.4.0/admin.sql @@

--@@ include released/0.4.0/comments.sql @@
