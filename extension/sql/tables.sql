-- payflow: the tables.
--
-- Every table of the extension, with what each row means: the pipeline
-- definition (destinations, pipelines, step_definitions), the operations
-- and their history, the steps, the outbox and its log, payloads, consumer
-- de-duplication, dead letters, API keys, webhooks and the terminal events
-- payflow published.  payflow.sql includes this file first; the functions
-- of the other files read and write these tables.

---------------------------------------------------------------------------
-- Tables
---------------------------------------------------------------------------

-- The queues the database knows.  A step's request event may only go to a
-- destination listed here (payflow.add_destination adds one), so that a
-- typo in a pipeline change is refused at once instead of leaving events
-- no relay can deliver; each relay maps these names to queue URLs
-- (PAYFLOW_QUEUE_URLS).
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

-- The versions of the pipeline.  Each holds a whole copy of its steps
-- (step_definitions) and its terminal events, and never changes once
-- written: an operation records the version it started with and finishes
-- on it, and the transition check caches a version's graph for the
-- backend's lifetime.  payflow.add_step and payflow.remove_step write a new
-- version; new operations take the newest.  The terminal events go to
-- operation-events (webhooks, the HTTP edge's streams).
CREATE TABLE payflow.pipelines (
	version integer PRIMARY KEY CHECK (version >= 1),
	completed_event text NOT NULL,	-- the event of an operation that completed
	failed_event text NOT NULL,		-- ... and of one that failed
	note text,						-- why this version was made
	created_by text NOT NULL DEFAULT session_user,
	created_at timestamptz NOT NULL DEFAULT now()
);

INSERT INTO payflow.pipelines (version, completed_event, failed_event, note)
VALUES (1, 'OperationCompleted', 'OperationFailed', 'the default pipeline');

-- The newest version: what new operations start on.  PL/pgSQL, whose
-- plan is kept: a SQL function reading a table is never inlined, and each
-- call parsed and planned its query again (63 us, once per submit).
CREATE FUNCTION payflow._pipeline_version() RETURNS integer
	LANGUAGE plpgsql STABLE
	AS $$
BEGIN
	RETURN (SELECT max(p.version) FROM payflow.pipelines p);
END
$$;

-- The steps of each pipeline version, in order.  A step waits in its
-- ready_status, runs in its running_status (the same status for a step
-- whose claim changes nothing the operation shows) and leaves its
-- done_status, which is the next step's ready_status; the last step's
-- done_status is the one terminal status of success.  The transition check
-- (payflow._guard_transition) is derived from these rows.  Admins may tune
-- the retry columns (NULL = the payflow.* GUC); the rest is written by
-- add_step and remove_step only.
CREATE TABLE payflow.step_definitions (
	step_name text NOT NULL CHECK (step_name ~ '^[A-Z][A-Z0-9_]{0,63}$'),
	position integer NOT NULL CHECK (position >= 1),
	ready_status text NOT NULL,		-- operation status while the step waits
	running_status text NOT NULL,	-- status once a worker claimed it
	done_status text NOT NULL,		-- status after it succeeded
	request_event text NOT NULL,	-- event that asks a worker to run it
	destination text NOT NULL REFERENCES payflow.destinations,	-- where that event goes
	input_field text NOT NULL,		-- field of the event carrying the input ref
	result_name text,				-- payload name of the result, NULL = inline only
	max_attempts integer CHECK (max_attempts BETWEEN 1 AND 1000),
	retry_base_delay interval,
	retry_max_delay interval,
	pipeline_version integer NOT NULL REFERENCES payflow.pipelines,
	PRIMARY KEY (pipeline_version, step_name),
	UNIQUE (pipeline_version, position)
);

INSERT INTO payflow.step_definitions
	(pipeline_version, step_name, position, ready_status, running_status, done_status,
	 request_event, destination, input_field, result_name)
VALUES
	(1, 'PROCESS_PAYMENT', 1, 'PENDING', 'PAYMENT_PROCESSING', 'PAYMENT_COMPLETED',
	 'PaymentRequested', 'payment-requests', 'payload', 'payment-result.json'),
	(1, 'POST_PROCESS', 2, 'PAYMENT_COMPLETED', 'POST_PROCESSING', 'INVOICE_PENDING',
	 'PaymentCompleted', 'payment-completed', 'result', 'invoice-input.json'),
	(1, 'CREATE_INVOICE', 3, 'INVOICE_PENDING', 'INVOICE_PENDING', 'COMPLETED',
	 'InvoiceRequested', 'invoice-requests', 'invoiceInput', NULL);

-- Identifiers are compared byte-wise (COLLATE "C"): they are not words,
-- and locale-aware comparison costs every B-tree descent on the hot path.

-- One row per operation, which also holds its one open step (0.5.0,
-- storage v2: the pipeline is linear, so an operation has at most one step
-- that is not done).  A claim, a heartbeat, a retry and a completion are
-- each one update of this row, and none of them touches an indexed column
-- on the common path, so all are HOT updates: 0.4 wrote a steps row per
-- step, updated it at claim and at completion and locked it before each,
-- besides updating the operation's status (2.4 KB of WAL per operation in
-- the step-engine bench).  The terminal update is the one that is not HOT
-- (terminal_at is indexed).  The columns are in the order the operation's
-- life changes them: PostgreSQL logs an update on the same page as the
-- bytes between the longest common prefix and suffix of the old and new
-- row, so what never changes comes first and the lease, which every
-- heartbeat renews, comes last.  A step that is done leaves a row in
-- step_results; payflow.steps shows both as 0.4's table did.
CREATE TABLE payflow.operations (
	id text COLLATE "C" PRIMARY KEY,
	tenant text COLLATE "C" NOT NULL DEFAULT '',
	payment_id text COLLATE "C" NOT NULL,
	idempotency_key text COLLATE "C" NOT NULL,
	-- (no hash of the request for the idempotency check, PF002: the
	-- payment id and the request's checksum or reference tell it,
	-- operations.sql's _same_request)
	correlation_id text,
	request_ref jsonb,		-- NULL when request_mac holds it (below)
	created_at timestamptz NOT NULL DEFAULT now(),
	pipeline_version integer NOT NULL DEFAULT payflow._pipeline_version(),	-- started on it, finishes on it
	current_step text NOT NULL DEFAULT 'PROCESS_PAYMENT',
	status text NOT NULL DEFAULT 'PENDING',
	updated_at timestamptz NOT NULL DEFAULT now(),
	terminal_at timestamptz,
	result jsonb,
	error jsonb,
	payloads_purged_at timestamptz,
	-- The open step (current_step): 0.4's steps row of it, column for
	-- column but its input, which is not written twice: the result
	-- reference of the last step done that has one, else the request's
	-- (_step_input).  It kept ~190 bytes in every claim's and completion's
	-- WAL record.
	step_created_at timestamptz NOT NULL DEFAULT now(),
	step_external_ref text,			-- e.g. the legacy job of submit-poll mode
	step_attempt integer NOT NULL DEFAULT 0,
	step_claimed_at timestamptz,
	step_lease_owner text,
	step_lease_token uuid,			-- the claim's: later calls present it (step_grants.sql)
	-- SUCCEEDED only once the last step is done (its row is in step_results)
	step_status text NOT NULL DEFAULT 'PENDING'
		CHECK (step_status IN ('PENDING', 'RUNNING', 'RETRY_WAIT', 'SUCCEEDED', 'FAILED', 'CANCELLED')),
	step_pending_since timestamptz DEFAULT now(),	-- set while PENDING: stuck detection
	step_next_attempt_at timestamptz,	-- set while RETRY_WAIT, and only then
	step_last_error jsonb,
	step_lease_expires_at timestamptz,
	-- History (0.5.0, history.sql): the transitions of the common path are
	-- rendered from this row, step_results and step_attempts, not written.
	-- history_no counts the operation's transitions (its last one's
	-- number; a history id is _history_id(number)); step_claim_no is the
	-- number of the claim that moved the open step's status, while the
	-- attempt that made it runs.
	history_no smallint NOT NULL DEFAULT 1,
	step_claim_no smallint,
	-- Dispatch by the database (step_dispatch.sql): while the open step
	-- waits in the database for a slot of its step's limit instead of in a
	-- queue, that step's name; and the operation's priority (submit's;
	-- higher first).
	held_step text COLLATE "C",
	priority smallint NOT NULL DEFAULT 0,
	-- The rest never changes, and its order is chosen for the WAL.  A
	-- same-page update logs the new row but for the bytes it shares with
	-- the old one at the start and at the end, compared byte by byte; a
	-- column whose type is aligned (integer, smallint) moves with the
	-- padding before it when a column before it changes length, so the
	-- shared end stops there.  These come last, the aligned ones first, so
	-- that every update's shared end spans them all (request_size last
	-- logged 80 more bytes an update).
	--
	-- The request's size, and its keyed checksum (request_mac, below), when
	-- submit stored the request (the pg store, under the key _payload_key
	-- gives): _request_ref renders its reference from them, as a fast
	-- completion's result reference (step_results.sql).  The document was
	-- 198 of the row's 454 bytes, written twice (insert, and the terminal
	-- update, which is not HOT).  Any other reference (submit_ref's) is
	-- kept whole in request_ref.
	request_size integer,
	-- who submitted it (NULL for an operation submitted before 0.5.0, whose
	-- history rows are all stored: history.sql)
	submitted_by text,
	-- the W3C traceparent the operation's spans continue, as its 25 bytes
	-- (trace_context.sql: _traceparent_text)
	traceparent bytea,
	request_mac bytea,
	CONSTRAINT operations_request_kept CHECK (request_ref IS NOT NULL OR request_mac IS NOT NULL),
	-- the key first: the admin list's search by payment id reads it for the
	-- operations whose key is their payment id (admin.sql)
	CONSTRAINT operations_idempotency_key UNIQUE (idempotency_key, tenant)
) WITH (fillfactor = 70,
		autovacuum_vacuum_scale_factor = 0.02,
		autovacuum_analyze_scale_factor = 0.05);

