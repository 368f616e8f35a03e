-- payflow: the outbox's log (storage v2, 0.5.0; see the outbox in
-- tables.sql): the events as written, the durable position of the
-- relays, the batches SQS accepted and the published log derived from
-- them.  A file of its own, so that the update script takes the same
-- definitions.

CREATE TABLE payflow.outbox_events (
	seq bigint NOT NULL,
	event_id uuid NOT NULL,
	operation_id text COLLATE "C" NOT NULL,
	-- NULL for a rendered event (below): its step's definition names its
	-- type and destination, its payment its group (_outbox_event_route)
	event_type text,
	destination text,
	message_group_id text COLLATE "C",
	created_at timestamptz NOT NULL DEFAULT now(),
	-- enveloped: body lacks the envelope fields the columns above hold
	-- (eventType, eventVersion, eventId, operationId, createdAt), some 190
	-- bytes an event; _outbox_event_body puts them back.  False for a body
	-- whose envelope says something else (a replayed webhook event).
	enveloped boolean NOT NULL DEFAULT false,
	-- rendered: the body is not stored (NULL) but rendered from the
	-- operation's write-once rows (_rendered_event_body): the request of
	-- the step at this position (submit's, or a fast completion's of the
	-- step before), or 0 for the completed event of a fast completion.
	-- Their input references were each event's largest part, stored already
	-- in the operation's row and its steps' (256 of 393 bytes an event).
	-- (No CHECK that one of the two is set: a day's partition, made at run
	-- time, would have to carry it to be attached; the one writer,
	-- _outbox_write_all, sets one.)
	rendered smallint,
	body jsonb
) PARTITION BY RANGE (operation_id);
-- A partition a day, as the other rows of an operation (partitions.sql):
-- an operation's events go with its day's partition, not one by one.  The
-- indexes are the default partition's (copied to each day's), none on the
-- parent (tables.sql's history_events says why).  A seq is unique across
-- the partitions: each comes from payflow.outbox_seq_seq.
CREATE TABLE payflow.outbox_events_default PARTITION OF payflow.outbox_events DEFAULT;
-- Whether a log row is an operation's terminal event (to operation-events),
-- which stays as long as its operation for the webhook check (PF008) and
-- which purge's pass over published events leaves: a rendered one keeps no
-- destination, and 0 is its completed event (_outbox_event_route, below).
-- Inlined, in queries and in the predicate of the index by operation below
-- alike, so that the one implies the other.
CREATE OR REPLACE FUNCTION payflow._operation_event(p_destination text, p_rendered smallint) RETURNS boolean
	LANGUAGE sql IMMUTABLE
	AS $$ SELECT coalesce(p_destination = 'operation-events' OR p_rendered = 0, false) $$;
REVOKE ALL ON FUNCTION payflow._operation_event(text, smallint) FROM PUBLIC;

-- By seq, as block ranges: the log is appended in about seq order, and
-- only a rebuild (the events from outbox_position.done_below on), purge
-- (the default partition's published events; whether a day still holds
-- an unpublished one) and the view outbox_published look events up by
-- seq.  A B-tree key took an entry and 65 bytes of WAL an event (four an
-- operation); a range not summarized yet costs an insert nothing, and
-- autosummarize summarizes each once the next one starts.
CREATE INDEX outbox_events_default_seq_idx ON payflow.outbox_events_default USING brin (seq)
	WITH (pages_per_range = 32, autosummarize = on);
-- An operation's terminal events (operation-events: _operation_event), one
-- an operation, for the webhook check (_require_published) and for purge,
-- which deletes them with their operation.  Its other events (three of the
-- four a three-step operation writes) are found by the bloom filters
-- below: a B-tree entry for each took 99 bytes of WAL an event (index
-- record and page splits), 300 an operation, and only the console reads
-- them.
CREATE INDEX outbox_events_default_operation_idx ON payflow.outbox_events_default (operation_id)
	WHERE payflow._operation_event(destination, rendered);
-- Every event of an operation, for the console (admin_operation): a bloom
-- filter of the operation ids of each 32 pages.  Those hold some 2,400
-- events (74 a page), nearly each of another operation (an operation's
-- events are written seconds apart): a quarter of the 291 a page could
-- hold, which is what a negative n_distinct_per_range is a fraction of
-- (-1 made a filter larger than a page).  As with seq above, a range costs
-- an insert nothing until it is summarized; a lookup reads every range's
-- filter (some 3 KB each) and the few ranges that match (1 % false
-- positives: more where the rows are smaller).
CREATE INDEX outbox_events_default_operation_bloom ON payflow.outbox_events_default
	USING brin (operation_id text_bloom_ops (n_distinct_per_range = -0.25))
	WITH (pages_per_range = 32, autosummarize = on);

-- The durable copy of the cursor: every event below done_below was
-- published or dead-lettered.  Written at most once a second by a cursor
-- move; a rebuild of the outbox and purge start from it.  purged_below:
-- purge has deleted every row of the log's default partition below it but
-- the terminal events, which go with their operations, so that it never
-- reads those again (the day partitions go whole, partitions.sql).  One row,
-- made by the first move (not seeded: pg_dump keeps it, and a restore's
-- CREATE EXTENSION would collide with a seeded copy).
CREATE TABLE payflow.outbox_position (
	id boolean PRIMARY KEY DEFAULT true CHECK (id),
	done_below bigint NOT NULL DEFAULT 0,
	moved_at timestamptz NOT NULL DEFAULT clock_timestamp(),
	purged_below bigint NOT NULL DEFAULT 0
);

-- What SQS accepted: one row per ack (a relay acks what one or a few
-- SendMessageBatch calls accepted), the events' seqs and their SQS message
-- ids in the same order.  Append-only, a partition an hour, dropped by
-- purge once payflow.retention_published passed its end
-- (partitions.sql); the view outbox_published shows it an event a row, as
-- 0.4's table of that name was.
CREATE TABLE payflow.outbox_batches (
	published_at timestamptz NOT NULL DEFAULT now(),
	first_seq bigint NOT NULL,
	last_seq bigint NOT NULL,
	seqs bigint[] NOT NULL,
	message_ids text[] NOT NULL
) PARTITION BY RANGE (published_at);
CREATE TABLE payflow.outbox_batches_default PARTITION OF payflow.outbox_batches DEFAULT
	WITH (autovacuum_vacuum_insert_scale_factor = 0.05);
-- Batches are written in about seq and time order: block ranges suffice
-- for purge (published_at, in the default partition), a rebuild
-- (last_seq) and the console's lookup of an event's batch (both seqs), at
-- almost no cost per row.  Copied to each hour's partition.
CREATE INDEX outbox_batches_default_at_idx ON payflow.outbox_batches_default USING brin (published_at);
CREATE INDEX outbox_batches_default_seq_idx ON payflow.outbox_batches_default USING brin (first_seq, last_seq);

-- An event's type, destination and message group.  The log keeps them
-- only for the events it keeps a body of: a rendered event's (submit's,
-- submit_many's and a fast completion's requests, and the completed
-- event) follow from write-once rows, as its body does (outbox.sql's
-- _rendered_event_body): the step at its position of the operation's
-- pipeline version (its request event and queue), or the version's
-- completed event to operation-events, and the payment's group.  They
-- were some 50 bytes of each of an operation's four rows.  NULLs once
-- the operation is purged.
CREATE OR REPLACE FUNCTION payflow._outbox_event_route(e payflow.outbox_events, OUT event_type text,
													   OUT destination text, OUT message_group_id text)
	LANGUAGE plpgsql STABLE
	AS $$
