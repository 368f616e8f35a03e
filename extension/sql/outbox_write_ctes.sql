		-- payflow's one writer of the outbox (outbox_write_ctes.sql), as CTEs
		-- of the statement that makes the events: the statement before them
		-- defines outbox_in (event_id uuid, operation_id text, group_key text,
		-- event_type text, destination text, body jsonb, rendered smallint,
		-- n: the order to draw seqs in), "--@@ include" puts these after it.
		-- Part of the caller's statement, not a function of its own: a call
		-- of the writer cost a submit 45 us (its own statements, and its
		-- PL/pgSQL set up again in each transaction; test/bench/README.md).
		--
		-- The log and the work list, one seq each event, drawn in n's order
		-- (per-payment order).  An xid before a seq: payflow._outbox_cursor
		-- relies on it (the filter takes it, if the statement has not
		-- written yet, before the sort hands on a row to draw a seq for).
		-- A filter of each row, not a one-time filter before the scan, so
		-- that a statement with no event (a replayed submit) takes no xid:
		-- the row's own column in it keeps the planner from hoisting it.
		-- The log keeps no body, type, destination or group of a rendered
		-- event (_outbox_event_route), and a body without the envelope its
		-- columns hold of the others; the work list (no WAL) the whole
		-- event.  The relays are woken at commit (_outbox_written, once a
		-- row).
		outbox_ev AS MATERIALIZED (
			SELECT nextval('payflow.outbox_seq_seq') AS seq, e.*,
				   e.rendered IS NULL
				   AND e.body @> payflow._event_envelope(e.event_id, e.operation_id, e.event_type, now()) AS enveloped
			  FROM (SELECT e.event_id, e.operation_id, e.event_type, e.destination,
						   payflow._message_group_id(e.group_key) AS message_group_id, e.body, e.rendered
					  FROM outbox_in e
					 WHERE (pg_catalog.pg_current_xact_id()::text || e.operation_id) IS NOT NULL
					 ORDER BY e.n) e
		), outbox_logged AS (
			INSERT INTO payflow.outbox_events (seq, event_id, operation_id, event_type, destination, message_group_id,
											   enveloped, rendered, body)
			SELECT ev.seq, ev.event_id, ev.operation_id,
				   CASE WHEN ev.rendered IS NULL THEN ev.event_type END,
				   CASE WHEN ev.rendered IS NULL THEN ev.destination END,
				   CASE WHEN ev.rendered IS NULL THEN ev.message_group_id END,
				   ev.enveloped, ev.rendered,
				   CASE WHEN ev.rendered IS NOT NULL THEN NULL
						WHEN ev.enveloped
						THEN ev.body - ARRAY['eventType', 'eventVersion', 'eventId', 'operationId', 'createdAt']
						ELSE ev.body END
			  FROM outbox_ev ev
		), outbox_work AS (
			INSERT INTO payflow.outbox (event_id, seq, operation_id, event_type, destination, message_group_id, body)
			SELECT ev.event_id, ev.seq, ev.operation_id, ev.event_type, ev.destination, ev.message_group_id, ev.body
			  FROM outbox_ev ev
			RETURNING payflow._outbox_written()
		)
