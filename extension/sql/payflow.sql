-- payflow: tracked asynchronous payment operations.
--
-- The shared source of the full install script of the current version, for
-- both flavours.  extension/sql/assemble.sh puts one flavour's helpers where
-- this file says "--@@ flavour helpers @@" (and its grants at "--@@ flavour
-- grants @@"): extension/sql/flavour-c/ (C functions, CREATE EXTENSION
-- payflow) or extension/sql/flavour-sql/ (their SQL twins: the plain SQL
-- install and the pg_tle extension for Amazon RDS and Aurora, make
-- dist-sql).  Tables and business rules exist here only.  Later versions
-- ship payflow--A--B.sql update scripts instead of editing what was
-- released.
--
-- Tables hold the state, functions the rules.  Every public function is
-- SECURITY DEFINER with a pinned search_path: the roles payflow_app,
-- payflow_worker and payflow_admin get EXECUTE on what they need; the only
-- table privileges are reads: payflow_app its own tenant's operations and
-- their history (row-level security), payflow_admin everything but secrets.

\echo Use "CREATE EXTENSION payflow" to load this file. \quit

-- One flavour per database: the other one's objects would collide halfway
-- through this script, with a message that names neither.
DO $one_flavour$
BEGIN
	IF to_regprocedure('payflow._flavour()') IS NOT NULL THEN
		RAISE EXCEPTION 'payflow is already installed in this database (flavour "%")',
			payflow._flavour()
			USING ERRCODE = 'duplicate_object',
				  HINT = 'Use one flavour per database.  To replace the C-free flavour, '
						 'DROP SCHEMA payflow CASCADE first (this deletes its operations).';
	END IF;
END
$one_flavour$;

-- Roles are cluster-wide and survive DROP EXTENSION; create them only once.
DO $roles$
BEGIN
	IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'payflow_app') THEN
		CREATE ROLE payflow_app NOLOGIN;
	END IF;
	IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'payflow_worker') THEN
		CREATE ROLE payflow_worker NOLOGIN;
	END IF;
	IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'payflow_admin') THEN
		CREATE ROLE payflow_admin NOLOGIN;
	END IF;
	-- payflow_worker is the union of these, one per kind of edge process,
	-- so that each login gets only what its program calls
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

---------------------------------------------------------------------------
-- Flavour helpers: C functions (C flavour) or their SQL twins (C-free)
---------------------------------------------------------------------------

--@@ flavour helpers @@

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

-- The newest version: what new operations start on.
CREATE FUNCTION payflow._pipeline_version() RETURNS integer
	LANGUAGE sql STABLE
	AS $$ SELECT max(p.version) FROM payflow.pipelines p $$;

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

-- One row per operation.  Only status/updated_at/current_step/error change
-- on the hot path and none of them is indexed, so those updates are HOT;
-- terminal_at and payloads_purged_at change once each.
CREATE TABLE payflow.operations (
	id text COLLATE "C" PRIMARY KEY,
	tenant text COLLATE "C" NOT NULL DEFAULT '',
	payment_id text COLLATE "C" NOT NULL,
	idempotency_key text COLLATE "C" NOT NULL,
	request_hash bytea NOT NULL,	-- sha256 of payment id + details (PF002)
	correlation_id text,
	status text NOT NULL DEFAULT 'PENDING',
	current_step text NOT NULL DEFAULT 'PROCESS_PAYMENT',
	request_ref jsonb NOT NULL,
	result jsonb,
	error jsonb,
	created_at timestamptz NOT NULL DEFAULT now(),
	updated_at timestamptz NOT NULL DEFAULT now(),
	terminal_at timestamptz,
	payloads_purged_at timestamptz,
	pipeline_version integer NOT NULL DEFAULT payflow._pipeline_version(),	-- started on it, finishes on it
	CONSTRAINT operations_idempotency_key UNIQUE (tenant, idempotency_key)
) WITH (fillfactor = 80);

CREATE INDEX operations_terminal_idx ON payflow.operations (terminal_at)
	WHERE terminal_at IS NOT NULL;
CREATE INDEX operations_payloads_idx ON payflow.operations (terminal_at)
	WHERE terminal_at IS NOT NULL AND payloads_purged_at IS NULL;

-- Every status change: who, when, from, to, why.  Append-only.
CREATE TABLE payflow.operation_history (
	operation_id text COLLATE "C" NOT NULL,
	id bigint GENERATED ALWAYS AS IDENTITY,
	from_status text,
	to_status text NOT NULL,
	reason text,
	actor text NOT NULL,
	at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (operation_id, id)
);

-- Steps churn: claim, heartbeat, complete.  Heartbeats only touch
-- lease_expires_at, which no index contains, so they are HOT updates;
-- fillfactor leaves room on the page for them.  The partial indexes keep
-- the scheduler's scans to the rows that can need it.
CREATE TABLE payflow.steps (
	operation_id text COLLATE "C" NOT NULL,
	step_name text COLLATE "C" NOT NULL,
	status text NOT NULL DEFAULT 'PENDING'
		CHECK (status IN ('PENDING', 'RUNNING', 'RETRY_WAIT', 'SUCCEEDED', 'FAILED', 'CANCELLED')),
	attempt integer NOT NULL DEFAULT 0,
	input_ref jsonb,
	lease_owner text,
	lease_expires_at timestamptz,
	claimed_at timestamptz,
	pending_since timestamptz,		-- set while PENDING: stuck detection
	next_attempt_at timestamptz,	-- set while RETRY_WAIT
	external_ref text,				-- e.g. the legacy job of submit-poll mode
	result jsonb,
	result_ref jsonb,
	completion jsonb,				-- answer of complete_step, repeated verbatim
	last_error jsonb,
	created_at timestamptz NOT NULL DEFAULT now(),
	finished_at timestamptz,
	PRIMARY KEY (operation_id, step_name)
) WITH (fillfactor = 70,
		autovacuum_vacuum_scale_factor = 0.02,
		autovacuum_analyze_scale_factor = 0.05,
		autovacuum_vacuum_cost_delay = 0);

CREATE INDEX steps_pending_idx ON payflow.steps (pending_since) WHERE status = 'PENDING';
CREATE INDEX steps_running_idx ON payflow.steps (claimed_at) WHERE status = 'RUNNING';
CREATE INDEX steps_retry_idx ON payflow.steps (next_attempt_at) WHERE status = 'RETRY_WAIT';
-- metrics(): the steps finished in the last hour, without reading the others.
-- An entry is added once per step, when it finishes (that update changes the
-- status, so it is not HOT anyway).
CREATE INDEX steps_finished_idx ON payflow.steps (finished_at) WHERE finished_at IS NOT NULL;

