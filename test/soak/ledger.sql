-- test/soak/ledger.sql — what the soak runner keeps to check its
-- invariants afterwards.  Purge runs during the soak (so that table sizes
-- level off) and deletes finished operations with their history and dead
-- letters; the checks must not depend on what purge left.  So two triggers
-- copy, in the very transaction that writes them, every status change and
-- every dead letter into schema soak, which purge never touches.  A
-- trigger cannot miss a row (a poller racing purge could), and costs one
-- small insert per row.  Observation only: nothing here changes what
-- payflow does.
SET client_min_messages = warning;
CREATE SCHEMA soak;

-- Every operation the load generator got an id for (one row per payment;
-- a retried submit after a lost answer must get the same id).
CREATE TABLE soak.submitted (
	n integer PRIMARY KEY,
	payment_id text NOT NULL UNIQUE,
	operation_id text NOT NULL UNIQUE,
	submitted_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
GRANT USAGE ON SCHEMA soak TO payflow_app;
GRANT INSERT, SELECT ON soak.submitted TO payflow_app;

CREATE TABLE soak.transitions (
	operation_id text NOT NULL,
	from_status text,
	to_status text NOT NULL,
	reason text,
	actor text NOT NULL,
	at timestamptz NOT NULL
);
CREATE INDEX ON soak.transitions (operation_id);
CREATE INDEX ON soak.transitions (to_status, at);

CREATE TABLE soak.dead_letters (
	id bigint NOT NULL,
	source text NOT NULL,
	operation_id text,
	step_name text,
	queue text,
	message_body text,
	error jsonb NOT NULL,
	attempts integer,
	created_at timestamptz NOT NULL
);

-- The triggers run inside payflow's SECURITY DEFINER functions
-- (search_path pg_catalog, payflow, pg_temp): every name is qualified.
-- Every status change, from the operation's row itself (0.5.0 writes no
-- history row for most changes: history.sql renders them, and purge takes
-- what they are rendered from).
CREATE FUNCTION soak.keep_transition() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO soak.transitions (operation_id, from_status, to_status, reason, actor, at)
	VALUES (NEW.id, CASE WHEN TG_OP = 'UPDATE' THEN OLD.status END, NEW.status,
			CASE NEW.status
				WHEN 'FAILED' THEN coalesce(NEW.error ->> 'message', NEW.error ->> 'code', 'failed')
				WHEN 'CANCELLED' THEN coalesce(NEW.error ->> 'message', 'cancelled')
			END,
			coalesce(NEW.step_lease_owner, session_user), NEW.updated_at);
	RETURN NULL;
END
$$;
CREATE TRIGGER soak_keep_submit AFTER INSERT ON payflow.operations
	FOR EACH ROW EXECUTE FUNCTION soak.keep_transition();
CREATE TRIGGER soak_keep_transition AFTER UPDATE ON payflow.operations
	FOR EACH ROW WHEN (NEW.status IS DISTINCT FROM OLD.status) EXECUTE FUNCTION soak.keep_transition();

CREATE FUNCTION soak.keep_dead_letter() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO soak.dead_letters (id, source, operation_id, step_name, queue, message_body, error,
								   attempts, created_at)
	VALUES (NEW.id, NEW.source, NEW.operation_id, NEW.step_name, NEW.queue, NEW.message_body, NEW.error,
			NEW.attempts, NEW.created_at);
	RETURN NULL;
END
$$;
CREATE TRIGGER soak_keep_dead_letter AFTER INSERT ON payflow.dead_letters
	FOR EACH ROW EXECUTE FUNCTION soak.keep_dead_letter();

-- Every event written to the outbox: a step's request event emitted twice
-- with the same attempt number was re-driven by the scheduler's stuck-step
-- recovery (a retry or a takeover emits attempt + 1).
CREATE TABLE soak.events (
	operation_id text NOT NULL,
	event_type text NOT NULL,
	attempt integer,
	created_at timestamptz NOT NULL
);
CREATE FUNCTION soak.keep_event() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO soak.events (operation_id, event_type, attempt, created_at)
	VALUES (NEW.operation_id, NEW.event_type, (NEW.body ->> 'attempt')::integer, NEW.created_at);
	RETURN NULL;
END
$$;
CREATE TRIGGER soak_keep_event AFTER INSERT ON payflow.outbox
	FOR EACH ROW EXECUTE FUNCTION soak.keep_event();

-- Filled at the end from the runner's files and the external systems.
CREATE TABLE soak.faults (kind text NOT NULL, args text, started_at timestamptz NOT NULL,
						  ended_at timestamptz NOT NULL, injected boolean NOT NULL);
CREATE TABLE soak.poison (marker text PRIMARY KEY, kind text NOT NULL, queue text NOT NULL,
						  sent_at timestamptz NOT NULL);
CREATE TABLE soak.duplicates (event_id text, operation_id text, queue text, sent_at timestamptz NOT NULL);
CREATE TABLE soak.charges (charge_id text, idempotency_key text, payment_id text);
CREATE TABLE soak.invoices (invoice_id text, idempotency_key text, operation_id text);
CREATE TABLE soak.dlq (queue text, body text);
CREATE TABLE soak.sizes (at timestamptz, relname text, total_bytes bigint, index_bytes bigint, live_rows bigint,
						 dead_rows bigint);