CREATE INDEX operations_terminal_idx ON payflow.operations (terminal_at)
	WHERE terminal_at IS NOT NULL;
-- The operations in flight, each with its one open step (current_step):
-- run_scheduler sweeps them, a bounded slice a call from where the last
-- one stopped (payflow.scheduler_sweep), for expired leases and stuck
-- steps; metrics() counts them.  An operation enters it at submit and
-- leaves it at its terminal update, which is not HOT anyway (terminal_at
-- is indexed above), so that no index needs to know a lease or a step's
-- status.
CREATE INDEX operations_open_idx ON payflow.operations (id) WHERE terminal_at IS NULL;
-- (0.4's operations_payloads_idx is gone: purge finds the payloads to
-- remove by a cursor on operations_terminal_idx, partitions.sql.)
-- Retries by due time.  step_next_attempt_at is NULL from submit to the
-- end on the common path, so claims and completions leave this index alone.
CREATE INDEX operations_retry_idx ON payflow.operations (step_next_attempt_at)
	WHERE step_next_attempt_at IS NOT NULL;
-- The operations held for a slot of a limited step, in the order a slot
-- goes to them: by tenant (the fair share), then priority, then age
-- (step_dispatch.sql).  Only held ones: every column but held_step is
-- written once, so claims and completions stay HOT.
CREATE INDEX operations_held_idx ON payflow.operations (held_step, tenant, priority DESC, id)
	WHERE held_step IS NOT NULL;

