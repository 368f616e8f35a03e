-- payflow: the transactional outbox.
--
-- Events are built (_event_body, attributes, message groups) and written
-- by one writer (_outbox_write_all) in the transaction that changes the
-- operation, to the log (outbox_events) and the relays' work list (outbox,
-- unlogged: see tables.sql); relays claim, ack and nack them (outbox_claim,
-- outbox_ack, outbox_nack), with acks accepted only from the relay holding
-- the claim.  (CREATE OR REPLACE: the update to 0.5.0 takes this file
-- whole.)

-- The message body of an event (DESIGN §2): envelope fields, then the
-- event's own fields (extra).  SQL functions without SET are inlined.
CREATE OR REPLACE FUNCTION payflow._event_body(p_event_id uuid, p_operation_id text, p_payment_id text,
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

-- SQS message attributes of an event (no NULLs: SQS rejects empty values),
-- with the operation's trace (trace_context.sql), which its workers
-- continue.  STABLE, as jsonb_build_object is: a SQL function declared
-- IMMUTABLE over a STABLE body is never inlined, and each call then starts
-- an executor of its own (13 us a call, four calls an operation, in the
-- step-engine bench).  The caller reads the traceparent: a sub-select here
-- would stop the inlining too (9 us a call).
CREATE OR REPLACE FUNCTION payflow._event_attributes(p_operation_id text, p_correlation_id text, p_event_type text,
													 p_traceparent text)
	RETURNS jsonb
	LANGUAGE sql STABLE
	AS $$
	SELECT jsonb_strip_nulls(jsonb_build_object('eventType', p_event_type,
												'operationId', p_operation_id,
												'correlationId', p_correlation_id,
												'traceparent', p_traceparent))
$$;

-- The envelope fields of an event's body that the log keeps as columns
-- (outbox_events.enveloped).  STABLE, as _iso is.
CREATE OR REPLACE FUNCTION payflow._event_envelope(p_event_id uuid, p_operation_id text, p_event_type text,
												   p_created_at timestamptz)
	RETURNS jsonb
	LANGUAGE sql STABLE
	AS $$
	SELECT jsonb_build_object('eventType', p_event_type, 'eventVersion', 1, 'eventId', p_event_id,
							  'operationId', p_operation_id, 'createdAt', payflow._iso(p_created_at))
$$;

-- The body of an event the log does not store (outbox_events.rendered),
-- as _event_body made it at the write: from its operation's row and its
-- steps' rows, which do not change once written (a step done stays done;
-- replay re-runs a FAILED operation's failed step, whose request is
-- stored, as every event of the full paths is).  NULL once the operation
-- is purged.  PL/pgSQL, whose plans are kept: the webhook check renders
-- an operation's completed event at each delivery.
CREATE OR REPLACE FUNCTION payflow._rendered_event_body(e payflow.outbox_events) RETURNS jsonb
	LANGUAGE plpgsql STABLE
	AS $$
DECLARE
	o payflow.operations;
	v_extra jsonb;
	v_attempt integer := 1;
BEGIN
	SELECT * INTO o FROM payflow.operations op WHERE op.id = e.operation_id;
	IF NOT FOUND THEN
		RETURN NULL;
	END IF;
	IF e.rendered = 0 THEN
		-- the completed event: the last step's done status and attempt, and
		-- the operation's result
		SELECT jsonb_build_object('status', d.done_status, 'result', o.result), sr.attempt
		  INTO v_extra, v_attempt
		  FROM payflow.step_definitions d
		  JOIN payflow.step_results sr ON sr.operation_id = o.id AND sr.step_name = d.step_name
		 WHERE d.pipeline_version = o.pipeline_version
		 ORDER BY d.position DESC LIMIT 1;
	ELSE
		-- a step's request: its input, as the steps before it left it
		SELECT jsonb_build_object(d.input_field,
								  payflow._step_input(o.id, o.pipeline_version, o.request_ref, o.request_mac,
													  o.request_size, e.rendered))
		  INTO v_extra
		  FROM payflow.step_definitions d
		 WHERE d.pipeline_version = o.pipeline_version AND d.position = e.rendered;
	END IF;
	-- its type, as the log would have kept it (outbox_log.sql)
	RETURN payflow._event_envelope(e.event_id, e.operation_id, (payflow._outbox_event_route(e)).event_type,
								   e.created_at)
		   || jsonb_build_object('paymentId', o.payment_id, 'attempt', v_attempt, 'correlationId', o.correlation_id)
		   || v_extra;