-- The transactional outbox.  Rows live from the state change that wrote
-- them to the relay's ack, which deletes them: the table stays as small as
-- the backlog.  Claims and nacks touch only unindexed columns (HOT), but a
-- claim updates every row of a page in one transaction, so nothing can be
-- pruned meanwhile: a HOT update needs room for a second version of each
-- row (~750 bytes).  At fillfactor 70 half the claims did not fit, went to
-- another page and wrote the whole row and three index entries to the WAL
-- again; at 30 they stay HOT (0.4.0's bench: 2 KB less WAL per operation).
-- The table holds only the backlog, so the room costs little.
CREATE TABLE payflow.outbox (
	event_id uuid PRIMARY KEY,
	seq bigint GENERATED ALWAYS AS IDENTITY,
	operation_id text COLLATE "C" NOT NULL,
	event_type text NOT NULL,
	destination text NOT NULL,
	message_group_id text COLLATE "C" NOT NULL,
	body jsonb NOT NULL,
	attributes jsonb NOT NULL,
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

CREATE INDEX outbox_seq_idx ON payflow.outbox (seq);
CREATE INDEX outbox_group_idx ON payflow.outbox (message_group_id, seq);

-- Log of acked events and their SQS message ids, for investigation;
-- append-only, pruned by purge after payflow.retention_published.
CREATE TABLE payflow.outbox_published (
	event_id uuid NOT NULL,
	operation_id text NOT NULL,
	event_type text NOT NULL,
	destination text NOT NULL,
	message_id text,
	published_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX outbox_published_at_idx ON payflow.outbox_published USING brin (published_at);

-- The "pg" claim-check store.
CREATE TABLE payflow.payloads (
	key text COLLATE "C" PRIMARY KEY,
	operation_id text COLLATE "C" NOT NULL,
	checksum text NOT NULL,			-- "sha256:<hex>"
	size bigint NOT NULL,
	content bytea NOT NULL,
	created_at timestamptz NOT NULL DEFAULT now()
);
-- No index on operation_id: every key of an operation starts with
-- "payments/<id>/", so purge finds them by a range of the primary key.

-- Event ids a consumer has handled (consumer-side de-duplication).
CREATE TABLE payflow.consumed_events (
	consumer text COLLATE "C" NOT NULL,
	event_id uuid NOT NULL,
	consumed_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (consumer, event_id)
);
CREATE INDEX consumed_events_at_idx ON payflow.consumed_events USING brin (consumed_at);

-- Failed operations and messages no worker could handle.
CREATE TABLE payflow.dead_letters (
	id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	source text NOT NULL CHECK (source IN ('step', 'message')),
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

---------------------------------------------------------------------------
-- The transition check, derived from the pipeline definition (C, or its
-- PL/pgSQL twin); the trigger that calls it is in pipeline.sql
---------------------------------------------------------------------------

--@@ flavour include transitions.sql @@

---------------------------------------------------------------------------
-- Internal helpers (revoked from PUBLIC below)
---------------------------------------------------------------------------

-- Interval GUC (stored in seconds).
CREATE FUNCTION payflow._seconds(name text) RETURNS interval
	LANGUAGE sql STABLE STRICT
	AS $$ SELECT make_interval(secs => payflow._setting(name)::float8) $$;

-- ISO 8601 UTC with milliseconds, as in the event format ("…Z").
CREATE FUNCTION payflow._iso(ts timestamptz) RETURNS text
	LANGUAGE sql STABLE
	AS $$ SELECT to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') $$;

-- Card numbers in error texts (a legacy DBMS that echoes its input, say):
-- every run of 13 to 19 digits, spaces or dashes between them allowed, that
-- passes the Luhn check keeps its last four digits and loses the others.
-- Applied to errors before they are stored (PCI DSS 3.4); the workers
-- redact before that already.
CREATE FUNCTION payflow._mask_card_numbers(value text) RETURNS text
	LANGUAGE plpgsql IMMUTABLE STRICT
	AS $$
DECLARE
	-- A UUID's digit groups are no card number: "17678424-4288-4eea-..."
	-- holds the Luhn-valid run 1767842442884, and masking it would change
	-- event ids and operation bodies kept in dead letters for replay.
	-- UUIDs are set aside behind placeholders of non-digits while runs are
	-- looked for, then put back.
	c_uuid constant text := '[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}';
	v_uuids text[];
	v_match text;
	v_digits text;
	v_sum integer;
	v_digit integer;
	v_out text := value;
BEGIN
	IF value !~ '[0-9]{4}' THEN
		RETURN value;
	END IF;
	-- (a text already holding the placeholder mark is searched whole:
	-- masking too much is the safe side)
	IF strpos(value, chr(57344)) = 0 THEN
		v_uuids := ARRAY(SELECT DISTINCT m[1] FROM regexp_matches(value, '(' || c_uuid || ')', 'g') m);
		FOR i IN 1..coalesce(array_length(v_uuids, 1), 0) LOOP
			v_out := replace(v_out, v_uuids[i], chr(57344) || translate(i::text, '0123456789', 'abcdefghij') || chr(57345));
		END LOOP;
	END IF;
	FOR v_match IN SELECT DISTINCT m[1] FROM regexp_matches(v_out, '(?<![0-9])([0-9](?:[ -]?[0-9]){12,18})(?![0-9])', 'g') m LOOP
		v_digits := regexp_replace(v_match, '[^0-9]', '', 'g');
		v_sum := 0;
		FOR i IN 1..length(v_digits) LOOP
			v_digit := substr(v_digits, length(v_digits) - i + 1, 1)::integer;
			IF i % 2 = 0 THEN
				v_digit := v_digit * 2;
				IF v_digit > 9 THEN
					v_digit := v_digit - 9;
				END IF;
			END IF;
			v_sum := v_sum + v_digit;
		END LOOP;
		IF v_sum % 10 = 0 THEN
			v_out := replace(v_out, v_match, repeat('*', length(v_digits) - 4) || right(v_digits, 4));
		END IF;
	END LOOP;
	FOR i IN 1..coalesce(array_length(v_uuids, 1), 0) LOOP
		v_out := replace(v_out, chr(57344) || translate(i::text, '0123456789', 'abcdefghij') || chr(57345), v_uuids[i]);
	END LOOP;
	RETURN v_out;
END
$$;

-- The same over every string and number of a JSON document (keys stay).
CREATE FUNCTION payflow._mask_card_numbers(value jsonb) RETURNS jsonb
	LANGUAGE sql IMMUTABLE STRICT
	AS $$
	SELECT CASE jsonb_typeof(value)
		WHEN 'string' THEN to_jsonb(payflow._mask_card_numbers(value #>> '{}'))
		WHEN 'object' THEN (SELECT coalesce(jsonb_object_agg(k, payflow._mask_card_numbers(v)), '{}'::jsonb)
							  FROM jsonb_each(value) AS e(k, v))
		WHEN 'array' THEN (SELECT coalesce(jsonb_agg(payflow._mask_card_numbers(v) ORDER BY i), '[]'::jsonb)
							 FROM jsonb_array_elements(value) WITH ORDINALITY AS e(v, i))
		-- a number that is a card number becomes the masked string
		WHEN 'number' THEN CASE WHEN payflow._mask_card_numbers(value::text) = value::text THEN value
								ELSE to_jsonb(payflow._mask_card_numbers(value::text)) END
		ELSE value
	END
$$;

-- A required text argument: not NULL (22004), not empty (22023), not
-- longer than max_length characters (22001).
CREATE FUNCTION payflow._require_text(arg_name text, value text, max_length integer)
	RETURNS void
	LANGUAGE plpgsql IMMUTABLE
	AS $$
BEGIN
	IF value IS NULL THEN
		RAISE EXCEPTION '% must not be null', arg_name USING ERRCODE = 'null_value_not_allowed';
	ELSIF value = '' THEN
		RAISE EXCEPTION '% must not be empty', arg_name USING ERRCODE = 'invalid_parameter_value';
	ELSIF length(value) > max_length THEN
		RAISE EXCEPTION '% is too long', arg_name
			USING ERRCODE = 'string_data_right_truncation',
				  DETAIL = format('The limit is %s characters.', max_length);
	END IF;
END
$$;

-- A well-formed operation id, else 22P02 (an unknown but well-formed id is
-- PF003, raised by the caller after the look-up).
CREATE FUNCTION payflow._require_operation_id(operation_id text) RETURNS void
	LANGUAGE plpgsql IMMUTABLE
	AS $$
BEGIN
	PERFORM payflow._require_text('operation_id', operation_id, 64);
	IF operation_id !~ '^pay_[0-9A-HJKMNP-TV-Z]{26}$' THEN
		RAISE EXCEPTION 'invalid operation id "%"', operation_id
			USING ERRCODE = 'invalid_text_representation',
				  DETAIL = 'An operation id is "pay_" followed by 26 characters of Crockford base32.';
	END IF;
END
$$;

-- Whether the caller may see an operation of this tenant: one of the
-- tenant authenticate() bound to the transaction ('' when none), or, for an
-- administrator (a member of payflow_admin, superusers included) who bound
-- none, every tenant's, so that operators can look up any operation.  The
-- caller's role decides (login or SET ROLE), not the functions' owner.
CREATE FUNCTION payflow._visible(op_tenant text) RETURNS boolean
	LANGUAGE sql STABLE
	AS $$
	SELECT op_tenant = payflow._current_tenant()
		   OR (payflow._current_tenant() = ''
			   AND pg_has_role(payflow._outer_role(), 'payflow_admin', 'USAGE'))
$$;

CREATE FUNCTION payflow._unknown_operation(operation_id text) RETURNS void
	LANGUAGE plpgsql VOLATILE
	AS $$
BEGIN
	RAISE EXCEPTION 'operation "%" does not exist', operation_id USING ERRCODE = 'PF003';
END
$$;

-- Locks an operation's row, else PF003.  Lock order everywhere: the
-- operation, then its step, so step functions never deadlock each other.
CREATE FUNCTION payflow._lock_operation(p_operation_id text) RETURNS payflow.operations
	LANGUAGE plpgsql
	AS $$
DECLARE
	o payflow.operations;
BEGIN
	SELECT * INTO o FROM payflow.operations WHERE id = p_operation_id FOR UPDATE;
	IF NOT FOUND THEN
		PERFORM payflow._unknown_operation(p_operation_id);
	END IF;
	RETURN o;
END
$$;

-- Locks a step's row (after its operation's); all NULL when it does not exist.
CREATE FUNCTION payflow._lock_step(p_operation_id text, p_step text) RETURNS payflow.steps
	LANGUAGE sql
	AS $$
	SELECT * FROM payflow.steps WHERE operation_id = p_operation_id AND step_name = p_step FOR UPDATE
$$;

-- The definition of a step by name in the newest version that has it,
-- else 22023.  Step functions check names with it before they know the
-- operation, then read the operation's own version (_step_of).
CREATE FUNCTION payflow._step_definition(step text) RETURNS payflow.step_definitions
	LANGUAGE plpgsql STABLE
	AS $$
DECLARE
	d payflow.step_definitions;
BEGIN
	PERFORM payflow._require_text('step', step, 64);
	SELECT * INTO d FROM payflow.step_definitions sd WHERE sd.step_name = step
	 ORDER BY sd.pipeline_version DESC LIMIT 1;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'unknown step "%"', step
			USING ERRCODE = 'invalid_parameter_value',
				  HINT = format('Steps are %s.', payflow._step_list(payflow._pipeline_version()));
	END IF;
	RETURN d;
END
$$;

-- A step of the version an operation runs on, else 22023: a report for a
-- step that operation's pipeline does not have.
CREATE FUNCTION payflow._require_step_of(o payflow.operations, p_step text) RETURNS payflow.step_definitions
	LANGUAGE plpgsql STABLE
	AS $$
DECLARE
	d payflow.step_definitions := payflow._step_of(o.pipeline_version, p_step);
BEGIN
	IF d.step_name IS NULL THEN
		RAISE EXCEPTION 'step % is not in pipeline version % of operation %', p_step, o.pipeline_version, o.id
			USING ERRCODE = 'invalid_parameter_value',
				  HINT = 'Operations finish on the pipeline version they started with.';
	END IF;
	RETURN d;
END
$$;

-- Validates the arguments every step function shares.
CREATE FUNCTION payflow._require_worker(worker_id text, lease_seconds integer) RETURNS void
	LANGUAGE plpgsql IMMUTABLE
	AS $$
BEGIN
	PERFORM payflow._require_text('worker_id', worker_id, 200);
	IF lease_seconds IS NULL OR lease_seconds < 1 OR lease_seconds > 86400 THEN
		RAISE EXCEPTION 'lease_seconds must be between 1 and 86400'
			USING ERRCODE = 'invalid_parameter_value';
	END IF;
END
$$;

-- A JSON object argument.
CREATE FUNCTION payflow._require_object(arg_name text, value jsonb) RETURNS void
	LANGUAGE plpgsql IMMUTABLE
	AS $$
BEGIN
	IF value IS NULL THEN
		RAISE EXCEPTION '% must not be null', arg_name USING ERRCODE = 'null_value_not_allowed';
	ELSIF jsonb_typeof(value) <> 'object' THEN
		RAISE EXCEPTION '% must be a JSON object', arg_name
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = format('Got a JSON %s.', jsonb_typeof(value));
	END IF;
END
$$;

-- Raises PF007 when a payload exceeds payflow.payload_max_bytes.
CREATE FUNCTION payflow._require_size(what text, size bigint) RETURNS void
	LANGUAGE plpgsql STABLE
	AS $$
DECLARE
	max_bytes bigint := payflow._setting('payload_max_bytes')::bigint;
BEGIN
	IF size > max_bytes THEN
		RAISE EXCEPTION '% is too large', what
			USING ERRCODE = 'PF007',
				  DETAIL = format('It has %s bytes; payflow.payload_max_bytes is %s.', size, max_bytes),
				  HINT = 'Put large payloads in S3 and call payflow.submit_ref().';
	END IF;
END
$$;

-- "sha256:<hex>" of some bytes.
CREATE FUNCTION payflow._checksum(content bytea) RETURNS text
	LANGUAGE sql IMMUTABLE STRICT
	AS $$ SELECT 'sha256:' || encode(sha256(content), 'hex') $$;

-- The one rule for a payload's key, in the "pg" store and in S3 alike (the
-- workers' payload_key.c writes the same): payments/<operation id>/<name>.
-- Every key of an operation lies in [_payload_key(id, ''),
-- _payload_keys_end(id)), so purge and the admin views find an operation's
-- payloads by a range of the primary key ("0" follows "/" in "C" order).
CREATE FUNCTION payflow._payload_key(p_operation_id text, p_name text) RETURNS text
	LANGUAGE sql IMMUTABLE PARALLEL SAFE
	AS $$
	SELECT 'payments/' || p_operation_id || '/' || p_name
$$;

CREATE FUNCTION payflow._payload_keys_end(p_operation_id text) RETURNS text
	LANGUAGE sql IMMUTABLE PARALLEL SAFE
	AS $$
	SELECT 'payments/' || p_operation_id || '0'
$$;

-- Writes a payload of the "pg" store and returns its reference.  A key is
-- written once: the same content again is a no-op, other content an error,
-- so a reference already sent in an event can never change under a reader.
CREATE FUNCTION payflow._payload_write(p_operation_id text, p_name text, p_content bytea)
	RETURNS jsonb
	LANGUAGE plpgsql
	AS $$
DECLARE
	v_key text := payflow._payload_key(p_operation_id, p_name);
	v_checksum text := payflow._checksum(p_content);
	v_existing text;
BEGIN
	PERFORM payflow._require_size('payload', octet_length(p_content));
	INSERT INTO payflow.payloads (key, operation_id, checksum, size, content)
	VALUES (v_key, p_operation_id, v_checksum, octet_length(p_content), p_content)
	ON CONFLICT (key) DO NOTHING;
	IF NOT FOUND THEN
		SELECT checksum INTO v_existing FROM payflow.payloads WHERE key = v_key;
		IF v_existing <> v_checksum THEN
			RAISE EXCEPTION 'payload "%" already exists with other content', v_key
				USING ERRCODE = 'unique_violation',
					  DETAIL = 'Payload keys are written once; a reference may already be in flight.';
		END IF;
	END IF;
	RETURN jsonb_build_object('store', 'pg', 'key', v_key, 'checksum', v_checksum,
							  'size', octet_length(p_content));
END
$$;

-- The message body of an event (DESIGN §2): envelope fields, then the
-- event's own fields (extra).  SQL functions without SET are inlined.
CREATE FUNCTION payflow._event_body(p_event_id uuid, p_operation_id text, p_payment_id text,
									p_correlation_id text, p_event_type text, p_attempt integer,
									p_extra jsonb)
	RETURNS jsonb
	LANGUAGE sql STABLE
	AS $$
	SELECT jsonb_build_object('eventType', p_event_type,
							  'eventVersion', 1,
							  'eventId', p_event_id,
							  'operationId', p_operation_id,
							  'paymentId', p_payment_id,
							  'attempt', p_attempt,
							  'correlationId', p_correlation_id,
							  'createdAt', payflow._iso(now())) || p_extra
$$;

-- SQS message attributes of an event (no NULLs: SQS rejects empty values).
CREATE FUNCTION payflow._event_attributes(p_operation_id text, p_correlation_id text, p_event_type text)
	RETURNS jsonb
	LANGUAGE sql IMMUTABLE
	AS $$
	SELECT jsonb_strip_nulls(jsonb_build_object('eventType', p_event_type,
												'operationId', p_operation_id,
												'correlationId', p_correlation_id))
$$;

-- The message group of a payment's events: the payment id itself when SQS
-- FIFO accepts it as a MessageGroupId (at most 128 characters of letters,
-- digits and ASCII punctuation), else "sha256:" and its hash, which keeps
-- one group per payment.
CREATE FUNCTION payflow._message_group_id(payment_id text) RETURNS text
	LANGUAGE sql IMMUTABLE PARALLEL SAFE
	AS $$
	SELECT CASE WHEN length(payment_id) <= 128 AND payment_id ~ '^[!-~]+$' THEN payment_id
				ELSE 'sha256:' || encode(sha256(convert_to(payment_id, 'UTF8')), 'hex') END
$$;

-- The one writer of the outbox: every event payflow publishes is written
-- here, and returns its outbox id.  The message group is the payment's
-- (p_group_key: the payment id).  A terminal event (operation-events) is
-- also recorded with its body's sha256 in operation_events, once per event
-- id (the body's eventId: a replay sends the recorded event again), which
-- is how the webhook worker knows payflow published it.  The relays are
-- woken at commit.
CREATE FUNCTION payflow._outbox_write(p_event_id uuid, p_operation_id text, p_group_key text,
									  p_correlation_id text, p_event_type text, p_destination text,
									  p_body jsonb)
	RETURNS uuid
	LANGUAGE plpgsql
	AS $$
BEGIN
	INSERT INTO payflow.outbox (event_id, operation_id, event_type, destination,
								message_group_id, body, attributes)
	VALUES (p_event_id, p_operation_id, p_event_type, p_destination, payflow._message_group_id(p_group_key),
			p_body, payflow._event_attributes(p_operation_id, p_correlation_id, p_event_type));
	IF p_destination = 'operation-events' THEN
		INSERT INTO payflow.operation_events (event_id, operation_id, body_sha256)
		VALUES ((p_body ->> 'eventId')::uuid, p_operation_id, sha256(convert_to(p_body::text, 'UTF8')))
		ON CONFLICT (event_id) DO NOTHING;
	END IF;
	PERFORM payflow._outbox_written();
	RETURN p_event_id;
END
$$;

-- Builds a new event and writes it (_outbox_write); returns its id.
CREATE FUNCTION payflow._emit(p_operation_id text, p_payment_id text, p_correlation_id text,
							  p_event_type text, p_destination text, p_attempt integer,
							  p_extra jsonb)
	RETURNS uuid
	LANGUAGE plpgsql
	AS $$
DECLARE
	v_event_id uuid := gen_random_uuid();
BEGIN
	RETURN payflow._outbox_write(v_event_id, p_operation_id, p_payment_id, p_correlation_id, p_event_type,
								 p_destination,
								 payflow._event_body(v_event_id, p_operation_id, p_payment_id, p_correlation_id,
													 p_event_type, p_attempt, p_extra));
END
$$;

-- Emits the event that asks a worker to run a step (first run, retry,
-- re-drive or replay).
CREATE FUNCTION payflow._emit_step_request(o payflow.operations, s payflow.steps)
	RETURNS uuid
	LANGUAGE plpgsql
	AS $$
DECLARE
	d payflow.step_definitions := payflow._step_of(o.pipeline_version, s.step_name);
BEGIN
	RETURN payflow._emit(o.id, o.payment_id, o.correlation_id, d.request_event, d.destination,
						 s.attempt + 1, jsonb_build_object(d.input_field, s.input_ref));
END
$$;

-- Changes an operation's status and appends the history row; the trigger
-- operations_transition checks the move.  The caller holds the operation's
-- row lock.
CREATE FUNCTION payflow._set_status(p_operation_id text, p_from text, p_to text,
									p_reason text, p_actor text)
	RETURNS void
	LANGUAGE plpgsql
	AS $$
BEGIN
	UPDATE payflow.operations
	   SET status = p_to,
		   updated_at = now(),
		   terminal_at = CASE WHEN payflow._is_terminal(p_to) THEN now() END
	 WHERE id = p_operation_id;
	INSERT INTO payflow.operation_history (operation_id, from_status, to_status, reason, actor)
	VALUES (p_operation_id, p_from, p_to, left(p_reason, 500), p_actor);
	PERFORM payflow._status_changed();
END
$$;

-- Fails an operation at a step: step FAILED, operation FAILED, a dead
-- letter, and its version's failed event (OperationFailed).  Caller holds
-- both row locks.
CREATE FUNCTION payflow._fail_operation(o payflow.operations, s payflow.steps,
										p_error jsonb, p_actor text)
	RETURNS void
	LANGUAGE plpgsql
	AS $$
DECLARE
	v_summary jsonb := payflow._mask_card_numbers(jsonb_strip_nulls(jsonb_build_object(
		'step', s.step_name,
		'code', p_error -> 'code',
		'message', p_error -> 'message')));
BEGIN
	UPDATE payflow.steps
	   SET status = 'FAILED', last_error = p_error, finished_at = now(),
		   lease_expires_at = NULL, pending_since = NULL, next_attempt_at = NULL
	 WHERE operation_id = s.operation_id AND step_name = s.step_name;
	PERFORM payflow._set_status(o.id, o.status, 'FAILED',
								coalesce(v_summary ->> 'message', v_summary ->> 'code', 'failed'), p_actor);
	UPDATE payflow.operations SET error = v_summary WHERE id = o.id;
	INSERT INTO payflow.dead_letters (source, operation_id, step_name, error, attempts)
	VALUES ('step', o.id, s.step_name, payflow._mask_card_numbers(p_error), s.attempt);
	PERFORM payflow._emit(o.id, o.payment_id, o.correlation_id,
						  (SELECT p.failed_event FROM payflow.pipelines p WHERE p.version = o.pipeline_version),
						  'operation-events', s.attempt,
						  jsonb_build_object('status', 'FAILED', 'failedStep', s.step_name, 'error', v_summary));
END
$$;

-- Creates an operation, or returns the one its idempotency key already
-- names.  Concurrent calls with one key serialise on the unique index: the
-- second waits for the first to commit, then finds its row.  One statement
-- writes all five rows: submit is the hottest path and every statement
-- costs an executor start-up.  The operation starts on the newest pipeline
-- version, in its first step's ready status, with that step's request.
CREATE FUNCTION payflow._create_operation(p_payment_id text, p_idempotency_key text,
										  p_correlation_id text, p_request_hash bytea,
										  p_request_ref jsonb, p_content bytea)
	RETURNS text
	LANGUAGE plpgsql
	AS $$
DECLARE
	v_id text := payflow._new_operation_id();
	v_event_id uuid := gen_random_uuid();
	v_ref jsonb := coalesce(p_request_ref,
							jsonb_build_object('store', 'pg',
											   'key', payflow._payload_key(v_id, 'request.json'),
											   'checksum', payflow._checksum(p_content),
											   'size', octet_length(p_content)));
	v_tenant text := payflow._current_tenant();
	v_created text;
	v_existing payflow.operations;
BEGIN
	WITH f AS MATERIALIZED (
		SELECT d.* FROM payflow.step_definitions d
		 WHERE d.pipeline_version = payflow._pipeline_version() AND d.position = 1
	), op AS (
		INSERT INTO payflow.operations (id, tenant, payment_id, idempotency_key, request_hash,
										correlation_id, request_ref, status, current_step, pipeline_version)
		SELECT v_id, v_tenant, p_payment_id, p_idempotency_key, p_request_hash, p_correlation_id, v_ref,
			   f.ready_status, f.step_name, f.pipeline_version
		  FROM f
		ON CONFLICT ON CONSTRAINT operations_idempotency_key DO NOTHING
		RETURNING id, status, current_step
	), payload AS (
		INSERT INTO payflow.payloads (key, operation_id, checksum, size, content)
		SELECT v_ref ->> 'key', op.id, v_ref ->> 'checksum', octet_length(p_content), p_content
		  FROM op WHERE p_content IS NOT NULL
	), step AS (
		INSERT INTO payflow.steps (operation_id, step_name, input_ref, pending_since)
		SELECT op.id, op.current_step, v_ref, now() FROM op
	), history AS (
		INSERT INTO payflow.operation_history (operation_id, from_status, to_status, reason, actor)
		SELECT op.id, NULL, op.status, 'submitted', session_user FROM op
	), event AS (
		SELECT payflow._outbox_write(v_event_id, op.id, p_payment_id, p_correlation_id, f.request_event,
									 f.destination,
									 payflow._event_body(v_event_id, op.id, p_payment_id, p_correlation_id,
														 f.request_event, 1, jsonb_build_object(f.input_field, v_ref)))
		  FROM op, f
	)
	-- event is read here, so it runs
	SELECT op.id INTO v_created FROM op LEFT JOIN event ON true;

	IF v_created IS NULL THEN
		SELECT * INTO v_existing FROM payflow.operations
		 WHERE tenant = v_tenant AND idempotency_key = p_idempotency_key;
		IF v_existing.request_hash <> p_request_hash THEN
			RAISE EXCEPTION 'idempotency key "%" was already used with other details', p_idempotency_key
				USING ERRCODE = 'PF002',
					  DETAIL = format('Operation %s was created with this key.', v_existing.id),
					  HINT = 'Use a new idempotency key for a new payment request.';
		END IF;
		RETURN v_existing.id;
	END IF;
	RETURN v_id;
END
$$;

-- Identifiers that end up in hashes, message attributes and logs may not
-- hold control characters: the request hash of submit_ref joins fields with
-- newlines, and SQS refuses control characters in attribute values.
CREATE FUNCTION payflow._require_printable(arg_name text, value text) RETURNS void
	LANGUAGE plpgsql IMMUTABLE
	AS $$
BEGIN
	IF value ~ '[[:cntrl:]]' THEN
		RAISE EXCEPTION '% must not contain control characters', arg_name
			USING ERRCODE = 'invalid_parameter_value';
	END IF;
END
$$;

-- Validates the arguments submit and submit_ref share.
CREATE FUNCTION payflow._require_submit(payment_id text, idempotency_key text, correlation_id text)
	RETURNS void
	LANGUAGE plpgsql IMMUTABLE
	AS $$
BEGIN
	PERFORM payflow._require_text('payment_id', payment_id, 255);
	PERFORM payflow._require_printable('payment_id', payment_id);
	IF idempotency_key IS NOT NULL THEN
		PERFORM payflow._require_text('idempotency_key', idempotency_key, 255);
		PERFORM payflow._require_printable('idempotency_key', idempotency_key);
	END IF;
	IF correlation_id IS NOT NULL THEN
		PERFORM payflow._require_text('correlation_id', correlation_id, 255);
		PERFORM payflow._require_printable('correlation_id', correlation_id);
	END IF;
END
$$;

---------------------------------------------------------------------------
-- Public API: the application (payflow_app)
---------------------------------------------------------------------------

-- Creates an operation for a payment request and returns its id at once.
CREATE FUNCTION payflow.submit(payment_id text, details jsonb,
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
	IF payment_id IS NULL OR payment_id = '' OR length(payment_id) > 255 OR payment_id ~ '[[:cntrl:]]'
	   OR idempotency_key = '' OR length(idempotency_key) > 255 OR idempotency_key ~ '[[:cntrl:]]'
	   OR correlation_id = '' OR length(correlation_id) > 255 OR correlation_id ~ '[[:cntrl:]]'
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

-- Same as submit, for a request whose payload is already stored (S3, or a
-- "pg" payload written earlier); only its reference is kept.
CREATE FUNCTION payflow.submit_ref(payment_id text, store text, key text, checksum text, size bigint,
								   idempotency_key text DEFAULT NULL,
								   correlation_id text DEFAULT NULL)
	RETURNS text
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	v_stored payflow.payloads;
BEGIN
	PERFORM payflow._require_submit(payment_id, idempotency_key, correlation_id);
	PERFORM payflow._require_text('store', store, 16);
	PERFORM payflow._require_text('key', key, 1024);
	PERFORM payflow._require_printable('key', key);
	PERFORM payflow._require_text('checksum', checksum, 71);
	IF store NOT IN ('pg', 's3') THEN
		RAISE EXCEPTION 'unknown payload store "%"', store
			USING ERRCODE = 'invalid_parameter_value', HINT = 'Use "pg" or "s3".';
	END IF;
	IF checksum !~ '^sha256:[0-9a-f]{64}$' THEN
		RAISE EXCEPTION 'invalid checksum "%"', checksum
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = 'A checksum is "sha256:" followed by 64 lower-case hex digits.';
	END IF;
	IF size IS NULL OR size < 0 THEN
		RAISE EXCEPTION 'size must be a non-negative number of bytes'
			USING ERRCODE = CASE WHEN size IS NULL THEN 'null_value_not_allowed'
								 ELSE 'invalid_parameter_value' END;
	END IF;
	IF store = 'pg' THEN
		-- Only a payload of an operation the caller may see (its tenant's):
		-- another tenant's key answers exactly like an unknown one, so keys
		-- cannot be probed, checksums not guessed, and no tenant's request
		-- charged for another.
		SELECT p.* INTO v_stored
		  FROM payflow.payloads p JOIN payflow.operations o ON o.id = p.operation_id
		 WHERE p.key = submit_ref.key AND payflow._visible(o.tenant);
		IF NOT FOUND THEN
			RAISE EXCEPTION 'payload "%" does not exist', key USING ERRCODE = 'no_data_found';
		ELSIF v_stored.checksum <> checksum OR v_stored.size <> size THEN
			RAISE EXCEPTION 'checksum mismatch for payload "%"', key USING ERRCODE = 'PF005';
		END IF;
	END IF;
	RETURN payflow._create_operation(
		payment_id, coalesce(idempotency_key, payment_id), correlation_id,
		sha256(convert_to(payment_id || E'\n' || store || E'\n' || key || E'\n' || checksum, 'UTF8')),
		jsonb_build_object('store', store, 'key', key, 'checksum', checksum, 'size', size),
		NULL);
END
$$;

-- The status document of an operation of the current tenant (another
-- tenant's operation is reported like an unknown one: PF003; see _visible).
CREATE FUNCTION payflow.status(operation_id text) RETURNS jsonb
	LANGUAGE plpgsql STABLE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	v_doc jsonb;
BEGIN
	PERFORM payflow._require_operation_id(operation_id);
	SELECT jsonb_build_object(
			   'operationId', o.id,
			   'paymentId', o.payment_id,
			   'status', o.status,
			   'currentStep', o.current_step,
			   'attempts', coalesce(s.attempt, 0),
			   'nextAttemptAt', payflow._iso(s.next_attempt_at),
			   'error', coalesce(o.error, CASE WHEN s.status = 'RETRY_WAIT' THEN s.last_error END),
			   'result', o.result,
			   'correlationId', o.correlation_id,
			   'terminal', payflow._is_terminal(o.status),
			   'createdAt', payflow._iso(o.created_at),
			   'updatedAt', payflow._iso(o.updated_at),
			   'completedAt', payflow._iso(o.terminal_at))
	  INTO v_doc
	  FROM payflow.operations o
	  LEFT JOIN payflow.steps s ON s.operation_id = o.id AND s.step_name = o.current_step
	 WHERE o.id = status.operation_id AND payflow._visible(o.tenant);
	IF v_doc IS NULL THEN
		PERFORM payflow._unknown_operation(operation_id);
	END IF;
	RETURN v_doc;
END
$$;

-- The status transitions of an operation of the current tenant, oldest first.
CREATE FUNCTION payflow.history(operation_id text)
	RETURNS TABLE (at timestamptz, from_status text, to_status text, reason text, actor text)
	LANGUAGE plpgsql STABLE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
BEGIN
	PERFORM payflow._require_operation_id(operation_id);
	IF NOT EXISTS (SELECT FROM payflow.operations o
				    WHERE o.id = history.operation_id AND payflow._visible(o.tenant)) THEN
		PERFORM payflow._unknown_operation(operation_id);
	END IF;
	RETURN QUERY
		SELECT h.at, h.from_status, h.to_status, h.reason, h.actor
		  FROM payflow.operation_history h
		 WHERE h.operation_id = history.operation_id
		 ORDER BY h.id;
END
$$;

-- Cancels a PENDING operation of the current tenant.  False if it was already cancelled; PF006
-- if it ended otherwise; PF001 once a worker has started it.
CREATE FUNCTION payflow.cancel(operation_id text, reason text DEFAULT NULL) RETURNS boolean
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	o payflow.operations;
BEGIN
	PERFORM payflow._require_operation_id(operation_id);
	IF reason IS NOT NULL THEN
		PERFORM payflow._require_text('reason', reason, 500);
	END IF;
	o := payflow._lock_operation(operation_id);
	IF NOT payflow._visible(o.tenant) THEN
		PERFORM payflow._unknown_operation(operation_id);
	END IF;
	IF o.status = 'CANCELLED' THEN
		RETURN false;
	ELSIF payflow._is_terminal(o.status) THEN
		RAISE EXCEPTION 'operation "%" is already %', o.id, o.status USING ERRCODE = 'PF006';
	END IF;
	PERFORM payflow._set_status(o.id, o.status, 'CANCELLED', coalesce(reason, 'cancelled'), session_user);
	UPDATE payflow.operations
	   SET error = jsonb_strip_nulls(jsonb_build_object('code', 'cancelled', 'message', reason))
	 WHERE id = o.id;
	UPDATE payflow.steps
	   SET status = 'CANCELLED', pending_since = NULL, next_attempt_at = NULL, finished_at = now()
	 WHERE steps.operation_id = o.id AND status IN ('PENDING', 'RETRY_WAIT');
	RETURN true;
END
$$;

-- Checks an API key of the HTTP edge and binds its tenant to the current
-- transaction: submit, status, history, cancel and changes then act in that
-- tenant, and row-level security shows payflow_app only its rows.  An
-- autocommit caller puts both in one statement:
--   SELECT payflow.status($2) FROM payflow.authenticate($1);
-- Unknown, revoked or empty keys all get the same error (28000).
CREATE FUNCTION payflow.authenticate(api_key text) RETURNS text
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	v_tenant text;
BEGIN
	IF api_key IS NOT NULL AND octet_length(api_key) BETWEEN 1 AND 200 THEN
		SELECT k.tenant INTO v_tenant
		  FROM payflow.api_keys k
		 WHERE k.key_hash = sha256(convert_to(api_key, 'UTF8')) AND k.revoked_at IS NULL;
	END IF;
	IF v_tenant IS NULL THEN
		RAISE EXCEPTION 'invalid API key'
			USING ERRCODE = 'invalid_authorization_specification',
				  HINT = 'Use a key made by payflow.create_api_key() that was not revoked.';
	END IF;
	PERFORM payflow._set_tenant(v_tenant);
	RETURN v_tenant;
END
$$;

-- The status changes of the given operations of the current tenant after
-- history id after_id, for event streams (the HTTP edge's SSE).  Ids grow
-- in commit order within one operation (its row lock serialises them), not
-- across operations: callers keep a last-seen id per operation.
CREATE FUNCTION payflow.changes(operation_ids text[], after_id bigint DEFAULT 0)
	RETURNS TABLE (operation_id text, id bigint, at timestamptz, from_status text,
				   to_status text, reason text, terminal boolean)
	LANGUAGE plpgsql STABLE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
BEGIN
	IF operation_ids IS NULL THEN
		RAISE EXCEPTION 'operation_ids must not be null' USING ERRCODE = 'null_value_not_allowed';
	ELSIF cardinality(operation_ids) > 10000 THEN
		RAISE EXCEPTION 'at most 10000 operation ids per call'
			USING ERRCODE = 'program_limit_exceeded';
	END IF;
	RETURN QUERY
		SELECT h.operation_id, h.id, h.at, h.from_status, h.to_status, h.reason,
			   payflow._is_terminal(h.to_status)
		  FROM payflow.operations o
		  JOIN payflow.operation_history h ON h.operation_id = o.id
		 WHERE o.id = ANY (changes.operation_ids)
		   AND payflow._visible(o.tenant)
		   AND h.id > coalesce(changes.after_id, 0)
		 ORDER BY h.operation_id, h.id;
END
$$;

---------------------------------------------------------------------------
-- Public API: workers (payflow_worker)
---------------------------------------------------------------------------

-- claim_step's full logic, for every case the fast path (_claim_fast)
-- does not take: "run" (new step, due retry, expired lease), "skip" (done,
-- failed, terminal, retry not yet due) or "busy" (another worker's lease is
-- live, or the step is not ready yet); and the argument errors.
CREATE FUNCTION payflow._claim_step_full(operation_id text, step text, worker_id text,
										 lease_seconds integer)
	RETURNS jsonb
	LANGUAGE plpgsql VOLATILE
	AS $$
DECLARE
	d payflow.step_definitions;
	o payflow.operations;
	s payflow.steps;
	v_takeover boolean := false;
	v_max integer;
BEGIN
	PERFORM payflow._require_operation_id(operation_id);
	d := payflow._step_definition(step);
	PERFORM payflow._require_worker(worker_id, lease_seconds);

	o := payflow._lock_operation(operation_id);
	IF payflow._is_terminal(o.status) THEN
		RETURN jsonb_build_object('action', 'skip', 'reason', 'terminal', 'status', o.status);
	END IF;
	-- The operation runs on the version it started with.
	d := payflow._step_of(o.pipeline_version, d.step_name);
	IF d.step_name IS NULL THEN
		RETURN jsonb_build_object('action', 'skip', 'reason', 'not_in_pipeline',
								  'pipelineVersion', o.pipeline_version, 'status', o.status);
	END IF;
	s := payflow._lock_step(o.id, d.step_name);
	IF s.operation_id IS NULL THEN
		-- The event that creates this step has not been written yet.
		RETURN jsonb_build_object('action', 'busy', 'reason', 'not_ready', 'status', o.status);
	END IF;

	CASE s.status
		WHEN 'SUCCEEDED' THEN
			RETURN jsonb_build_object('action', 'skip', 'reason', 'done', 'status', o.status);
		WHEN 'FAILED', 'CANCELLED' THEN
			RETURN jsonb_build_object('action', 'skip', 'reason', lower(s.status), 'status', o.status);
		WHEN 'RETRY_WAIT' THEN
			IF s.next_attempt_at > now() THEN
				-- The scheduler re-emits the request when the retry is due.
				RETURN jsonb_build_object('action', 'skip', 'reason', 'retry_scheduled',
										  'nextAttemptAt', payflow._iso(s.next_attempt_at));
			END IF;
		WHEN 'RUNNING' THEN
			IF s.lease_expires_at > now() THEN
				RETURN jsonb_build_object('action', 'busy', 'reason', 'leased',
										  'leaseExpiresAt', payflow._iso(s.lease_expires_at));
			END IF;
			-- The holder died or stalled: take over, or give up at the limit.
			v_max := coalesce(d.max_attempts, payflow._setting('max_attempts')::integer);
			IF s.attempt >= v_max THEN
				PERFORM payflow._fail_operation(o, s,
					jsonb_build_object('code', 'lease_expired',
									   'message', format('lease expired on attempt %s of %s', s.attempt, v_max)),
					worker_id);
				RETURN jsonb_build_object('action', 'skip', 'reason', 'failed', 'status', 'FAILED');
			END IF;
			v_takeover := true;
		ELSE
			NULL;					-- PENDING
	END CASE;

	UPDATE payflow.steps
	   SET status = 'RUNNING', attempt = attempt + 1, lease_owner = worker_id,
		   lease_expires_at = now() + make_interval(secs => lease_seconds),
		   claimed_at = now(), pending_since = NULL, next_attempt_at = NULL
	 WHERE steps.operation_id = o.id AND step_name = d.step_name
	RETURNING * INTO s;

	IF o.status = d.ready_status AND d.running_status <> d.ready_status THEN
		PERFORM payflow._set_status(o.id, o.status, d.running_status, 'claimed', worker_id);
	END IF;

	RETURN jsonb_strip_nulls(jsonb_build_object(
		'action', 'run',
		'attempt', s.attempt,
		'idempotencyKey', o.id || ':' || lower(d.step_name),
		'input', s.input_ref,
		'leaseExpiresAt', payflow._iso(s.lease_expires_at),
		'takeover', v_takeover,
		'externalRef', s.external_ref,
		'paymentId', o.payment_id,
		'correlationId', o.correlation_id,
		'pipelineVersion', o.pipeline_version,
		'inputField', d.input_field,
		'resultName', d.result_name));
END
$$;

-- Renews a lease; false when this worker no longer holds it.  Touches one
-- unindexed column: a HOT update.
CREATE FUNCTION payflow.heartbeat(operation_id text, step text, worker_id text,
								  lease_seconds integer DEFAULT 300)
	RETURNS boolean
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
BEGIN
	PERFORM payflow._require_operation_id(operation_id);
	PERFORM payflow._require_text('step', step, 64);
	PERFORM payflow._require_worker(worker_id, lease_seconds);
	UPDATE payflow.steps
	   SET lease_expires_at = now() + make_interval(secs => lease_seconds)
	 WHERE steps.operation_id = heartbeat.operation_id AND step_name = step
	   AND status = 'RUNNING' AND lease_owner = worker_id;
	IF FOUND THEN
		RETURN true;
	END IF;
	IF NOT EXISTS (SELECT FROM payflow.operations o WHERE o.id = heartbeat.operation_id) THEN
		PERFORM payflow._unknown_operation(operation_id);
	END IF;
	PERFORM payflow._step_definition(step);		-- an unknown step is an error (22023)
	RETURN false;
END
$$;

-- Saves an external job reference with a running step (submit-poll mode),
-- so a worker that takes the step over resumes polling instead of
-- submitting again.
CREATE FUNCTION payflow.save_step_ref(operation_id text, step text, worker_id text, external_ref text)
	RETURNS boolean
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
BEGIN
	PERFORM payflow._require_operation_id(operation_id);
	PERFORM payflow._require_text('step', step, 64);
	PERFORM payflow._require_worker(worker_id, 1);
	PERFORM payflow._require_text('external_ref', external_ref, 1000);
	UPDATE payflow.steps s
	   SET external_ref = save_step_ref.external_ref
	 WHERE s.operation_id = save_step_ref.operation_id AND s.step_name = step
	   AND s.status = 'RUNNING' AND s.lease_owner = worker_id;
	IF NOT FOUND THEN
		IF NOT EXISTS (SELECT FROM payflow.operations o WHERE o.id = save_step_ref.operation_id) THEN
			PERFORM payflow._unknown_operation(operation_id);
		END IF;
		RAISE EXCEPTION 'worker "%" does not hold the lease of step %', worker_id, step
			USING ERRCODE = 'PF004', DETAIL = format('Operation %s.', operation_id);
	END IF;
	RETURN true;
END
$$;

-- Raises PF004 unless the worker is the one that ran the step.  A worker
-- whose lease expired may still report as long as nobody else claimed the
-- step since: its external call carried the step's idempotency key, so its
-- outcome is the outcome.
CREATE FUNCTION payflow._require_lease_holder(s payflow.steps, p_operation_id text,
											  p_step text, p_worker text)
	RETURNS void
	LANGUAGE plpgsql
	AS $$
BEGIN
	IF s.operation_id IS NULL OR s.lease_owner IS NULL THEN
		RAISE EXCEPTION 'worker "%" does not hold the lease of step %', p_worker, p_step
			USING ERRCODE = 'PF004',
				  DETAIL = format('Step %s of operation %s has not been claimed.', p_step, p_operation_id);
	ELSIF s.lease_owner <> p_worker THEN
		RAISE EXCEPTION 'worker "%" does not hold the lease of step %', p_worker, p_step
			USING ERRCODE = 'PF004',
				  DETAIL = format('Worker %s claimed step %s of operation %s after this worker''s lease expired.',
								  s.lease_owner, p_step, p_operation_id);
	END IF;
END
$$;

-- A reference a worker hands on as a step's result must name a payload of
-- that operation: its own pg payload with the checksum it claims, or an S3
-- key under payments/<id>/ (22023 otherwise, P0002/PF005 as payload_get).
CREATE FUNCTION payflow._require_own_ref(p_operation_id text, p_ref jsonb) RETURNS void
	LANGUAGE plpgsql STABLE
	AS $$
DECLARE
	p payflow.payloads;
BEGIN
	PERFORM payflow._require_text('result_ref.key', p_ref ->> 'key', 1024);
	PERFORM payflow._require_text('result_ref.checksum', p_ref ->> 'checksum', 71);
	IF p_ref ->> 'store' IS DISTINCT FROM 'pg' AND p_ref ->> 'store' IS DISTINCT FROM 's3' THEN
		RAISE EXCEPTION 'unknown payload store "%"', coalesce(p_ref ->> 'store', 'missing')
			USING ERRCODE = 'invalid_parameter_value', HINT = 'Use "pg" or "s3".';
	ELSIF NOT starts_with(p_ref ->> 'key', payflow._payload_key(p_operation_id, '')) THEN
		RAISE EXCEPTION 'result_ref must name a payload of operation %', p_operation_id
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = format('Its key is %s; keys of this operation start with payments/%s/.',
								  p_ref ->> 'key', p_operation_id);
	ELSIF p_ref ->> 'store' = 'pg' THEN
		SELECT * INTO p FROM payflow.payloads WHERE key = p_ref ->> 'key' AND operation_id = p_operation_id;
		IF NOT FOUND THEN
			RAISE EXCEPTION 'payload "%" does not exist', p_ref ->> 'key' USING ERRCODE = 'no_data_found';
		ELSIF p.checksum IS DISTINCT FROM p_ref ->> 'checksum' THEN
			RAISE EXCEPTION 'checksum mismatch for payload "%"', p.key USING ERRCODE = 'PF005';
		END IF;
	END IF;
END
$$;

-- complete_step's full logic, for every case the fast path
-- (_complete_fast) does not take (a repeated call, a result_ref, a late
-- report after the lease expired) and the argument errors.
CREATE FUNCTION payflow._complete_step_full(operation_id text, step text, worker_id text, result jsonb,
											result_ref jsonb)
	RETURNS jsonb
	LANGUAGE plpgsql VOLATILE
	AS $$
DECLARE
	d payflow.step_definitions;
	n payflow.step_definitions;
	o payflow.operations;
	s payflow.steps;
	v_ref jsonb := result_ref;
	v_event_id uuid;
	v_event_type text;
	v_answer jsonb;
BEGIN
	PERFORM payflow._require_operation_id(operation_id);
	d := payflow._step_definition(step);
	PERFORM payflow._require_worker(worker_id, 1);
	PERFORM payflow._require_object('result', result);
	PERFORM payflow._require_size('result', octet_length(result::text));
	IF v_ref IS NOT NULL THEN
		PERFORM payflow._require_object('result_ref', v_ref);
	END IF;

	o := payflow._lock_operation(operation_id);
	d := payflow._require_step_of(o, d.step_name);
	s := payflow._lock_step(o.id, d.step_name);
	IF s.status = 'SUCCEEDED' THEN
		RETURN s.completion;
	ELSIF payflow._is_terminal(o.status) THEN
		RAISE EXCEPTION 'operation "%" is already %', o.id, o.status
			USING ERRCODE = 'PF006',
				  HINT = 'A FAILED operation can be re-run with payflow.replay(); the step keeps its idempotency key.';
	END IF;
	PERFORM payflow._require_lease_holder(s, o.id, d.step_name, worker_id);
	IF v_ref IS NOT NULL THEN
		PERFORM payflow._require_own_ref(o.id, v_ref);
	END IF;

	IF v_ref IS NULL AND d.result_name IS NOT NULL THEN
		v_ref := payflow._payload_write(o.id, d.result_name, convert_to(result::text, 'UTF8'));
	END IF;

	PERFORM payflow._set_status(o.id, o.status, d.done_status, lower(d.step_name) || ' done', worker_id);

	n := payflow._next_step(o.pipeline_version, d.position);
	IF n.step_name IS NOT NULL THEN
		-- A step without a result payload hands its own input on.
		INSERT INTO payflow.steps (operation_id, step_name, input_ref, pending_since)
		VALUES (o.id, n.step_name, coalesce(v_ref, s.input_ref), now());
		UPDATE payflow.operations SET current_step = n.step_name WHERE id = o.id;
		v_event_type := n.request_event;
		v_event_id := payflow._emit(o.id, o.payment_id, o.correlation_id, n.request_event,
									n.destination, 1, jsonb_build_object(n.input_field, coalesce(v_ref, s.input_ref)));
	ELSE
		-- The last result travels inline in OperationCompleted; SQS takes
		-- 256 KiB per message, so it is held to a quarter of that.
		IF octet_length(result::text) > 65536 THEN
			RAISE EXCEPTION 'result of the last step is too large'
				USING ERRCODE = 'PF007',
					  DETAIL = format('It has %s bytes; the result of %s travels in the OperationCompleted event and may have 65536.',
									  octet_length(result::text), d.step_name),
					  HINT = 'Return a reference (an id or a URL) instead of the document.';
		END IF;
		UPDATE payflow.operations SET result = _complete_step_full.result WHERE id = o.id;
		SELECT p.completed_event INTO v_event_type FROM payflow.pipelines p WHERE p.version = o.pipeline_version;
		v_event_id := payflow._emit(o.id, o.payment_id, o.correlation_id, v_event_type,
									'operation-events', s.attempt,
									jsonb_build_object('status', d.done_status, 'result', result));
	END IF;

	v_answer := jsonb_build_object('action', 'completed', 'status', d.done_status,
								   'eventType', v_event_type, 'eventId', v_event_id);
	UPDATE payflow.steps
	   SET status = 'SUCCEEDED', result = _complete_step_full.result,
		   result_ref = v_ref,
		   completion = v_answer, finished_at = now(),
		   lease_expires_at = NULL, pending_since = NULL, next_attempt_at = NULL
	 WHERE steps.operation_id = o.id AND step_name = d.step_name;
	RETURN v_answer;
END
$$;

-- Records a step's failure: a retry scheduled with backoff while attempts
-- remain and the error is retryable, else the operation fails.
-- error is {"code":…, "message":…} and may carry "retryAfterSeconds"
-- (e.g. from an HTTP Retry-After) which lengthens the delay up to
-- retry_max_delay, and "outcomeUnknown": true when the attempt may have had
-- its effect (then the last attempt ends the operation as outcome_unknown).
CREATE FUNCTION payflow.fail_step(operation_id text, step text, worker_id text, error jsonb,
								  retryable boolean)
	RETURNS jsonb
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	d payflow.step_definitions;
	o payflow.operations;
	s payflow.steps;
	v_max integer;
	v_base interval;
	v_cap interval;
	v_delay interval;
	v_retry_after interval;
BEGIN
	PERFORM payflow._require_operation_id(operation_id);
	d := payflow._step_definition(step);
	PERFORM payflow._require_worker(worker_id, 1);
	PERFORM payflow._require_object('error', error);
	IF retryable IS NULL THEN
		RAISE EXCEPTION 'retryable must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	PERFORM payflow._require_size('error', octet_length(error::text));
	-- Card numbers never reach the step, the status document, history,
	-- dead letters or OperationFailed.
	error := payflow._mask_card_numbers(error);

	o := payflow._lock_operation(operation_id);
	d := payflow._require_step_of(o, d.step_name);
	s := payflow._lock_step(o.id, d.step_name);
	IF s.status = 'SUCCEEDED' THEN
		RETURN jsonb_build_object('action', 'skip', 'reason', 'done');
	ELSIF s.status = 'FAILED' THEN
		RETURN jsonb_build_object('action', 'failed');
	ELSIF payflow._is_terminal(o.status) THEN
		RAISE EXCEPTION 'operation "%" is already %', o.id, o.status USING ERRCODE = 'PF006';
	END IF;
	PERFORM payflow._require_lease_holder(s, o.id, d.step_name, worker_id);
	IF s.status = 'RETRY_WAIT' AND s.last_error = error THEN
		-- The same report again (a worker retrying its own call).
		RETURN jsonb_build_object('action', 'retry', 'attempt', s.attempt,
								  'nextAttemptAt', payflow._iso(s.next_attempt_at));
	END IF;

	v_max := coalesce(d.max_attempts, payflow._setting('max_attempts')::integer);
	IF retryable AND s.attempt < v_max THEN
		v_base := coalesce(d.retry_base_delay, payflow._seconds('retry_base_delay'));
		v_cap := coalesce(d.retry_max_delay, payflow._seconds('retry_max_delay'));
		v_delay := payflow.backoff_delay(greatest(s.attempt - 1, 0), v_base, v_cap,
										 payflow._setting('retry_jitter')::float8);
		IF jsonb_typeof(error -> 'retryAfterSeconds') = 'number' THEN
			-- compared as numeric: 1e400 is a JSON number but no float8
			v_retry_after := make_interval(secs => greatest(least((error ->> 'retryAfterSeconds')::numeric,
																  extract(epoch FROM v_cap)), 0)::float8);
			v_delay := greatest(v_delay, v_retry_after);
		END IF;
		UPDATE payflow.steps
		   SET status = 'RETRY_WAIT', next_attempt_at = now() + v_delay, last_error = error,
			   lease_expires_at = NULL
		 WHERE steps.operation_id = o.id AND step_name = d.step_name
		RETURNING * INTO s;
		UPDATE payflow.operations SET updated_at = now() WHERE id = o.id;
		RETURN jsonb_build_object('action', 'retry', 'attempt', s.attempt,
								  'nextAttemptAt', payflow._iso(s.next_attempt_at));
	END IF;

	IF retryable AND error -> 'outcomeUnknown' = 'true'::jsonb THEN
		-- The worker says this attempt may have had its effect (a call cut
		-- off after the DBMS got it, that no look-up cleared up): the last
		-- one must not end as a plain failure, or the client resubmits a
		-- payment that may be charged.
		error := jsonb_build_object(
			'code', 'outcome_unknown', 'class', 'outcome_unknown',
			'message', 'outcome unknown: the last attempt was cut off after the downstream system got it, '
					   'so it may have charged; do not resubmit it, reconcile it with the downstream system '
					   '(a dead letter holds it)',
			'cause', error - 'outcomeUnknown');
	END IF;
	PERFORM payflow._fail_operation(o, s,
		CASE WHEN retryable THEN error || jsonb_build_object('attemptsExhausted', true) ELSE error END,
		worker_id);
	RETURN jsonb_build_object('action', 'failed');
END
$$;

-- Claims a step for a worker: "run" (new step, due retry, expired lease),
-- "skip" (done, failed, terminal, retry not yet due) or "busy" (another
-- worker's lease is live, or the step is not ready yet).  The common case
-- is one statement (_claim_fast); the others take _claim_step_full.
CREATE FUNCTION payflow.claim_step(operation_id text, step text, worker_id text,
								   lease_seconds integer DEFAULT 300)
	RETURNS jsonb
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	v_answer jsonb;
BEGIN
	SELECT f.answer INTO v_answer FROM payflow._claim_fast(step, worker_id, ARRAY[operation_id], lease_seconds) f;
	IF FOUND THEN
		RETURN v_answer;
	END IF;
	RETURN payflow._claim_step_full(operation_id, step, worker_id, lease_seconds);
END
$$;

-- Records a step's success in one transaction: step done, status advanced,
-- result stored, the next event in the outbox.  A repeated call returns the
-- first call's answer.  The common case is one statement (_complete_fast).
CREATE FUNCTION payflow.complete_step(operation_id text, step text, worker_id text, result jsonb,
									  result_ref jsonb DEFAULT NULL)
	RETURNS jsonb
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	v_answer jsonb;
BEGIN
	IF result_ref IS NULL THEN
		SELECT f.answer INTO v_answer
		  FROM payflow._complete_fast(step, worker_id,
									  jsonb_build_array(jsonb_build_object('operationId', operation_id,
																		   'result', result))) f;
		IF FOUND THEN
			RETURN v_answer;
		END IF;
	END IF;
	RETURN payflow._complete_step_full(operation_id, step, worker_id, result, result_ref);
END
$$;

-- The lean step engine.  A worker that received several messages claims
-- their steps in one statement and completes them in one statement
-- (claim_steps, complete_steps, fail_steps); the single-item functions
-- above are the public contract and take the same paths.  Each batch
-- function has a fast path, one statement for every item in the common
-- case (a PENDING or due step of a running operation; a completion by the
-- lease holder), and hands every other item to the full single-item logic
-- (_claim_step_full, _complete_step_full, fail_step) one by one, each in a
-- subtransaction of its own so that one item's error is that item's answer
-- and never aborts the others.  The fast paths validate arguments inside
-- the statement: an item they do not take is answered by the full logic,
-- which raises the precise error.

-- The fast paths' plans are made once per session (a generic plan: a
-- statement of this size costs more to plan than to run) and pinned to
-- index probes and nested loops, whatever the statistics say of tables that
-- were empty when the plan was made (see outbox_claim).

-- The verified content of a "pg" input reference, else NULL.
CREATE FUNCTION payflow._inline_input(p_ref jsonb) RETURNS bytea
	LANGUAGE sql STABLE
	AS $$
	SELECT CASE WHEN payflow._checksum(p.content) = p_ref ->> 'checksum' THEN p.content END
	  FROM payflow.payloads p
	 WHERE p_ref ->> 'store' = 'pg' AND p.key = p_ref ->> 'key'
$$;

-- Fast claim of the steps of several operations.  Operations are locked in
-- id order (two batches never deadlock; single-item functions lock one
-- operation), SKIP LOCKED: a locked one goes to the full path, which waits.
-- Returns the claimed items: their position in operation_ids, the claim's
-- answer, and the input payload when it is a verified "pg" payload, so
-- that the worker needs no payload_get.
CREATE FUNCTION payflow._claim_fast(p_step text, p_worker_id text, p_operation_ids text[],
									p_lease_seconds integer)
	RETURNS TABLE (item integer, operation_id text, answer jsonb, input bytea)
	LANGUAGE plpgsql VOLATILE
	SET plan_cache_mode = force_generic_plan
	SET enable_seqscan = off
	-- a disabled node costs 1e10, which would JIT-compile every call (200 ms)
	SET jit = off
	SET enable_bitmapscan = off
	SET enable_hashjoin = off
	SET enable_mergejoin = off
	AS $$
BEGIN
	RETURN QUERY
	WITH i AS MATERIALIZED (
		SELECT x.id, min(x.n)::integer AS n
		  FROM unnest(p_operation_ids) WITH ORDINALITY AS x(id, n)
		 WHERE x.id IS NOT NULL
		 GROUP BY x.id
	), o AS MATERIALIZED (
		SELECT o.id, o.status, o.payment_id, o.correlation_id, o.pipeline_version
		  FROM payflow.operations o
		 WHERE o.id IN (SELECT i.id FROM i)
		   AND NOT payflow._is_terminal(o.status)
		 ORDER BY o.id
		   FOR UPDATE SKIP LOCKED
	), c AS (
		UPDATE payflow.steps s
		   SET status = 'RUNNING', attempt = s.attempt + 1, lease_owner = p_worker_id,
			   lease_expires_at = now() + make_interval(secs => p_lease_seconds),
			   claimed_at = now(), pending_since = NULL, next_attempt_at = NULL
		  FROM o, payflow.step_definitions d
		 WHERE s.operation_id = o.id AND s.step_name = p_step
		   AND d.pipeline_version = o.pipeline_version AND d.step_name = p_step
		   AND (s.status = 'PENDING' OR (s.status = 'RETRY_WAIT' AND s.next_attempt_at <= now()))
		   AND length(p_worker_id) BETWEEN 1 AND 200 AND p_lease_seconds BETWEEN 1 AND 86400
		RETURNING s.operation_id, s.attempt, s.input_ref, s.lease_expires_at, s.external_ref,
				  o.status, o.payment_id, o.correlation_id, o.pipeline_version,
				  d.ready_status, d.running_status, d.input_field, d.result_name
	), st AS (
		UPDATE payflow.operations op
		   SET status = c.running_status, updated_at = now()	-- checked by operations_transition
		  FROM c
		 WHERE op.id = c.operation_id AND c.status = c.ready_status AND c.running_status <> c.ready_status
		RETURNING op.id, c.status AS from_status, c.running_status AS to_status
	), h AS (
		INSERT INTO payflow.operation_history (operation_id, from_status, to_status, reason, actor)
		SELECT st.id, st.from_status, st.to_status, 'claimed', p_worker_id FROM st
		RETURNING payflow._status_changed()
	)
	SELECT i.n, c.operation_id,
		   jsonb_strip_nulls(jsonb_build_object(
			   'action', 'run',
			   'attempt', c.attempt,
			   'idempotencyKey', c.operation_id || ':' || lower(p_step),
			   'input', c.input_ref,
			   'leaseExpiresAt', payflow._iso(c.lease_expires_at),
			   'takeover', false,
			   'externalRef', c.external_ref,
			   'paymentId', c.payment_id,
			   'correlationId', c.correlation_id,
			   'pipelineVersion', c.pipeline_version,
			   'inputField', c.input_field,
			   'resultName', c.result_name)),
		   payflow._inline_input(c.input_ref)
	  FROM c
	  JOIN i ON i.id = c.operation_id;
	-- (data-modifying CTEs run to completion whether or not they are read)
END
$$;

-- claim_step for several operations at once (at most 100): one row per
-- item (item = its position in operation_ids; a repeated id is answered
-- again, as a second claim_step call would be: busy), with claim_step's
-- answer or, for that item alone, error = {"code": SQLSTATE, "message"}.
-- input carries the step's input payload when it is in the "pg" store.
CREATE FUNCTION payflow.claim_steps(step text, worker_id text, operation_ids text[],
									lease_seconds integer DEFAULT 300)
	RETURNS TABLE (item integer, operation_id text, answer jsonb, input bytea, error jsonb)
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	r record;
	v_done boolean[];
	v_n integer;
BEGIN
	PERFORM payflow._step_definition(step);
	PERFORM payflow._require_worker(worker_id, lease_seconds);
	PERFORM payflow._require_batch('operation_ids', cardinality(operation_ids));
	v_done := array_fill(false, ARRAY[cardinality(operation_ids)]);
	FOR r IN SELECT * FROM payflow._claim_fast(step, worker_id, operation_ids, lease_seconds) LOOP
		item := r.item; operation_id := r.operation_id; answer := r.answer; input := r.input; error := NULL;
		v_done[r.item] := true;
		RETURN NEXT;
	END LOOP;
	FOR v_n IN 1 .. cardinality(operation_ids) LOOP
		CONTINUE WHEN v_done[v_n];
		item := v_n; operation_id := operation_ids[v_n]; input := NULL; error := NULL;
		BEGIN
			answer := payflow._claim_step_full(operation_ids[v_n], step, worker_id, lease_seconds);
			IF answer ->> 'action' = 'run' THEN
				input := payflow._inline_input(answer -> 'input');
			END IF;
		EXCEPTION WHEN OTHERS THEN
			answer := NULL;
			error := jsonb_build_object('code', SQLSTATE, 'message', SQLERRM);
		END;
		RETURN NEXT;
	END LOOP;
END
$$;

-- At most 100 items per batch call (22023), not NULL (22004).
CREATE FUNCTION payflow._require_batch(arg_name text, n integer) RETURNS void
	LANGUAGE plpgsql IMMUTABLE
	AS $$
BEGIN
	IF n IS NULL THEN
		RAISE EXCEPTION '% must not be null or empty', arg_name USING ERRCODE = 'null_value_not_allowed';
	ELSIF n > 100 THEN
		RAISE EXCEPTION '% has % items; the limit is 100', arg_name, n USING ERRCODE = 'invalid_parameter_value';
	END IF;
END
$$;

-- Fast completion of steps by their lease holder: for each item
-- {"operationId", "result"} (no resultRef) whose step is RUNNING under
-- p_worker_id in a running operation, in one statement: the step done with
-- its answer, the result payload written (when the step has a result
-- name), the status advanced with its history row, the next step created
-- and its request event (or OperationCompleted) in the outbox.  Items it
-- does not take (another state, a resultRef, a result too large, a payload
-- key already written) are left to _complete_step_full.
CREATE FUNCTION payflow._complete_fast(p_step text, p_worker_id text, p_items jsonb)
	RETURNS TABLE (item integer, operation_id text, answer jsonb)
	LANGUAGE plpgsql VOLATILE
	SET plan_cache_mode = force_generic_plan
	SET enable_seqscan = off
	-- a disabled node costs 1e10, which would JIT-compile every call (200 ms)
	SET jit = off
	SET enable_bitmapscan = off
	SET enable_hashjoin = off
	SET enable_mergejoin = off
	AS $$
DECLARE
	d payflow.step_definitions;
	n payflow.step_definitions;
	v_max_bytes bigint := payflow._setting('payload_max_bytes')::bigint;
	v_last boolean;
	v_completed_event text;
BEGIN
	-- The step as the newest version that has it defines it; operations of
	-- older versions (in flight across a pipeline change) take the full path.
	SELECT * INTO d FROM payflow.step_definitions sd WHERE sd.step_name = p_step
	 ORDER BY sd.pipeline_version DESC LIMIT 1;
	IF NOT FOUND THEN
		RETURN;
	END IF;
	n := payflow._next_step(d.pipeline_version, d.position);
	v_last := n.step_name IS NULL;
	IF v_last THEN
		SELECT p.completed_event INTO v_completed_event FROM payflow.pipelines p WHERE p.version = d.pipeline_version;
	END IF;
	RETURN QUERY
	WITH i AS MATERIALIZED (
		SELECT DISTINCT ON (x.e ->> 'operationId')
			   x.n::integer AS n, x.e ->> 'operationId' AS id, x.e -> 'result' AS result,
			   convert_to((x.e -> 'result')::text, 'UTF8') AS content, gen_random_uuid() AS event_id
		  FROM jsonb_array_elements(p_items) WITH ORDINALITY AS x(e, n)
		 WHERE jsonb_typeof(x.e -> 'result') = 'object'
		   AND coalesce(x.e -> 'resultRef', 'null'::jsonb) = 'null'::jsonb
		 ORDER BY x.e ->> 'operationId', x.n
	), o AS MATERIALIZED (
		SELECT o.id, o.status, o.payment_id, o.correlation_id
		  FROM payflow.operations o
		 WHERE o.id IN (SELECT i.id FROM i) AND o.status = d.running_status
		   AND o.pipeline_version = d.pipeline_version
		 ORDER BY o.id
		   FOR UPDATE SKIP LOCKED
	), s AS (
		UPDATE payflow.steps s
		   SET status = 'SUCCEEDED', result = i.result,
			   result_ref = CASE WHEN d.result_name IS NOT NULL THEN
					jsonb_build_object('store', 'pg', 'key', payflow._payload_key(o.id, d.result_name),
									   'checksum', payflow._checksum(i.content), 'size', octet_length(i.content))
				END,
			   completion = jsonb_build_object('action', 'completed', 'status', d.done_status,
											   'eventType', coalesce(n.request_event, v_completed_event),
											   'eventId', i.event_id),
			   finished_at = now(), lease_expires_at = NULL, pending_since = NULL, next_attempt_at = NULL
		  FROM o JOIN i ON i.id = o.id
		 WHERE s.operation_id = o.id AND s.step_name = d.step_name
		   AND s.status = 'RUNNING' AND s.lease_owner = p_worker_id
		   AND octet_length(i.content) <= v_max_bytes
		   AND (NOT v_last OR octet_length(i.result::text) <= 65536)
		   AND (d.result_name IS NULL OR NOT EXISTS (
				SELECT FROM payflow.payloads p WHERE p.key = payflow._payload_key(o.id, d.result_name)))
		RETURNING s.operation_id, s.attempt, s.result, s.result_ref, s.input_ref, s.completion, i.n, i.content,
				  i.event_id, o.status, o.payment_id, o.correlation_id
	), p AS (
		INSERT INTO payflow.payloads (key, operation_id, checksum, size, content)
		SELECT s.result_ref ->> 'key', s.operation_id, s.result_ref ->> 'checksum', octet_length(s.content), s.content
		  FROM s WHERE s.result_ref IS NOT NULL
	), st AS (
		UPDATE payflow.operations op
		   SET status = d.done_status, updated_at = now(),	-- checked by operations_transition
			   current_step = coalesce(n.step_name, op.current_step),
			   result = CASE WHEN v_last THEN s.result ELSE op.result END,
			   terminal_at = CASE WHEN v_last THEN now() END
		  FROM s
		 WHERE op.id = s.operation_id
	), h AS (
		INSERT INTO payflow.operation_history (operation_id, from_status, to_status, reason, actor)
		SELECT s.operation_id, s.status, d.done_status, lower(d.step_name) || ' done', p_worker_id FROM s
		RETURNING payflow._status_changed()
	), ns AS (
		INSERT INTO payflow.steps (operation_id, step_name, input_ref, pending_since)
		SELECT s.operation_id, n.step_name, coalesce(s.result_ref, s.input_ref), now() FROM s WHERE NOT v_last
	), e AS MATERIALIZED (
		SELECT s.operation_id, s.event_id, s.payment_id, s.correlation_id,
			   coalesce(n.request_event, v_completed_event) AS event_type,
			   coalesce(n.destination, 'operation-events') AS destination,
			   payflow._event_body(s.event_id, s.operation_id, s.payment_id, s.correlation_id,
								   coalesce(n.request_event, v_completed_event),
								   CASE WHEN v_last THEN s.attempt ELSE 1 END,
								   CASE WHEN v_last THEN jsonb_build_object('status', d.done_status, 'result', s.result)
										ELSE jsonb_build_object(n.input_field, coalesce(s.result_ref, s.input_ref)) END) AS body
		  FROM s
	), ev AS (
		SELECT e.operation_id,
			   payflow._outbox_write(e.event_id, e.operation_id, e.payment_id, e.correlation_id, e.event_type,
									 e.destination, e.body) AS event_id
		  FROM e
	)
	-- ev is read here, so it runs
	SELECT s.n, s.operation_id, s.completion FROM s LEFT JOIN ev ON ev.operation_id = s.operation_id;
END
$$;

-- complete_step for several steps of one kind at once (at most 100):
-- items is a JSON array of {"operationId", "result", "resultRef"}; one row
-- per item with complete_step's answer or, for that item alone, an error.
CREATE FUNCTION payflow.complete_steps(step text, worker_id text, items jsonb)
	RETURNS TABLE (item integer, operation_id text, answer jsonb, error jsonb)
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	r record;
	v_done boolean[];
BEGIN
	PERFORM payflow._step_definition(step);
	PERFORM payflow._require_worker(worker_id, 1);
	PERFORM payflow._require_items(items);
	v_done := array_fill(false, ARRAY[jsonb_array_length(items)]);
	FOR r IN SELECT * FROM payflow._complete_fast(step, worker_id, items) LOOP
		item := r.item; operation_id := r.operation_id; answer := r.answer; error := NULL;
		v_done[r.item] := true;
		RETURN NEXT;
	END LOOP;
	RETURN QUERY SELECT * FROM payflow._outcomes_one_by_one(false, step, worker_id, items, v_done);
END
$$;

-- The items of complete_steps (p_fail false) or fail_steps (true) not in
-- p_done (NULL: none), one by one through the single-item logic, each in a
-- subtransaction: its answer, or its error for it alone.
CREATE FUNCTION payflow._outcomes_one_by_one(p_fail boolean, p_step text, p_worker_id text, p_items jsonb,
											 p_done boolean[])
	RETURNS TABLE (item integer, operation_id text, answer jsonb, error jsonb)
	LANGUAGE plpgsql VOLATILE
	AS $$
DECLARE
	v_e jsonb;
BEGIN
	FOR v_n IN 1 .. jsonb_array_length(p_items) LOOP
		CONTINUE WHEN coalesce(p_done[v_n], false);
		v_e := p_items -> (v_n - 1);
		item := v_n; operation_id := v_e ->> 'operationId'; error := NULL;
		BEGIN
			IF NOT p_fail THEN
				answer := payflow._complete_step_full(v_e ->> 'operationId', p_step, p_worker_id, v_e -> 'result',
													  nullif(v_e -> 'resultRef', 'null'::jsonb));
			ELSIF jsonb_typeof(v_e -> 'retryable') IS DISTINCT FROM 'boolean' THEN
				RAISE EXCEPTION 'retryable must be true or false' USING ERRCODE = 'invalid_parameter_value';
			ELSE
				answer := payflow.fail_step(v_e ->> 'operationId', p_step, p_worker_id, v_e -> 'error',
											(v_e ->> 'retryable')::boolean);
			END IF;
		EXCEPTION WHEN OTHERS THEN
			answer := NULL;
			error := jsonb_build_object('code', SQLSTATE, 'message', SQLERRM);
		END;
		RETURN NEXT;
	END LOOP;
END
$$;

-- A JSON array of 1 to 100 objects (22004, 22023).
CREATE FUNCTION payflow._require_items(items jsonb) RETURNS void
	LANGUAGE plpgsql IMMUTABLE
	AS $$
BEGIN
	IF items IS NULL THEN
		RAISE EXCEPTION 'items must not be null' USING ERRCODE = 'null_value_not_allowed';
	ELSIF jsonb_typeof(items) <> 'array' THEN
		RAISE EXCEPTION 'items must be a JSON array' USING ERRCODE = 'invalid_parameter_value',
			DETAIL = format('Got a JSON %s.', jsonb_typeof(items));
	ELSIF jsonb_array_length(items) > 100 THEN
		RAISE EXCEPTION 'items has % entries; the limit is 100', jsonb_array_length(items)
			USING ERRCODE = 'invalid_parameter_value';
	ELSIF EXISTS (SELECT FROM jsonb_array_elements(items) e WHERE jsonb_typeof(e) <> 'object') THEN
		RAISE EXCEPTION 'every item must be a JSON object' USING ERRCODE = 'invalid_parameter_value';
	END IF;
END
$$;

-- fail_step for several steps of one kind at once (at most 100): items is
-- a JSON array of {"operationId", "error", "retryable"}; one row per item
-- with fail_step's answer or, for that item alone, an error.  Failures are
-- the rare path: each item takes fail_step's own logic.
CREATE FUNCTION payflow.fail_steps(step text, worker_id text, items jsonb)
	RETURNS TABLE (item integer, operation_id text, answer jsonb, error jsonb)
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
BEGIN
	PERFORM payflow._step_definition(step);
	PERFORM payflow._require_worker(worker_id, 1);
	PERFORM payflow._require_items(items);
	RETURN QUERY SELECT * FROM payflow._outcomes_one_by_one(true, step, worker_id, items, NULL);
END
$$;

-- Reads a payload of the "pg" store, verifying its checksum (PF005).
CREATE FUNCTION payflow.payload_get(ref jsonb) RETURNS bytea
	LANGUAGE plpgsql STABLE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	p payflow.payloads;
BEGIN
	PERFORM payflow._require_object('ref', ref);
	IF ref ->> 'store' IS DISTINCT FROM 'pg' THEN
		RAISE EXCEPTION 'payload reference is not of the "pg" store'
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = format('Its store is %s.', coalesce(ref ->> 'store', 'missing'));
	END IF;
	PERFORM payflow._require_text('ref.key', ref ->> 'key', 1024);
	PERFORM payflow._require_text('ref.checksum', ref ->> 'checksum', 71);
	SELECT * INTO p FROM payflow.payloads WHERE key = ref ->> 'key';
	IF NOT FOUND THEN
		RAISE EXCEPTION 'payload "%" does not exist', ref ->> 'key'
			USING ERRCODE = 'no_data_found',
				  DETAIL = 'It may have been purged after its operation ended.';
	END IF;
	IF payflow._checksum(p.content) <> ref ->> 'checksum' THEN
		RAISE EXCEPTION 'checksum mismatch for payload "%"', p.key USING ERRCODE = 'PF005';
	END IF;
	RETURN p.content;
END
$$;

-- Writes a payload of the "pg" store for a step's result; returns its ref
-- (for complete_step's result_ref).  Only the worker holding the lease of
-- the running step may, and only under the step's result name: anyone else
-- could take the key first, and the step's completion would then fail
-- after the payment was made.
CREATE FUNCTION payflow.payload_put(operation_id text, name text, content bytea,
									step text DEFAULT NULL, worker_id text DEFAULT NULL)
	RETURNS jsonb
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	d payflow.step_definitions;
	o payflow.operations;
	s payflow.steps;
BEGIN
	PERFORM payflow._require_operation_id(operation_id);
	PERFORM payflow._require_text('name', name, 100);
	IF name !~ '^[A-Za-z0-9][A-Za-z0-9._-]*$' THEN
		RAISE EXCEPTION 'invalid payload name "%"', name
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = 'Names use letters, digits, ".", "_" and "-".';
	END IF;
	IF content IS NULL THEN
		RAISE EXCEPTION 'content must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	SELECT * INTO o FROM payflow.operations t WHERE t.id = payload_put.operation_id;
	IF NOT FOUND THEN
		PERFORM payflow._unknown_operation(operation_id);
	END IF;
	IF step IS NULL OR worker_id IS NULL THEN
		RAISE EXCEPTION 'only the lease holder of a running step may write a payload'
			USING ERRCODE = 'PF004', HINT = 'Pass the step and the worker_id that claimed it.';
	END IF;
	d := payflow._step_definition(step);
	d := payflow._require_step_of(o, d.step_name);
	PERFORM payflow._require_worker(worker_id, 1);
	SELECT * INTO s FROM payflow.steps t
	 WHERE t.operation_id = payload_put.operation_id AND t.step_name = d.step_name;
	IF s.status IS DISTINCT FROM 'RUNNING' OR s.lease_owner IS DISTINCT FROM worker_id THEN
		RAISE EXCEPTION 'worker "%" does not hold the lease of step %', worker_id, d.step_name
			USING ERRCODE = 'PF004', DETAIL = format('Operation %s.', operation_id);
	ELSIF name IS DISTINCT FROM d.result_name THEN
		RAISE EXCEPTION 'step % writes only its result payload', d.step_name
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = CASE WHEN d.result_name IS NULL THEN format('Step %s has no result payload.', d.step_name)
								ELSE format('Its name is %s.', d.result_name) END;
	END IF;
	RETURN payflow._payload_write(operation_id, name, content);
END
$$;

-- The post-processing hook that ships with payflow: the invoice input from
-- the request details and the payment result.  Fields are copied by name,
-- so nothing else in the details (a card number, say) ever reaches the
-- invoice API.  Hooks have this signature: (operation_id text,
-- payment_result jsonb) -> jsonb, the invoice input.
CREATE FUNCTION payflow.default_postprocess(operation_id text, payment_result jsonb) RETURNS jsonb
	LANGUAGE plpgsql STABLE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	o payflow.operations;
	v_details jsonb := '{}';
BEGIN
	PERFORM payflow._require_operation_id(operation_id);
	PERFORM payflow._require_object('payment_result', payment_result);
	SELECT * INTO o FROM payflow.operations WHERE id = default_postprocess.operation_id;
	IF NOT FOUND THEN
		PERFORM payflow._unknown_operation(operation_id);
	END IF;
	-- Details in S3 are not readable from here: the invoice input then
	-- carries the payment fields only.
	SELECT convert_from(p.content, 'UTF8')::jsonb INTO v_details
	  FROM payflow.payloads p
	 WHERE p.key = o.request_ref ->> 'key' AND o.request_ref ->> 'store' = 'pg';
	RETURN jsonb_strip_nulls(jsonb_build_object(
		'operationId', o.id,
		'paymentId', o.payment_id,
		'amount', v_details -> 'amount',
		'currency', v_details -> 'currency',
		'customer', v_details -> 'customer',
		'description', v_details -> 'description',
		'paymentReference', coalesce(payment_result -> 'charge_id', payment_result -> 'chargeId',
									 payment_result -> 'transactionId')));
END
$$;

-- Runs a post-processing hook with the caller's rights (SECURITY INVOKER:
-- a hook named by a worker's configuration must never run as the
-- extension's owner) and checks its signature and answer.  The worker calls
-- it inside complete_step's statement, so the hook runs in the same
-- transaction that completes POST_PROCESS and emits InvoiceRequested.
CREATE FUNCTION payflow.invoke_postprocess(hook regprocedure, operation_id text, payment_result jsonb)
	RETURNS jsonb
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	v_name text;
	v_answer jsonb;
BEGIN
	IF hook IS NULL THEN
		RAISE EXCEPTION 'hook must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	SELECT format('%I.%I', n.nspname, p.proname) INTO v_name
	  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
	 WHERE p.oid = hook AND p.proargtypes = '25 3802'::oidvector AND p.prorettype = 3802 AND p.prokind = 'f';
	IF v_name IS NULL THEN
		RAISE EXCEPTION 'post-processing hook % must take (text, jsonb) and return jsonb', hook
			USING ERRCODE = 'invalid_parameter_value';
	END IF;
	EXECUTE format('SELECT %s($1, $2)', v_name) INTO v_answer USING operation_id, payment_result;
	IF v_answer IS NULL OR jsonb_typeof(v_answer) <> 'object' THEN
		RAISE EXCEPTION 'post-processing hook % must return a JSON object', hook
			USING ERRCODE = 'invalid_parameter_value';
	END IF;
	RETURN v_answer;
END
$$;

-- Records that a consumer handled an event; false if it already had.
CREATE FUNCTION payflow.mark_consumed(consumer text, event_id uuid) RETURNS boolean
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
BEGIN
	PERFORM payflow._require_text('consumer', consumer, 200);
	IF event_id IS NULL THEN
		RAISE EXCEPTION 'event_id must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	INSERT INTO payflow.consumed_events (consumer, event_id)
	VALUES (mark_consumed.consumer, mark_consumed.event_id)
	ON CONFLICT DO NOTHING;
	RETURN FOUND;
END
$$;

-- Keeps a message no worker could handle (bad JSON, unknown version,
-- checksum mismatch…) for investigation; returns the dead letter's id.
CREATE FUNCTION payflow.record_dead_letter(queue text, message_body text, error jsonb,
										   operation_id text DEFAULT NULL)
	RETURNS bigint
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	v_id bigint;
BEGIN
	PERFORM payflow._require_text('queue', queue, 1000);
	PERFORM payflow._require_object('error', error);
	INSERT INTO payflow.dead_letters (source, queue, message_body, error, operation_id)
	VALUES ('message', queue, payflow._mask_card_numbers(left(message_body, 262144)),
			payflow._mask_card_numbers(error),
			CASE WHEN operation_id ~ '^pay_[0-9A-HJKMNP-TV-Z]{26}$' THEN operation_id END)
	RETURNING id INTO v_id;
	RETURN v_id;
END
$$;

-- Claims up to max_events outbox rows for a relay, oldest first, at most
-- one per message group: a later event of a group is never handed out
-- while an earlier one is unacked, so per-payment order holds even with
-- several relays.  A claim is a lease: rows of a relay that died come
-- back after lease_seconds.
--
-- The plan is pinned to index probes whatever the statistics say: after the
-- outbox drained and autovacuum truncated it, a plan made for an empty
-- table (sequential scans, an anti join) is quadratic in the backlog that
-- follows, and the relay's session keeps it until the next ANALYZE.  The
-- group-head check is a correlated subquery, which no plan can turn into a
-- join: for each candidate, one probe of outbox_group_idx.
CREATE FUNCTION payflow.outbox_claim(max_events integer, relay_id text, lease_seconds integer DEFAULT 30)
	RETURNS TABLE (event_id uuid, destination text, message_group_id text, dedup_id text,
				   body text, attributes jsonb)
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	SET enable_seqscan = off
	-- a disabled node costs 1e10, which would JIT-compile every call (200 ms)
	SET jit = off
	SET enable_bitmapscan = off
	AS $$
BEGIN
	PERFORM payflow._require_text('relay_id', relay_id, 200);
	-- Capped: one relay login must not be able to lease the whole outbox
	-- for a day.
	IF max_events IS NULL OR max_events < 1 OR max_events > 1000 THEN
		RAISE EXCEPTION 'max_events must be between 1 and 1000' USING ERRCODE = 'invalid_parameter_value';
	ELSIF lease_seconds IS NULL OR lease_seconds < 1 OR lease_seconds > 600 THEN
		RAISE EXCEPTION 'lease_seconds must be between 1 and 600' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	RETURN QUERY
		WITH candidates AS (
			SELECT c.ctid
			  FROM payflow.outbox c
			 WHERE c.available_at <= now()
			   AND (c.claim_expires_at IS NULL OR c.claim_expires_at <= now())
			   AND c.seq = (SELECT e.seq FROM payflow.outbox e
							 WHERE e.message_group_id = c.message_group_id
							 ORDER BY e.message_group_id, e.seq LIMIT 1)
			 ORDER BY c.seq
			 LIMIT max_events
			   FOR UPDATE SKIP LOCKED
		)
		UPDATE payflow.outbox u
		   SET claimed_by = relay_id,
			   claim_expires_at = now() + make_interval(secs => lease_seconds),
			   attempts = u.attempts + 1
		  FROM candidates
		 WHERE u.ctid = candidates.ctid
		RETURNING u.event_id, u.destination, u.message_group_id, u.event_id::text,
				  u.body::text, u.attributes;
END
$$;

-- Acknowledges published events: removes them from the outbox and logs
-- their message ids.  Only the relay holding an event's claim may: another
-- login could otherwise ack events that were never sent.  Returns how many
-- were acked (an event another relay claimed since is left to that one).
CREATE FUNCTION payflow.outbox_ack(event_ids uuid[], message_ids text[] DEFAULT NULL, relay_id text DEFAULT NULL)
	RETURNS integer
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	v_count integer;
BEGIN
	IF event_ids IS NULL THEN
		RAISE EXCEPTION 'event_ids must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	PERFORM payflow._require_text('relay_id', relay_id, 200);
	IF message_ids IS NOT NULL AND cardinality(message_ids) <> cardinality(event_ids) THEN
		RAISE EXCEPTION 'message_ids must have one entry per event id'
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = format('Got %s event ids and %s message ids.',
								  cardinality(event_ids), cardinality(message_ids));
	END IF;
	WITH acked AS (
		DELETE FROM payflow.outbox o
		 WHERE o.event_id = ANY (event_ids) AND o.claimed_by = outbox_ack.relay_id
		RETURNING o.event_id, o.operation_id, o.event_type, o.destination
	), ids AS (
		SELECT DISTINCT ON (m.event_id) m.event_id, m.message_id
		  FROM unnest(event_ids, coalesce(message_ids, '{}'::text[])) AS m(event_id, message_id)
		 ORDER BY m.event_id
	)
	INSERT INTO payflow.outbox_published (event_id, operation_id, event_type, destination, message_id)
	SELECT a.event_id, a.operation_id, a.event_type, a.destination, i.message_id
	  FROM acked a LEFT JOIN ids i ON i.event_id = a.event_id;
	GET DIAGNOSTICS v_count = ROW_COUNT;
	RETURN v_count;
END
$$;

-- Returns an event that failed to publish to the outbox, available again
-- after a backoff (1 s doubling to 5 min).  Events are never dropped: a
-- destination that keeps failing shows in metrics() as outbox age.
CREATE FUNCTION payflow.outbox_nack(event_id uuid, error text, relay_id text DEFAULT NULL) RETURNS boolean
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
BEGIN
	IF event_id IS NULL THEN
		RAISE EXCEPTION 'event_id must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	PERFORM payflow._require_text('relay_id', relay_id, 200);
	UPDATE payflow.outbox o
	   SET claimed_by = NULL, claim_expires_at = NULL,
		   available_at = now() + payflow.backoff_delay(least(greatest(o.attempts - 1, 0), 30),
														'1 second', '5 minutes', 0.2),
		   last_error = left(error, 2000)
	 WHERE o.event_id = outbox_nack.event_id AND o.claimed_by = outbox_nack.relay_id;
	RETURN FOUND;
END
$$;

-- PF008 unless payflow published this event of this operation to
-- operation-events with this body (compared as JSON, so formatting does
-- not matter).
CREATE FUNCTION payflow._require_published(p_event_id uuid, p_operation_id text, p_body text) RETURNS void
	LANGUAGE plpgsql STABLE
	AS $$
DECLARE
	v_body jsonb;
BEGIN
	BEGIN
		v_body := p_body::jsonb;
	EXCEPTION WHEN invalid_text_representation THEN
		v_body := NULL;
	END;
	IF v_body IS NULL OR NOT EXISTS (
			SELECT FROM payflow.operation_events e
			 WHERE e.event_id = p_event_id AND e.operation_id = p_operation_id
			   AND e.body_sha256 = sha256(convert_to(v_body::text, 'UTF8'))) THEN
		RAISE EXCEPTION 'event % of operation % was not published by payflow', p_event_id, p_operation_id
			USING ERRCODE = 'PF008',
				  DETAIL = 'No event with this id, operation and body went to operation-events.';
	END IF;
END
$$;

-- Where and how to deliver the webhook of an operation's tenant:
-- {"tenant","url","secret"}, or NULL when the tenant has no webhook.  Only
-- for an event payflow published to operation-events, with exactly that
-- body (compared as JSON): anything else is PF008, for the worker to dead-
-- letter instead of signing it.
CREATE FUNCTION payflow.webhook_target(operation_id text, event_id uuid DEFAULT NULL, body text DEFAULT NULL)
	RETURNS jsonb
	LANGUAGE plpgsql STABLE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	v_tenant text;
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
	RETURN (SELECT jsonb_build_object('tenant', w.tenant, 'url', w.url, 'secret', w.secret)
			  FROM payflow.webhooks w WHERE w.tenant = v_tenant);
END
$$;

-- Records a webhook delivery that failed its last attempt (the delivery's
-- dead letter).  Idempotent per event: a second failure of the same event
-- (after a replay) updates the row, which is open for replay again.
CREATE FUNCTION payflow.record_webhook_failure(event_id uuid, operation_id text, body text,
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

---------------------------------------------------------------------------
-- Public API: operations (payflow_admin)
---------------------------------------------------------------------------

-- Re-runs a FAILED operation from the step that failed, with a fresh
-- attempt budget and the same idempotency key.  False if not FAILED.
CREATE FUNCTION payflow.replay(operation_id text) RETURNS boolean
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	o payflow.operations;
	s payflow.steps;
	d payflow.step_definitions;
BEGIN
	PERFORM payflow._require_operation_id(operation_id);
	o := payflow._lock_operation(operation_id);
	IF o.status <> 'FAILED' THEN
		RETURN false;
	END IF;
	SELECT * INTO s FROM payflow.steps
	 WHERE steps.operation_id = o.id AND status = 'FAILED' FOR UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'operation "%" has no failed step to replay', o.id
			USING ERRCODE = 'PF001';
	END IF;
	d := payflow._step_of(o.pipeline_version, s.step_name);

	-- the one FAILED -> ready move operations_transition lets through
	PERFORM payflow._allow_replay(o.id);
	PERFORM payflow._set_status(o.id, 'FAILED', d.ready_status, 'replay', session_user);
	UPDATE payflow.operations
	   SET error = NULL, current_step = s.step_name, payloads_purged_at = NULL
	 WHERE id = o.id
	RETURNING * INTO o;
	UPDATE payflow.steps
	   SET status = 'PENDING', attempt = 0, pending_since = now(), finished_at = NULL,
		   next_attempt_at = NULL, lease_expires_at = NULL
	 WHERE steps.operation_id = o.id AND step_name = s.step_name
	RETURNING * INTO s;
	UPDATE payflow.dead_letters SET replayed_at = now()
	 WHERE dead_letters.operation_id = o.id AND replayed_at IS NULL;
	PERFORM payflow._emit_step_request(o, s);
	RETURN true;
END
$$;

-- Periodic work, run by the background worker (or pg_cron):
-- 1. expired leases: the step is retried (attempt + 1 at the next claim),
--    or the operation fails once max_attempts runs all died;
-- 2. due retries: the step's request event is emitted again;
-- 3. stuck steps, PENDING for payflow.stuck_after with no event of their
--    payment waiting in the outbox: the request event is emitted again.
--    This recovers operations whose message a queue lost.
-- Each part handles at most max_rows rows; rows locked by a worker are
-- skipped and seen next time.
CREATE FUNCTION payflow.run_scheduler(max_rows integer DEFAULT 1000) RETURNS jsonb
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	r record;
	o payflow.operations;
	s payflow.steps;
	d payflow.step_definitions;
	v_max integer;
	v_stuck_after interval := payflow._seconds('stuck_after');
	v_expired integer := 0;
	v_failed integer := 0;
	v_due integer := 0;
	v_stuck integer := 0;
BEGIN
	IF max_rows IS NULL THEN
		RAISE EXCEPTION 'max_rows must not be null' USING ERRCODE = 'null_value_not_allowed';
	ELSIF max_rows < 1 THEN
		RAISE EXCEPTION 'max_rows must be positive' USING ERRCODE = 'invalid_parameter_value';
	END IF;

	FOR r IN SELECT operation_id, step_name FROM payflow.steps
			  WHERE status = 'RUNNING' AND lease_expires_at < now()
			  ORDER BY claimed_at LIMIT max_rows
	LOOP
		SELECT * INTO o FROM payflow.operations WHERE id = r.operation_id FOR UPDATE SKIP LOCKED;
		CONTINUE WHEN NOT FOUND;
		s := payflow._lock_step(r.operation_id, r.step_name);
		CONTINUE WHEN s.status IS DISTINCT FROM 'RUNNING' OR s.lease_expires_at >= now();
		d := payflow._step_of(o.pipeline_version, s.step_name);
		v_max := coalesce(d.max_attempts, payflow._setting('max_attempts')::integer);
		IF s.attempt >= v_max THEN
			PERFORM payflow._fail_operation(o, s,
				jsonb_build_object('code', 'lease_expired',
								   'message', format('lease expired on attempt %s of %s', s.attempt, v_max)),
				'payflow scheduler');
			v_failed := v_failed + 1;
		ELSE
			-- lease_owner stays: the late worker may still report its outcome
			-- until another worker claims the step.
			UPDATE payflow.steps
			   SET status = 'RETRY_WAIT', next_attempt_at = now(), lease_expires_at = NULL,
				   last_error = jsonb_build_object('code', 'lease_expired',
												   'message', format('lease of %s expired', s.lease_owner))
			 WHERE operation_id = s.operation_id AND step_name = s.step_name;
			v_expired := v_expired + 1;
		END IF;
	END LOOP;

	FOR r IN SELECT operation_id, step_name FROM payflow.steps
			  WHERE status = 'RETRY_WAIT' AND next_attempt_at <= now()
			  ORDER BY next_attempt_at LIMIT max_rows
	LOOP
		SELECT * INTO o FROM payflow.operations WHERE id = r.operation_id FOR UPDATE SKIP LOCKED;
		CONTINUE WHEN NOT FOUND;
		s := payflow._lock_step(r.operation_id, r.step_name);
		CONTINUE WHEN s.status IS DISTINCT FROM 'RETRY_WAIT' OR s.next_attempt_at > now();
		UPDATE payflow.steps
		   SET status = 'PENDING', pending_since = now(), next_attempt_at = NULL
		 WHERE operation_id = s.operation_id AND step_name = s.step_name;
		PERFORM payflow._emit_step_request(o, s);
		v_due := v_due + 1;
	END LOOP;

	FOR r IN SELECT operation_id, step_name FROM payflow.steps
			  WHERE status = 'PENDING' AND pending_since < now() - v_stuck_after
			  ORDER BY pending_since LIMIT max_rows
	LOOP
		SELECT * INTO o FROM payflow.operations WHERE id = r.operation_id FOR UPDATE SKIP LOCKED;
		CONTINUE WHEN NOT FOUND;
		s := payflow._lock_step(r.operation_id, r.step_name);
		CONTINUE WHEN s.status IS DISTINCT FROM 'PENDING' OR s.pending_since >= now() - v_stuck_after;
		-- Re-armed either way, so the scan moves on to older rows next time.
		UPDATE payflow.steps SET pending_since = now()
		 WHERE operation_id = s.operation_id AND step_name = s.step_name;
		-- An event of this payment still in the outbox will be delivered;
		-- another copy would only be a duplicate.
		CONTINUE WHEN EXISTS (SELECT FROM payflow.outbox
							   WHERE message_group_id = payflow._message_group_id(o.payment_id));
		PERFORM payflow._emit_step_request(o, s);
		v_stuck := v_stuck + 1;
	END LOOP;

	PERFORM payflow._wake_listeners();
	RETURN jsonb_build_object('expiredLeases', v_expired,
							  'failedAfterLeaseExpiry', v_failed,
							  'retriesDue', v_due,
							  'stuckRedriven', v_stuck);
END
$$;

-- TTL clean-up in bounded batches (each kind at most max_rows rows per
-- call; "more" says whether to call again):
-- payloads of completed/cancelled operations after retention_payloads;
-- operations (with steps, history, payloads, dead letters) after
-- retention_completed, or retention_failed for FAILED ones; the published
-- log; old consumed-event ids; and pg_cron's run details of payflow's jobs,
-- which pg_cron never prunes itself.
CREATE FUNCTION payflow.purge(max_rows integer DEFAULT 10000) RETURNS jsonb
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	v_payloads integer;
	v_operations integer;
	v_published integer;
	v_consumed integer;
	v_dead integer;
	v_webhooks integer;
	v_cron integer := 0;
BEGIN
	IF max_rows IS NULL THEN
		RAISE EXCEPTION 'max_rows must not be null' USING ERRCODE = 'null_value_not_allowed';
	ELSIF max_rows < 1 THEN
		RAISE EXCEPTION 'max_rows must be positive' USING ERRCODE = 'invalid_parameter_value';
	END IF;

	WITH ops AS (
		SELECT id FROM payflow.operations
		 WHERE terminal_at IS NOT NULL AND payloads_purged_at IS NULL
		   AND terminal_at < now() - payflow._seconds('retention_payloads')
		   AND status IN ('COMPLETED', 'CANCELLED')
		 ORDER BY terminal_at LIMIT max_rows
		   FOR UPDATE SKIP LOCKED
	), marked AS (
		UPDATE payflow.operations o SET payloads_purged_at = now() FROM ops WHERE o.id = ops.id
	)
	DELETE FROM payflow.payloads p USING ops
	 WHERE p.key >= payflow._payload_key(ops.id, '') AND p.key < payflow._payload_keys_end(ops.id);
	GET DIAGNOSTICS v_payloads = ROW_COUNT;

	WITH ops AS (
		SELECT id FROM payflow.operations
		 WHERE terminal_at IS NOT NULL
		   AND terminal_at < now() - CASE WHEN status = 'FAILED'
										  THEN payflow._seconds('retention_failed')
										  ELSE payflow._seconds('retention_completed') END
		 ORDER BY terminal_at LIMIT max_rows
		   FOR UPDATE SKIP LOCKED
	), del_steps AS (
		DELETE FROM payflow.steps c USING ops WHERE c.operation_id = ops.id
	), del_history AS (
		DELETE FROM payflow.operation_history c USING ops WHERE c.operation_id = ops.id
	), del_payloads AS (
		-- "0" follows "/": the range holds exactly the keys under payments/<id>/
		DELETE FROM payflow.payloads c USING ops
		 WHERE c.key >= payflow._payload_key(ops.id, '') AND c.key < payflow._payload_keys_end(ops.id)
	), del_dead AS (
		DELETE FROM payflow.dead_letters c USING ops WHERE c.operation_id = ops.id
	), del_events AS (
		DELETE FROM payflow.operation_events c USING ops WHERE c.operation_id = ops.id
	)
	DELETE FROM payflow.operations o USING ops WHERE o.id = ops.id;
	GET DIAGNOSTICS v_operations = ROW_COUNT;

	DELETE FROM payflow.outbox_published
	 WHERE ctid = ANY (ARRAY(SELECT ctid FROM payflow.outbox_published
							  WHERE published_at < now() - payflow._seconds('retention_published')
							  LIMIT max_rows));
	GET DIAGNOSTICS v_published = ROW_COUNT;

	DELETE FROM payflow.consumed_events
	 WHERE ctid = ANY (ARRAY(SELECT ctid FROM payflow.consumed_events
							  WHERE consumed_at < now() - payflow._seconds('retention_consumed')
							  LIMIT max_rows));
	GET DIAGNOSTICS v_consumed = ROW_COUNT;

	-- Message dead letters have no operation; keep them as long as failures.
	DELETE FROM payflow.dead_letters
	 WHERE id = ANY (ARRAY(SELECT id FROM payflow.dead_letters
							WHERE created_at < now() - payflow._seconds('retention_failed')
							ORDER BY created_at LIMIT max_rows));
	GET DIAGNOSTICS v_dead = ROW_COUNT;

	-- Failed webhook deliveries: kept as long as failed operations, counted
	-- from their last failure.
	DELETE FROM payflow.webhook_failures
	 WHERE id = ANY (ARRAY(SELECT id FROM payflow.webhook_failures
							WHERE updated_at < now() - payflow._seconds('retention_failed')
							ORDER BY updated_at LIMIT max_rows));
	GET DIAGNOSTICS v_webhooks = ROW_COUNT;

	IF to_regclass('cron.job_run_details') IS NOT NULL THEN
		EXECUTE $sql$
			DELETE FROM cron.job_run_details
			 WHERE runid = ANY (ARRAY(
				SELECT d.runid FROM cron.job_run_details d JOIN cron.job j USING (jobid)
				 WHERE j.jobname LIKE 'payflow%' AND d.end_time < now() - $1
				 LIMIT $2))
		$sql$ USING payflow._seconds('retention_published'), max_rows;
		GET DIAGNOSTICS v_cron = ROW_COUNT;
	END IF;

	RETURN jsonb_build_object('payloads', v_payloads,
							  'operations', v_operations,
							  'publishedEvents', v_published,
							  'consumedEvents', v_consumed,
							  'deadLetters', v_dead,
							  'webhookFailures', v_webhooks,
							  'cronRunDetails', v_cron,
							  'more', greatest(v_payloads, v_operations, v_published,
											   v_consumed, v_dead, v_webhooks, v_cron) >= max_rows);
END
$$;

-- Registers (or replaces) a pg_cron job that runs in this database as the
-- caller; 0A000 with a hint when pg_cron is missing.  pg_cron lives in one
-- database (cron.database_name), so finding it here means this is that
-- database and cron.schedule, which non-superusers may call, is enough.
CREATE FUNCTION payflow._cron_schedule(job_name text, schedule text, command text) RETURNS bigint
	LANGUAGE plpgsql VOLATILE
	AS $$
DECLARE
	v_job bigint;
BEGIN
	IF to_regprocedure('cron.schedule_in_database(text,text,text,text,text,boolean)') IS NULL THEN
		RAISE EXCEPTION 'pg_cron is not installed'
			USING ERRCODE = 'feature_not_supported',
				  HINT = 'Add pg_cron to shared_preload_libraries, set cron.database_name, '
						 'and run CREATE EXTENSION pg_cron in that database (pg_cron 1.4 or later).';
	END IF;
	EXECUTE 'SELECT cron.schedule($1, $2, $3)' INTO v_job USING job_name, schedule, command;
	RETURN v_job;
END
$$;

-- Registers purge with pg_cron (job "payflow-purge", replaced if present).
-- SECURITY INVOKER: the job runs as the role that scheduled it, which must
-- be allowed to use pg_cron and to call payflow.purge().
CREATE FUNCTION payflow.schedule_purge(schedule text DEFAULT '*/5 * * * *') RETURNS bigint
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
BEGIN
	IF schedule IS NULL OR schedule = '' THEN
		RAISE EXCEPTION 'schedule must not be empty' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	RETURN payflow._cron_schedule('payflow-purge', schedule, 'SELECT payflow.purge()');
END
$$;

-- Runs the scheduler every payflow.scheduler_naptime for about "seconds",
-- one transaction per pass (so no snapshot outlives a pass and vacuum is
-- never held back), then returns.  What a pg_cron older than 1.5, which
-- cannot schedule in seconds, runs once a minute.  A procedure without SET
-- or SECURITY DEFINER, because only such a procedure may COMMIT; it runs
-- as its caller and names everything with its schema.
CREATE PROCEDURE payflow.run_scheduler_for(seconds integer DEFAULT 58)
	LANGUAGE plpgsql
	AS $$
DECLARE
	v_until timestamptz;
	v_naptime float8;
BEGIN
	IF seconds IS NULL OR seconds < 1 OR seconds > 3600 THEN
		RAISE EXCEPTION 'seconds must be between 1 and 3600' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	v_until := pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) pg_catalog.make_interval(secs => seconds);
	LOOP
		PERFORM payflow.run_scheduler();
		COMMIT;
		v_naptime := payflow._setting('scheduler_naptime')::float8 OPERATOR(pg_catalog./) 1000;
		EXIT WHEN pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) pg_catalog.make_interval(secs => v_naptime)
				  OPERATOR(pg_catalog.>) v_until;
		PERFORM pg_catalog.pg_sleep(v_naptime);
	END LOOP;
END
$$;

-- Registers the scheduler with pg_cron (job "payflow-scheduler", replaced
-- if present): every second with pg_cron 1.5 or later (Amazon RDS and
-- Aurora), else a job every minute that runs it each second for 58 s.
-- What the C-free flavour has instead of the scheduler background worker;
-- the C flavour needs it only when payflow is not preloaded.  SECURITY
-- INVOKER like schedule_purge: the job runs as the caller.
CREATE FUNCTION payflow.schedule_scheduler() RETURNS bigint
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	v_cron text := (SELECT extversion FROM pg_extension WHERE extname = 'pg_cron');
BEGIN
	IF string_to_array(split_part(v_cron, '-', 1), '.')::integer[] >= ARRAY[1, 5] THEN
		RETURN payflow._cron_schedule('payflow-scheduler', '1 second', 'SELECT payflow.run_scheduler()');
	END IF;
	RETURN payflow._cron_schedule('payflow-scheduler', '* * * * *', 'CALL payflow.run_scheduler_for(58)');
END
$$;

-- Creates an API key for the HTTP edge.  The secret is returned once and
-- only its sha256 is stored.
CREATE FUNCTION payflow.create_api_key(tenant text, name text DEFAULT NULL) RETURNS text
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	v_secret text := 'pfk_' || payflow._random_token(32);
BEGIN
	PERFORM payflow._require_text('tenant', tenant, 200);
	IF name IS NOT NULL THEN
		PERFORM payflow._require_text('name', name, 200);
	END IF;
	INSERT INTO payflow.api_keys (tenant, name, key_hash)
	VALUES (create_api_key.tenant, create_api_key.name, sha256(convert_to(v_secret, 'UTF8')));
	RETURN v_secret;
END
$$;

-- Revokes an API key: authenticate() refuses it from the next call on.
-- False when it was already revoked.
CREATE FUNCTION payflow.revoke_api_key(key_id bigint) RETURNS boolean
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
BEGIN
	IF key_id IS NULL THEN
		RAISE EXCEPTION 'key_id must not be null' USING ERRCODE = 'null_value_not_allowed';
	ELSIF NOT EXISTS (SELECT FROM payflow.api_keys k WHERE k.id = key_id) THEN
		RAISE EXCEPTION 'API key % does not exist', key_id USING ERRCODE = 'no_data_found';
	END IF;
	UPDATE payflow.api_keys k SET revoked_at = now() WHERE k.id = key_id AND k.revoked_at IS NULL;
	RETURN FOUND;
END
$$;

-- Registers (or replaces) a tenant's webhook URL and returns a new signing
-- secret, once.  Replacing rotates the secret.
CREATE FUNCTION payflow.set_webhook(tenant text, url text) RETURNS text
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
	INSERT INTO payflow.webhooks AS w (tenant, url, secret)
	VALUES (set_webhook.tenant, set_webhook.url, v_secret)
	ON CONFLICT ON CONSTRAINT webhooks_pkey DO UPDATE
		SET url = EXCLUDED.url, secret = EXCLUDED.secret, updated_at = now();
	RETURN v_secret;
END
$$;

-- Removes a tenant's webhook; false when it had none.
CREATE FUNCTION payflow.delete_webhook(tenant text) RETURNS boolean
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
CREATE FUNCTION payflow.replay_webhook(failure_id bigint) RETURNS boolean
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
								  f.body ->> 'correlationId', f.body ->> 'eventType', 'operation-events', f.body);
	UPDATE payflow.webhook_failures w SET replayed_at = now() WHERE w.id = f.id;
	RETURN true;
END
$$;

-- Health figures for dashboards and alarms.  Scraped often (the HTTP edge's
-- /metrics), so it never scans all retained operations: every operation not
-- yet terminal has exactly one step PENDING, RUNNING or RETRY_WAIT, found
-- through the steps' partial indexes; recent terminal operations and
-- finished steps come from the terminal_at and finished_at indexes.  Its
-- cost follows the work in flight and the last hour, not the retention.
CREATE FUNCTION payflow.metrics() RETURNS jsonb
	LANGUAGE sql STABLE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
	WITH active AS (
		SELECT s.operation_id, s.step_name, s.status AS step_status, o.status, o.updated_at
		  FROM payflow.steps s
		  JOIN payflow.operations o ON o.id = s.operation_id
		 -- ORed, not IN (...): each arm matches one partial index (BitmapOr)
		 WHERE s.status = 'PENDING' OR s.status = 'RUNNING' OR s.status = 'RETRY_WAIT'
	), recent AS (
		SELECT id, status FROM payflow.operations WHERE terminal_at > now() - interval '1 hour'
	), finished AS (
		SELECT s.step_name, s.status, extract(epoch FROM s.finished_at - s.claimed_at) AS run_seconds
		  FROM payflow.steps s
		 WHERE s.finished_at > now() - interval '1 hour'
	)
	SELECT jsonb_build_object(
		'operations', (
			SELECT coalesce(jsonb_object_agg(status, jsonb_build_object(
					   'count', n, 'oldestAgeSeconds', round(age::numeric, 3))), '{}'::jsonb)
			  FROM (SELECT status, count(*) AS n, extract(epoch FROM now() - min(updated_at)) AS age
					  FROM active GROUP BY status) a),
		'finishedLastHour', (
			SELECT coalesce(jsonb_object_agg(status, n), '{}'::jsonb)
			  FROM (SELECT status, count(*) AS n FROM recent GROUP BY status) r),
		'outbox', (
			SELECT jsonb_build_object(
					   'backlog', count(*),
					   'inFlight', count(*) FILTER (WHERE claim_expires_at > now()),
					   'failing', count(*) FILTER (WHERE last_error IS NOT NULL),
					   'oldestAgeSeconds', round(coalesce(extract(epoch FROM now() - min(created_at)), 0)::numeric, 3))
			  FROM payflow.outbox),
		'steps', (
			SELECT coalesce(jsonb_object_agg(d.step_name, jsonb_build_object(
					   'pending', coalesce(a.pending, 0), 'running', coalesce(a.running, 0),
					   'retryWaiting', coalesce(a.retry_waiting, 0),
					   'finishedLastHour', coalesce(f.finished, 0),
					   'runSecondsP50', round(f.p50::numeric, 3), 'runSecondsP95', round(f.p95::numeric, 3))), '{}'::jsonb)
			  FROM (SELECT DISTINCT sd.step_name FROM payflow.step_definitions sd) d
			  LEFT JOIN (SELECT step_name,
								count(*) FILTER (WHERE step_status = 'PENDING') AS pending,
								count(*) FILTER (WHERE step_status = 'RUNNING') AS running,
								count(*) FILTER (WHERE step_status = 'RETRY_WAIT') AS retry_waiting
						   FROM active GROUP BY step_name) a ON a.step_name = d.step_name
			  LEFT JOIN (SELECT step_name, count(*) AS finished,
								percentile_cont(0.5) WITHIN GROUP (ORDER BY run_seconds)
									FILTER (WHERE status = 'SUCCEEDED') AS p50,
								percentile_cont(0.95) WITHIN GROUP (ORDER BY run_seconds)
									FILTER (WHERE status = 'SUCCEEDED') AS p95
						   FROM finished GROUP BY step_name) f ON f.step_name = d.step_name),
		'failureRateLastHour', (
			SELECT round(coalesce(count(*) FILTER (WHERE status = 'FAILED')::numeric
								  / nullif(count(*) FILTER (WHERE status IN ('COMPLETED', 'FAILED')), 0), 0), 4)
			  FROM recent),
		'deadLetters', (
			SELECT jsonb_build_object(
					   'open', count(*) FILTER (WHERE replayed_at IS NULL),
					   'lastHour', count(*) FILTER (WHERE created_at > now() - interval '1 hour'))
			  FROM payflow.dead_letters),
		'webhookFailures', (
			SELECT jsonb_build_object(
					   'open', count(*) FILTER (WHERE replayed_at IS NULL),
					   'lastHour', count(*) FILTER (WHERE updated_at > now() - interval '1 hour'))
			  FROM payflow.webhook_failures))
$$;

---------------------------------------------------------------------------
-- Privileges
---------------------------------------------------------------------------

REVOKE ALL ON ALL TABLES IN SCHEMA payflow FROM PUBLIC;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA payflow FROM PUBLIC;
REVOKE ALL ON ALL PROCEDURES IN SCHEMA payflow FROM PUBLIC;
GRANT USAGE ON SCHEMA payflow TO payflow_app, payflow_worker, payflow_admin,
	payflow_relay, payflow_step_worker, payflow_postprocess_worker, payflow_webhook_worker;

GRANT EXECUTE ON FUNCTION
	payflow.submit(text, jsonb, text, text),
	payflow.submit_ref(text, text, text, text, bigint, text, text),
	payflow.status(text),
	payflow.history(text),
	payflow.cancel(text, text),
	payflow.authenticate(text),
	payflow.changes(text[], bigint),
	payflow._current_tenant()
	TO payflow_app;

-- Each kind of edge process gets only what it calls (its login is granted
-- one of these roles; deploy/sql/install.sql); payflow_worker holds them all.
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
	payflow.claim_steps(text, text, text[], integer),
	payflow.complete_steps(text, text, jsonb),
	payflow.fail_steps(text, text, jsonb),
	payflow.payload_get(jsonb),
	payflow.payload_put(text, text, bytea, text, text),
	payflow.mark_consumed(text, uuid),
	payflow.record_dead_letter(text, text, jsonb, text),
	payflow.backoff_delay(integer, interval, interval, float8)
	TO payflow_step_worker;
-- the post-processing role runs steps and hooks
GRANT payflow_step_worker TO payflow_postprocess_worker;
GRANT EXECUTE ON FUNCTION
	payflow.default_postprocess(text, jsonb),
	payflow.invoke_postprocess(regprocedure, text, jsonb)
	TO payflow_postprocess_worker;
-- the webhook role delivers; it runs no step
GRANT EXECUTE ON FUNCTION
	payflow.webhook_target(text, uuid, text),
	payflow.record_webhook_failure(uuid, text, text, integer, jsonb),
	payflow.mark_consumed(text, uuid),
	payflow.record_dead_letter(text, text, jsonb, text)
	TO payflow_webhook_worker;
GRANT payflow_relay, payflow_step_worker, payflow_postprocess_worker, payflow_webhook_worker TO payflow_worker;

-- The admin can do what the other two can, plus operations and reading
-- every table for investigation; only the retry columns of the pipeline
-- definition are writable.
GRANT payflow_app, payflow_worker TO payflow_admin;
GRANT EXECUTE ON FUNCTION
	payflow.replay(text),
	payflow.run_scheduler(integer),
	payflow.purge(integer),
	payflow.schedule_purge(text),
	payflow.schedule_scheduler(),
	payflow.create_api_key(text, text),
	payflow.revoke_api_key(bigint),
	payflow.set_webhook(text, text),
	payflow.delete_webhook(text),
	payflow.replay_webhook(bigint),
	payflow.metrics()
	TO payflow_admin;
GRANT EXECUTE ON PROCEDURE payflow.run_scheduler_for(integer) TO payflow_admin;
-- schedule_purge and schedule_scheduler run as their caller (so do their
-- jobs), and so does the helper they share.
GRANT EXECUTE ON FUNCTION payflow._cron_schedule(text, text, text) TO payflow_admin;
GRANT SELECT ON ALL TABLES IN SCHEMA payflow TO payflow_admin;
REVOKE SELECT ON payflow.api_keys FROM payflow_admin;
GRANT SELECT (id, tenant, name, created_at, revoked_at) ON payflow.api_keys TO payflow_admin;
REVOKE SELECT ON payflow.webhooks FROM payflow_admin;
GRANT SELECT (tenant, url, created_at, updated_at) ON payflow.webhooks TO payflow_admin;
GRANT UPDATE (max_attempts, retry_base_delay, retry_max_delay) ON payflow.step_definitions TO payflow_admin;

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
	USING (tenant = (SELECT payflow._current_tenant()));
CREATE POLICY history_of_tenant ON payflow.operation_history FOR SELECT TO payflow_app
	USING (EXISTS (SELECT FROM payflow.operations o WHERE o.id = operation_history.operation_id));
CREATE POLICY operations_for_admin ON payflow.operations FOR SELECT TO payflow_admin USING (true);
CREATE POLICY history_for_admin ON payflow.operation_history FOR SELECT TO payflow_admin USING (true);

--@@ include pipeline.sql @@

--@@ include admin.sql @@

--@@ flavour grants @@