-- The status changes that are not rendered from the rows above (history.sql):
-- failures, cancels, replays, admin actions, and every change made before
-- 0.5.0.  Append-only; the id is _history_id(the operation's history_no),
-- or 0.4's (all below 10^15).
CREATE TABLE payflow.history_events (
	operation_id text COLLATE "C" NOT NULL,
	id bigint NOT NULL,
	from_status text,
	to_status text NOT NULL,
	reason text,
	actor text NOT NULL,
	at timestamptz NOT NULL DEFAULT now()
) PARTITION BY RANGE (operation_id);	-- a partition a day (partitions.sql)
-- No key on the parent: pg_dump restores a day's partition (not the
-- extension's) with its own indexes, which an index of the parent would
-- have made already at ATTACH.  Each partition has the default
-- partition's (partitions.sql); the key holds the partition key, so a
-- partition's key is unique across the table.
CREATE TABLE payflow.history_events_default PARTITION OF payflow.history_events DEFAULT;
ALTER TABLE payflow.history_events_default ADD PRIMARY KEY (operation_id, id);

-- One row per step attempt that ended without success (the operation's row
-- keeps only the latest attempt of its open step): who ran it, when, and how it ended.
-- Written by a trigger on payflow.operations (step_attempts.sql) whose
-- WHEN clause skips heartbeats, claims and successes: the attempt that
-- succeeded is the step's step_results row (admin_operation shows it), so the common
-- path -- every step right the first time -- writes nothing more than
-- before (0.4.0's bench: the row per success cost 0.8 KB of WAL per
-- operation).  Dropped with its day's partition, or deleted with its
-- operation by purge (partitions.sql).
CREATE TABLE payflow.step_attempts (
	operation_id text COLLATE "C" NOT NULL,
	id bigint GENERATED ALWAYS AS IDENTITY,
	step_name text NOT NULL,
	attempt integer NOT NULL,
	worker text,
	started_at timestamptz,
	finished_at timestamptz NOT NULL DEFAULT now(),
	outcome text NOT NULL,		-- SUCCEEDED, RETRY_WAIT, FAILED, lease_expired
	error jsonb,
	claim_no smallint			-- its claim's history number, if that claim moved the status
) PARTITION BY RANGE (operation_id);	-- a partition a day (partitions.sql; its key: history_events')
CREATE TABLE payflow.step_attempts_default PARTITION OF payflow.step_attempts DEFAULT;
ALTER TABLE payflow.step_attempts_default ADD PRIMARY KEY (operation_id, id);

-- Where run_scheduler's sweep of the operations in flight stopped: the id
-- of the last one it looked at ('': start from the first).  One row.
CREATE TABLE payflow.scheduler_sweep (
	id boolean PRIMARY KEY DEFAULT true CHECK (id),
	after_operation text COLLATE "C" NOT NULL DEFAULT '',
	updated_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO payflow.scheduler_sweep DEFAULT VALUES;

-- The transactional outbox, in two parts (0.5.0, storage v2).
--
-- outbox_events (outbox_log.sql) is the log: one row per event, written
-- once by the transaction that changes the operation, never updated,
-- partitioned by the operation's day and dropped with it (purge,
-- partitions.sql).  It is the durable record of what payflow emitted.
--
-- outbox is the relays' work list: the events not yet published, with
-- their claims, backoff and errors, which change at every claim, nack and
-- ack.  It is UNLOGGED: none of those changes reaches the WAL (0.4 logged
-- each event's insert, claim, delete and published row: 5.4 of the 15.2 KB
-- of WAL an operation wrote).  A crash, or a standby's promotion, empties
-- it; the first claim after that builds it again from the log
-- (_outbox_rebuild): every event from outbox_position.done_below on that no
-- outbox_batches row published and no dead letter took.  What a relay had
-- claimed but not acked then goes out again, which the relays' at-least-once
-- contract already allows; a nack's backoff starts over.  An unlogged table
-- cannot be read on a hot standby: read the outbox on the primary.
CREATE SEQUENCE payflow.outbox_seq_seq;

-- The work list.  Claims and nacks touch only unindexed columns (HOT), and
-- a claim updates every row of a page in one transaction, so a page needs
-- room for a second version of each row: fillfactor 30.  seq has no
-- identity of its own: an unlogged table's identity sequence is unlogged
-- too, and would start over after a crash while the log's seqs go on.
CREATE UNLOGGED TABLE payflow.outbox (
	event_id uuid PRIMARY KEY,
	seq bigint NOT NULL DEFAULT nextval('payflow.outbox_seq_seq') CHECK (seq > 0),
	operation_id text COLLATE "C" NOT NULL,
	event_type text NOT NULL,
	destination text NOT NULL,
	message_group_id text COLLATE "C" NOT NULL,
	body jsonb NOT NULL,			-- SQS message attributes derive from it (outbox_claim)
	created_at timestamptz NOT NULL DEFAULT now(),
	available_at timestamptz NOT NULL DEFAULT now(),
	claimed_by text,
	claim_expires_at timestamptz,
	attempts integer NOT NULL DEFAULT 0,
	last_error text
) WITH (fillfactor = 30,
		autovacuum_vacuum_scale_factor = 0.01,
		autovacuum_vacuum_threshold = 1000,
		autovacuum_vacuum_insert_scale_factor = 0.01,
		autovacuum_analyze_scale_factor = 0.05,
		autovacuum_vacuum_cost_delay = 0);

-- The claim's scan in seq order.  Partial on a condition only
-- outbox_claim's scan states (seq is never updated, so HOT is unaffected):
-- no other query can use it, in particular not the claim's group-head
-- probe, which a plan made for an empty outbox otherwise answered by
-- walking this index from its start for every candidate (quadratic).
CREATE INDEX outbox_seq_idx ON payflow.outbox (seq) WHERE seq > 0;
CREATE INDEX outbox_group_idx ON payflow.outbox (message_group_id, seq);

-- Where the outbox's live rows begin, so that the relay's claim does not
-- walk the rows acked before them.  Acked rows leave dead entries at the
-- front of outbox_seq_idx until VACUUM removes them (autovacuum looks at a
-- database at most once a minute).  A claim marks the entries of rows that
-- every snapshot sees deleted at its first visit, and later claims skip
-- them cheaply; but while any snapshot is older than the deletes (a report,
-- pg_dump, a standby's hot_standby_feedback), every claim fetched every
-- row acked since from the heap again: with one REPEATABLE READ
-- transaction open, draining 20,000 events in claims of 10 slowed from 281
-- to 936 us per event as it went (60 with none open).  The claim starts at
-- low_seq instead.
--
-- low_seq moves only over rows that are gone for every snapshot.  A move
-- (_outbox_cursor_move, every 100 ms at most) reads the sequence's next
-- value (pending_end), then writes the row with a new xid (its xmin): every
-- seq below pending_end was drawn by a transaction with an older xid (the
-- one outbox writer takes its xid before it draws a seq).  Once all of
-- those have ended, a snapshot sees each row below pending_end either
-- alive or gone for good: the next move sets low_seq to the first row it
-- sees alive, at most pending_end.  One update a move: while a snapshot is
-- held the row's versions pile up too, and each claim reads them.
-- Claimed, nacked and waiting rows are alive, so they are never behind
-- low_seq.  A sequence set back, or values cached by a session (the
-- sequence has CACHE 1; someone could change it), would break that: low_seq
-- goes back to 0 when it is past the sequence, and every minute anyway.
-- Unlogged, as the outbox is: a crash empties both, and a missing row is
-- what tells the next move to rebuild the outbox (_outbox_rebuild).
CREATE UNLOGGED TABLE payflow._outbox_cursor (
	id boolean PRIMARY KEY DEFAULT true CHECK (id),
	low_seq bigint NOT NULL DEFAULT 0,
	pending_end bigint,
	moved_at timestamptz NOT NULL DEFAULT clock_timestamp(),
	moved_by xid8,
	reset_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
INSERT INTO payflow._outbox_cursor DEFAULT VALUES;

-- The "pg" claim-check store.  A payload is its key and its bytes: its
-- operation is named in the key, its checksum and size follow from the
-- bytes and are kept where the payload is referred to (operations.
-- request_mac and request_size, step_results.result_mac and result_size),
-- not a second time here (117 bytes a row, about three rows an
-- operation).  The content key is the installation's one (content_mac.sql),
-- so a checksum computed now is the one written.
CREATE TABLE payflow.payloads (
	created_at timestamptz NOT NULL DEFAULT now(),	-- first: no padding after the key
	key text COLLATE "C" NOT NULL,	-- payments/<operation id>/<name>: _payload_operation
	content bytea NOT NULL
) PARTITION BY RANGE (key);	-- a partition a day of operations (partitions.sql; its key: history_events')
CREATE TABLE payflow.payloads_default PARTITION OF payflow.payloads DEFAULT;
ALTER TABLE payflow.payloads_default ADD PRIMARY KEY (key);
-- Every key of an operation starts with "payments/<id>/", so purge and
-- the console find an operation's payloads by a range of the primary key.

-- Event ids a consumer has handled (consumer-side de-duplication).
CREATE TABLE payflow.consumed_events (
	consumer text COLLATE "C" NOT NULL,
	event_id uuid NOT NULL,
	consumed_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (consumer, event_id)
);
CREATE INDEX consumed_events_at_idx ON payflow.consumed_events USING brin (consumed_at);

-- Failed operations (step), messages no worker could handle (message)
-- and events SQS refused for good (event).
CREATE TABLE payflow.dead_letters (
	id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	source text NOT NULL CHECK (source IN ('step', 'message', 'event')),
	operation_id text,
	step_name text,
	queue text,
	message_body text,
	error jsonb NOT NULL,
	attempts integer,
	created_at timestamptz NOT NULL DEFAULT now(),
	replayed_at timestamptz
);
CREATE INDEX dead_letters_operation_idx ON payflow.dead_letters (operation_id);
CREATE INDEX dead_letters_created_idx ON payflow.dead_letters (created_at);

-- API keys of the HTTP edge: only a sha256 of the secret is stored.
CREATE TABLE payflow.api_keys (
	id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	tenant text NOT NULL,
	name text,
	key_hash bytea NOT NULL UNIQUE,
	created_at timestamptz NOT NULL DEFAULT now(),
	revoked_at timestamptz
);

-- A tenant's webhook: where its OperationCompleted / OperationFailed events
-- are POSTed, and the secret they are signed with (HMAC-SHA256).  The
-- secret is kept sealed (payflow._seal, AES-256) under payflow._webhook_key
-- (webhooks.sql), a key outside this table that no role but the owner
-- reads; only set_webhook (once) and webhook_target (the webhook worker)
-- return it in clear.  A rotation (set_webhook again) keeps the previous secret valid
-- until previous_until (payflow.webhook_secret_overlap), and the worker
-- signs with both meanwhile, so receivers can switch without a gap.
-- (0.5.0: the column order is the update's, which appended the sealed ones.)
CREATE TABLE payflow.webhooks (
	tenant text COLLATE "C" PRIMARY KEY,
	url text NOT NULL,
	created_at timestamptz NOT NULL DEFAULT now(),
	updated_at timestamptz NOT NULL DEFAULT now(),
	secret_sealed bytea NOT NULL,
	previous_secret_sealed bytea,
	previous_until timestamptz
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

-- The events payflow published to operation-events, by id and a sha256 of
-- the body: the webhook worker signs and delivers only those, so that
-- whoever may send to that queue cannot have payflow sign "payment
-- completed" for an operation that failed.  Kept as long as its operation.
-- Not written since 0.5.0: the outbox's log holds each such event once
-- (_require_published); the rows of events published before stay until
-- their operations are purged.
CREATE TABLE payflow.operation_events (
	event_id uuid PRIMARY KEY,
	operation_id text COLLATE "C" NOT NULL,
	body_sha256 bytea NOT NULL,
	created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX operation_events_operation_idx ON payflow.operation_events (operation_id);