END
$$;

-- An event's body as it was written (jsonb: the same keys and values give
-- the same text, whatever the order they were put together in).
CREATE OR REPLACE FUNCTION payflow._outbox_event_body(e payflow.outbox_events) RETURNS jsonb
	LANGUAGE sql STABLE
	AS $$
	SELECT CASE WHEN e.rendered IS NOT NULL THEN payflow._rendered_event_body(e)
				WHEN e.enveloped
				THEN payflow._event_envelope(e.event_id, e.operation_id, e.event_type, e.created_at) || e.body
				ELSE e.body END
$$;

-- The message group of a payment's events: the payment id itself when SQS
-- FIFO accepts it as a MessageGroupId (at most 128 characters of letters,
-- digits and ASCII punctuation), else "sha256:" and its hash, which keeps
-- one group per payment.  STABLE, as convert_to is (see _event_attributes:
-- declared IMMUTABLE it was never inlined, 31 us a call).
CREATE OR REPLACE FUNCTION payflow._message_group_id(payment_id text) RETURNS text
	LANGUAGE sql STABLE PARALLEL SAFE
	AS $$
	SELECT CASE WHEN length(payment_id) <= 128 AND payment_id ~ '^[!-~]+$' THEN payment_id
				ELSE 'sha256:' || encode(sha256(convert_to(payment_id, 'UTF8')), 'hex') END
$$;
-- outbox_published (outbox_log.sql) calls these as its reader, the admin
GRANT EXECUTE ON FUNCTION payflow._outbox_event_route(payflow.outbox_events), payflow._message_group_id(text)
	TO payflow_admin;

-- The writer of the outbox as a function, for the statements that write
-- one event or a few on the rare paths (_emit: retries, failures, replays):
-- every event payflow publishes is written by the CTEs of
-- outbox_write_ctes.sql, which the hot statements (submit, submit_many, a
-- batch completion) hold themselves.  Event i is p_event_ids[i] of
-- operation p_operation_ids[i] and so on; its message group is its
-- payment's (p_group_keys: the payment ids).
-- p_rendered[i], when not NULL, says the log need not keep its body: the
-- caller made it as _rendered_event_body renders it (a request of the
-- step at that position, 0 the completed event).
-- The log's row of a terminal event (operation-events) is how the webhook
-- worker knows payflow published it (_require_published; 0.4 wrote a row
-- of operation_events as well).  Returns how many events were written.
CREATE OR REPLACE FUNCTION payflow._outbox_write_all(p_event_ids uuid[], p_operation_ids text[], p_group_keys text[],
										  p_event_types text[], p_destinations text[], p_bodies jsonb[],
										  p_rendered smallint[] DEFAULT NULL)
	RETURNS integer
	LANGUAGE plpgsql
	AS $$
DECLARE
	v_n integer;
BEGIN
	WITH outbox_in AS (
		SELECT e.event_id, e.operation_id, e.group_key, e.event_type, e.destination, e.body, e.rendered, e.n
		  FROM unnest(p_event_ids, p_operation_ids, p_group_keys, p_event_types, p_destinations, p_bodies,
					  coalesce(p_rendered, ARRAY[]::smallint[]))
			   WITH ORDINALITY AS e(event_id, operation_id, group_key, event_type, destination, body, rendered, n)
		 WHERE e.n <= cardinality(p_event_ids)
	),
	--@@ include outbox_write_ctes.sql @@
	SELECT count(*) INTO v_n FROM outbox_work;
	RETURN v_n;
END
$$;

-- One event through the writer; returns its id.
CREATE OR REPLACE FUNCTION payflow._outbox_write(p_event_id uuid, p_operation_id text, p_group_key text,
									  p_event_type text, p_destination text, p_body jsonb)
	RETURNS uuid
	LANGUAGE plpgsql
	AS $$