BEGIN
	IF e.rendered IS NULL THEN
		event_type := e.event_type;
		destination := e.destination;
		message_group_id := e.message_group_id;
		RETURN;
	END IF;
	SELECT CASE WHEN e.rendered = 0 THEN p.completed_event ELSE d.request_event END,
		   CASE WHEN e.rendered = 0 THEN 'operation-events' ELSE d.destination END,
		   payflow._message_group_id(o.payment_id)
	  INTO event_type, destination, message_group_id
	  FROM payflow.operations o
	  JOIN payflow.pipelines p ON p.version = o.pipeline_version
	  LEFT JOIN payflow.step_definitions d ON d.pipeline_version = o.pipeline_version AND d.position = e.rendered
	 WHERE o.id = e.operation_id;
END
$$;
REVOKE ALL ON FUNCTION payflow._outbox_event_route(payflow.outbox_events) FROM PUBLIC;

-- The published events with their SQS message ids, a row each (0.4's
-- table of that name, now derived from the batches and the log).
CREATE VIEW payflow.outbox_published AS
SELECT e.event_id, e.operation_id, r.event_type, r.destination, p.message_id, b.published_at
  FROM payflow.outbox_batches b
 CROSS JOIN LATERAL unnest(b.seqs, b.message_ids) AS p(seq, message_id)
  JOIN payflow.outbox_events e ON e.seq = p.seq
 CROSS JOIN LATERAL payflow._outbox_event_route(e) r;