BEGIN
	PERFORM payflow._outbox_write_all(ARRAY[p_event_id], ARRAY[p_operation_id], ARRAY[p_group_key],
									  ARRAY[p_event_type], ARRAY[p_destination], ARRAY[p_body]);
	RETURN p_event_id;
END
$$;

-- Builds a new event and writes it (_outbox_write); returns its id.
CREATE OR REPLACE FUNCTION payflow._emit(p_operation_id text, p_payment_id text, p_correlation_id text,
							  p_event_type text, p_destination text, p_attempt integer,
							  p_extra jsonb)
	RETURNS uuid
	LANGUAGE plpgsql
	AS $$
DECLARE
	v_event_id uuid := gen_random_uuid();
BEGIN
	RETURN payflow._outbox_write(v_event_id, p_operation_id, p_payment_id, p_event_type, p_destination,
								 payflow._event_body(v_event_id, p_operation_id, p_payment_id, p_correlation_id,
													 p_event_type, p_attempt, p_extra));
END
$$;

-- Emits the event that asks a worker to run the operation's open step
-- (retry, re-drive or replay).
CREATE OR REPLACE FUNCTION payflow._emit_step_request(o payflow.operations)
	RETURNS uuid
	LANGUAGE plpgsql
	AS $$
DECLARE
	d payflow.step_definitions := payflow._step_of(o.pipeline_version, o.current_step);
BEGIN
	RETURN payflow._emit(o.id, o.payment_id, o.correlation_id, d.request_event, d.destination,
						 o.step_attempt + 1,
						 jsonb_build_object(d.input_field, payflow._step_input(o.id, o.pipeline_version, o.request_ref,
																				 o.request_mac, o.request_size)));
END
$$;

-- Builds the outbox (unlogged) again from its log after a crash or a
-- standby's promotion emptied it, and with it _outbox_cursor, whose
-- missing row is the sign.  The events to send are those from
-- outbox_position.done_below on that no outbox_batches row published and
-- no dead letter took (source 'event', its error's eventId).  Claims
-- acked since the last write of done_below are in the batches; claims not
-- acked are sent again (at-least-once).  One session rebuilds; the others
-- wait for it and find the row.  Returns the seq to claim from.
CREATE OR REPLACE FUNCTION payflow._outbox_rebuild() RETURNS bigint
	LANGUAGE plpgsql VOLATILE
	AS $$
DECLARE
	v_from bigint;
	v_n bigint;
BEGIN
	PERFORM pg_catalog.pg_advisory_xact_lock(hashtext('payflow._outbox_rebuild'));
	SELECT c.low_seq INTO v_from FROM payflow._outbox_cursor c;
	IF FOUND THEN
		RETURN v_from;
	END IF;
	SELECT p.done_below INTO v_from FROM payflow.outbox_position p;
	v_from := coalesce(v_from, 0);
	-- Anti joins, which PostgreSQL hashes (and spills to disk when large:
	-- an event stuck for hours holds done_below back, and every batch since
	-- is read), not NOT IN, whose subplan is rescanned per row once it
	-- outgrows work_mem.  The dead letters' event ids compared as text: a
	-- malformed one must not make every claim fail.
	WITH published AS MATERIALIZED (
		SELECT s.seq FROM payflow.outbox_batches b CROSS JOIN LATERAL unnest(b.seqs) AS s(seq)
		 WHERE b.last_seq >= v_from
	), refused AS MATERIALIZED (
		SELECT d.error ->> 'eventId' AS event_id FROM payflow.dead_letters d
		 WHERE d.source = 'event' AND d.error ? 'eventId'
	)
	INSERT INTO payflow.outbox (event_id, seq, operation_id, event_type, destination, message_group_id, body, created_at)
	SELECT e.event_id, e.seq, e.operation_id, r.event_type, r.destination, r.message_group_id,
		   b.body, e.created_at
	  FROM payflow.outbox_events e
	  -- (no body: a rendered event whose operation was purged meanwhile,
	  -- relays down past its retention; nobody is left to tell)
	 CROSS JOIN LATERAL (SELECT payflow._outbox_event_body(e) AS body) b
	 CROSS JOIN LATERAL payflow._outbox_event_route(e) r
	 WHERE e.seq >= v_from AND b.body IS NOT NULL
	   AND NOT EXISTS (SELECT FROM published p WHERE p.seq = e.seq)
	   AND NOT EXISTS (SELECT FROM refused r WHERE r.event_id = e.event_id::text)
	 ORDER BY e.seq
	ON CONFLICT (event_id) DO NOTHING;
	GET DIAGNOSTICS v_n = ROW_COUNT;
	INSERT INTO payflow._outbox_cursor (low_seq) VALUES (v_from) ON CONFLICT DO NOTHING;
	IF v_n > 0 THEN
		RAISE LOG 'payflow: outbox rebuilt from its log after a restart: % events to send from seq %', v_n, v_from;
		PERFORM payflow._outbox_written();
	END IF;
	RETURN v_from;
END
$$;

-- Moves payflow._outbox_cursor (see tables.sql for why it is safe) and
-- returns the low_seq to claim from.  One session at a time: another one
-- that finds the row locked claims from the low_seq it read.
CREATE OR REPLACE FUNCTION payflow._outbox_cursor_move() RETURNS bigint
	LANGUAGE plpgsql VOLATILE
	AS $$
DECLARE
	k record;
	v_end bigint;
	v_low bigint;
BEGIN
	SELECT c.low_seq, c.pending_end, c.reset_at, c.moved_by, c.xmin AS written_by INTO k
	  FROM payflow._outbox_cursor c FOR UPDATE SKIP LOCKED;
	IF NOT FOUND THEN
		-- Another session is moving it, or a crash emptied the table (and
		-- the outbox with it).
		SELECT c.low_seq INTO v_low FROM payflow._outbox_cursor c;
		IF NOT FOUND THEN
			RETURN payflow._outbox_rebuild();
		END IF;
		RETURN v_low;
	END IF;
	v_low := k.low_seq;
	-- the sequence's next value, before the snapshots of the statements below
	SELECT CASE WHEN s.is_called THEN s.last_value + 1 ELSE s.last_value END INTO v_end
	  FROM payflow.outbox_seq_seq s;
	IF v_low > v_end OR k.reset_at < clock_timestamp() - interval '1 minute' THEN
		v_low := 0;
		k.reset_at := clock_timestamp();
	ELSIF k.pending_end IS NOT NULL AND k.moved_by IS DISTINCT FROM pg_catalog.pg_current_xact_id() THEN
		-- (a move earlier in this transaction has not ended: the next one
		-- will look)
		-- One statement, one snapshot: the horizon check and the rows it
		-- sees.  The xid that wrote this version of the row, as an xid8: the
		-- snapshot's xmax is newer (that transaction has ended: its row lock
		-- is ours), and the distance is under 2^32 (else the result is newer
		-- than the truth, which only delays the move).  Not this
		-- transaction's xid: it may be older than that one.
		SELECT CASE WHEN x.horizon > x.xmax - (x.xmax % 4294967296 - k.written_by::text::numeric + 4294967296) % 4294967296
					THEN LEAST(k.pending_end,
							   (SELECT o.seq FROM payflow.outbox o
								 WHERE o.seq > 0 AND o.seq >= k.low_seq	-- outbox_seq_idx
								 ORDER BY o.seq LIMIT 1))
					ELSE k.low_seq END
		  INTO v_low
		  FROM (SELECT pg_catalog.pg_snapshot_xmin(s.s)::text::numeric AS horizon,
					   pg_catalog.pg_snapshot_xmax(s.s)::text::numeric AS xmax
				  FROM (SELECT pg_catalog.pg_current_snapshot() AS s) s) x;
		v_low := GREATEST(k.low_seq, v_low);
	END IF;
	-- Written in a subtransaction, whose first write takes a new xid: newer
	-- than the xid of every transaction that drew a seq below v_end, and it
	-- is the row version's xmin, which the next move reads back.  (Not the
	-- snapshot's xmax: that is the newest ended xid + 1, and a running writer
	-- can hold a newer one.  Nor this transaction's xid, which it may have
	-- taken before such a writer took its own.)
	BEGIN
		UPDATE payflow._outbox_cursor c
		   SET low_seq = v_low, pending_end = v_end, moved_at = clock_timestamp(), reset_at = k.reset_at,
			   moved_by = pg_catalog.pg_current_xact_id();
	EXCEPTION WHEN OTHERS THEN
		RAISE;
	END;
	-- The durable copy, at most once a second: one small WAL record, where
	-- a rebuild and purge start from.  Every row below low_seq has left the
	-- outbox, acked (an outbox_batches row) or dead-lettered.
	UPDATE payflow.outbox_position p
	   SET done_below = v_low, moved_at = clock_timestamp()
	 WHERE p.done_below < v_low AND p.moved_at < clock_timestamp() - interval '1 second';
	IF NOT FOUND AND NOT EXISTS (SELECT FROM payflow.outbox_position) THEN
		INSERT INTO payflow.outbox_position (done_below) VALUES (v_low) ON CONFLICT DO NOTHING;
	END IF;
	RETURN v_low;
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
-- table is quadratic in the backlog that follows, and the relay's session
-- keeps it until the next ANALYZE.  0.3.0's plan became sequential scans
-- and an anti join; 0.4.0's early plan kept the index scans but answered
-- the group-head probe from outbox_seq_idx (one walk from the start per
-- candidate: 0.65x of a normal round in the step-engine bench).  So:
--  - the scan names outbox_seq_idx's predicate (seq > 0), which only it
--    states: that index is the only one the scan can use, and no other
--    query, the group-head probe included, can use it;
--  - the group-head check is a correlated subquery, which no plan can turn
--    into a join: for each candidate, one probe of outbox_group_idx;
--  - sequential scans, bitmap scans and sorts are disabled, so that no
--    other index plus a sort can stand in for the ordered scan.
-- The scan starts where the live rows begin (payflow._outbox_cursor), not
-- at the acked rows VACUUM has not removed yet.
CREATE OR REPLACE FUNCTION payflow.outbox_claim(max_events integer, relay_id text, lease_seconds integer DEFAULT 30)
	RETURNS TABLE (event_id uuid, destination text, message_group_id text, dedup_id text,
				   body text, attributes jsonb)
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	SET enable_seqscan = off
	-- a disabled node costs 1e10, which would JIT-compile every call (200 ms)
	SET jit = off
	SET enable_bitmapscan = off
	SET enable_sort = off
	AS $$
DECLARE
	v_low bigint;
	v_moved_at timestamptz;
BEGIN
	-- (the helper, a statement of its own, only for a bad id: each relay
	-- statement calls this and outbox_ack, and a statement costs some 10 us)
	IF relay_id IS NULL OR relay_id = '' OR length(relay_id) > 200 THEN
		PERFORM payflow._require_text('relay_id', relay_id, 200);
	END IF;
	-- Capped: one relay login must not be able to lease the whole outbox
	-- for a day.
	IF max_events IS NULL OR max_events < 1 OR max_events > 1000 THEN
		RAISE EXCEPTION 'max_events must be between 1 and 1000' USING ERRCODE = 'invalid_parameter_value';
	ELSIF lease_seconds IS NULL OR lease_seconds < 1 OR lease_seconds > 600 THEN
		RAISE EXCEPTION 'lease_seconds must be between 1 and 600' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	SELECT k.low_seq, k.moved_at INTO v_low, v_moved_at FROM payflow._outbox_cursor k;
	IF v_moved_at IS NULL OR v_moved_at < clock_timestamp() - interval '100 milliseconds' THEN
		v_low := payflow._outbox_cursor_move();
	END IF;
	RETURN QUERY
		WITH candidates AS (
			SELECT c.ctid
			  FROM payflow.outbox c
			 WHERE c.seq > 0	-- outbox_seq_idx's predicate: see above
			   AND c.seq >= v_low
			   AND c.available_at <= now()
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
				  u.body::text,
				  -- the attributes follow the body, so they can never tell another story
				  payflow._event_attributes(u.operation_id, u.body ->> 'correlationId', u.event_type,
											payflow._traceparent_text((SELECT o.traceparent FROM payflow.operations o
																	   WHERE o.id = u.operation_id)));
END
$$;

-- Acknowledges published events: removes them from the outbox and records
-- them, with their SQS message ids, as one outbox_batches row.  Only the
-- relay holding an event's claim may: another login could otherwise ack
-- events that were never sent.  Returns how many were acked (an event
-- another relay claimed since is left to that one).
CREATE OR REPLACE FUNCTION payflow.outbox_ack(event_ids uuid[], message_ids text[] DEFAULT NULL, relay_id text DEFAULT NULL)
	RETURNS integer
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	-- One plan per session: left to choose, PostgreSQL planned the delete
	-- again in 1,233 of 2,083 calls of the pipeline bench (0.31 ms each):
	-- for the few ids of an ack a custom plan looks cheaper than the
	-- generic one, every time.  The outbox is read by its key whatever
	-- the statistics say (a generic plan made while the outbox looked
	-- empty is kept).
	SET plan_cache_mode = force_generic_plan
	SET enable_seqscan = off
	-- a disabled node costs 1e10, which would JIT-compile every call
	SET jit = off
	AS $$
DECLARE
	v_count integer;
BEGIN
	IF event_ids IS NULL THEN
		RAISE EXCEPTION 'event_ids must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	IF relay_id IS NULL OR relay_id = '' OR length(relay_id) > 200 THEN	-- (as outbox_claim)
		PERFORM payflow._require_text('relay_id', relay_id, 200);
	END IF;
	IF message_ids IS NOT NULL AND cardinality(message_ids) <> cardinality(event_ids) THEN
		RAISE EXCEPTION 'message_ids must have one entry per event id'
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = format('Got %s event ids and %s message ids.',
								  cardinality(event_ids), cardinality(message_ids));
	END IF;
	WITH acked AS (
		DELETE FROM payflow.outbox o
		 WHERE o.event_id = ANY (event_ids) AND o.claimed_by = outbox_ack.relay_id
		RETURNING o.event_id, o.seq
	), ids AS (
		SELECT DISTINCT ON (m.event_id) m.event_id, m.message_id
		  FROM unnest(event_ids, coalesce(message_ids, '{}'::text[])) AS m(event_id, message_id)
		 ORDER BY m.event_id
	)
	INSERT INTO payflow.outbox_batches (first_seq, last_seq, seqs, message_ids)
	SELECT min(a.seq), max(a.seq), array_agg(a.seq ORDER BY a.seq), array_agg(i.message_id ORDER BY a.seq)
	  FROM acked a LEFT JOIN ids i ON i.event_id = a.event_id
	HAVING count(*) > 0
	RETURNING cardinality(seqs) INTO v_count;
	RETURN coalesce(v_count, 0);
END
$$;

-- Returns an event that failed to publish to the outbox, available again
-- after a backoff (1 s doubling to 5 min).  Events are never dropped: a
-- destination that keeps failing shows in metrics() as outbox age.
CREATE OR REPLACE FUNCTION payflow.outbox_nack(event_id uuid, error text, relay_id text DEFAULT NULL) RETURNS boolean
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
-- not matter): a row of the log (kept as long as its operation, see
-- purge and partitions.sql; its callers check the operation is there; the
-- body's eventId, which a webhook replay sends again under a new event
-- id), or of operation_events for an event published before 0.5.0.
CREATE OR REPLACE FUNCTION payflow._require_published(p_event_id uuid, p_operation_id text, p_body text) RETURNS void
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
	-- the body names the event: a log row with that body is that event
	IF v_body IS NULL OR v_body ->> 'eventId' IS DISTINCT FROM p_event_id::text OR NOT (
		EXISTS (SELECT FROM payflow.outbox_events e		-- by operation: one partition's index
				 WHERE e.operation_id = p_operation_id
				   AND payflow._operation_event(e.destination, e.rendered)
				   AND payflow._outbox_event_body(e) = v_body)
		OR EXISTS (SELECT FROM payflow.operation_events e
					WHERE e.event_id = p_event_id AND e.operation_id = p_operation_id
					  AND e.body_sha256 = sha256(convert_to(v_body::text, 'UTF8')))) THEN
		RAISE EXCEPTION 'event % of operation % was not published by payflow', p_event_id, p_operation_id
			USING ERRCODE = 'PF008',
				  DETAIL = 'No event with this id, operation and body went to operation-events.';
	END IF;
END
$$;
