-- Retention by partition (partitions.sql): purge makes a partition a day
-- ahead and drops a past day's partitions whole once its operations are
-- gone; the operations the rules keep longer (FAILED, still open) move to
-- the default partition first and lose nothing: their history, steps and
-- payloads read the same before and after, and an open one goes on.
--
-- Operations of past days are made by moving today's to a past day: their
-- ids (and keys) get that day's time digits, as if submitted then.
CREATE FUNCTION pf_to_day(p_op text, p_day date) RETURNS text
	LANGUAGE plpgsql
	AS $$
DECLARE
	v_new text := payflow._day_id_floor(p_day) || right(p_op, 16);
BEGIN
	UPDATE payflow.operations
	   SET id = v_new, created_at = p_day + time '12:00',
		   request_ref = jsonb_set(request_ref, '{key}', to_jsonb(replace(request_ref ->> 'key', p_op, v_new)))
	 WHERE id = p_op;
	UPDATE payflow.step_results SET operation_id = v_new WHERE operation_id = p_op;
	UPDATE payflow.step_attempts SET operation_id = v_new WHERE operation_id = p_op;
	UPDATE payflow.history_events SET operation_id = v_new WHERE operation_id = p_op;
	UPDATE payflow.payloads SET key = replace(key, p_op, v_new) WHERE payflow._payload_operation(key) = p_op;
	UPDATE payflow.outbox_events SET operation_id = v_new WHERE operation_id = p_op;
	RETURN v_new;
END
$$;
-- where an operation's rows are: partition and count, per table
CREATE FUNCTION pf_rows_of(p_op text) RETURNS text
	LANGUAGE sql
	AS $$
	SELECT coalesce(string_agg(format('%s %s', regexp_replace(t, '_d[0-9]{8}$', '_<day>'), n), ', ' ORDER BY t), 'none')
	  FROM (SELECT tableoid::regclass::text AS t, count(*) AS n FROM payflow.step_results WHERE operation_id = p_op GROUP BY 1
			UNION ALL SELECT tableoid::regclass::text, count(*) FROM payflow.step_attempts WHERE operation_id = p_op GROUP BY 1
			UNION ALL SELECT tableoid::regclass::text, count(*) FROM payflow.history_events WHERE operation_id = p_op GROUP BY 1
			UNION ALL SELECT tableoid::regclass::text, count(*) FROM payflow.payloads WHERE payflow._payload_operation(key) = p_op GROUP BY 1
			UNION ALL SELECT tableoid::regclass::text, count(*) FROM payflow.outbox_events WHERE operation_id = p_op GROUP BY 1) r
$$;
CREATE FUNCTION pf_seen(p_op text) RETURNS text
	LANGUAGE sql
	AS $$
	SELECT (SELECT string_agg(format('%s>%s %s', h.from_status, h.to_status, h.reason), '; ' ORDER BY h.at, h.reason)
			  FROM payflow.history(p_op) h)
		   || ' | ' || (SELECT string_agg(format('%s %s %s', s.step_name, s.status, s.attempt), '; ' ORDER BY s.step_name)
						  FROM payflow.steps s WHERE s.operation_id = p_op)
$$;
SELECT (now() AT TIME ZONE 'UTC')::date - 20 AS day \gset

-- a past day's partitions, made as purge makes them; and the day bounds
SELECT count(*) FILTER (WHERE payflow._make_day_partition(p.parent, p.key_prefix, :'day')) AS made
  FROM payflow._day_partitioned() p;
SELECT count(*) AS again FROM payflow._day_partitioned() p
 WHERE payflow._make_day_partition(p.parent, p.key_prefix, :'day');
SELECT payflow._day_id_floor('1970-01-01') AS epoch, payflow._day_id_floor('2026-12-06') AS a_day,
	   payflow._day_id_floor('2026-12-06') < payflow._day_id_floor('2026-12-07') AS ordered;

-- On that day: A completed, B failed for good, C's first step still running.
SELECT payflow.submit('pt-a', '{"amount": 1}') AS a, payflow.submit('pt-b', '{"amount": 2}') AS b,
	   payflow.submit('pt-c', '{"amount": 3}') AS c \gset
SELECT count(payflow.claim_step(:'a', s, 'w')) + count(payflow.complete_step(:'a', s, 'w', '{"ok": true}')) AS a_steps
  FROM unnest(ARRAY['PROCESS_PAYMENT', 'POST_PROCESS', 'CREATE_INVOICE']) s;
SELECT payflow.claim_step(:'b', 'PROCESS_PAYMENT', 'w') ->> 'action' AS b_claim,
	   payflow.fail_step(:'b', 'PROCESS_PAYMENT', 'w', '{"code": "declined"}', false) ->> 'action' AS b_failed;
SELECT payflow.claim_step(:'c', 'PROCESS_PAYMENT', 'w-c') ->> 'leaseToken' AS c_token \gset
SELECT pf_to_day(:'a', :'day') AS a, pf_to_day(:'b', :'day') AS b, pf_to_day(:'c', :'day') AS c \gset
SELECT status, pf_rows_of(id) AS rows FROM payflow.operations WHERE id IN (:'a', :'b', :'c') ORDER BY payment_id;
SELECT pf_seen(:'b') AS b_before \gset
SELECT pf_seen(:'c') AS c_before \gset
-- A and B ended nineteen days ago: A is past retention_completed, B
-- (FAILED) not past retention_failed
UPDATE payflow.operations SET terminal_at = now() - interval '19 days' WHERE id IN (:'a', :'b');

-- One purge: A's row goes (its rows with the day), the day is dropped,
-- B's and C's rows move to the default partitions first.
SELECT p -> 'operations' AS operations, p -> 'partitions' -> 'dropped' AS dropped,
	   p -> 'partitions' -> 'rowsMoved' AS moved, p -> 'partitions' -> 'busy' AS busy
  FROM payflow.purge() p;
SELECT count(*) AS day_left FROM payflow._day_partitions() WHERE day = :'day';
SELECT id = :'b' AS b, status, pf_rows_of(id) AS rows FROM payflow.operations WHERE id IN (:'a', :'b', :'c')
 ORDER BY payment_id;
SELECT pf_rows_of(:'a') AS a_rows;
SELECT pf_seen(:'b') = :'b_before' AS b_reads_the_same, pf_seen(:'c') = :'c_before' AS c_reads_the_same;

-- The day's outbox log stayed: no relay ran here, and an event not yet
-- published stays where a rebuild of the outbox reads it.  Once the
-- relays' durable position passed every event of the day, the next purge
-- drops it, B's and C's events moved to the default partition first;
-- B's terminal event still passes the webhook check.
SELECT string_agg(parent, ', ') AS day_kept FROM payflow._day_partitions() WHERE day = :'day';
CREATE TEMP TABLE pf_position AS SELECT * FROM payflow.outbox_position;
INSERT INTO payflow.outbox_position (done_below) SELECT max(seq) + 1 FROM payflow.outbox_events
ON CONFLICT (id) DO UPDATE SET done_below = excluded.done_below;
SELECT p -> 'partitions' -> 'dropped' AS dropped, p -> 'partitions' -> 'rowsMoved' AS moved FROM payflow.purge() p;
SELECT count(*) AS day_left FROM payflow._day_partitions() WHERE day = :'day';
SELECT pf_rows_of(:'a') AS a_rows, pf_rows_of(:'b') AS b_rows;
SELECT count(*) AS b_events_verified
  FROM payflow.outbox_events e, payflow._require_published(e.event_id, e.operation_id, payflow._outbox_event_body(e)::text)
 WHERE e.operation_id = :'b' AND e.destination = 'operation-events';
DELETE FROM payflow.outbox_position;
INSERT INTO payflow.outbox_position SELECT * FROM pf_position;
SELECT length(payflow.payload_get(payflow._request_ref(id, request_ref, request_mac, request_size))) > 0 AS b_request_kept FROM payflow.operations WHERE id = :'b';
SELECT sqlstate, regexp_replace(message, 'pay_\w+', 'pay_<id>') AS message
  FROM pf_try(format($$SELECT payflow.status(%L)$$, :'a'));
-- C goes on: its step completes, and its next one is claimed
SELECT payflow.complete_step(:'c', 'PROCESS_PAYMENT', 'w-c', '{"ok": true}', lease_token => :'c_token') ->> 'status' AS c_done;
SELECT payflow.claim_step(:'c', 'POST_PROCESS', 'w-c') ->> 'action' AS c_next;
SELECT pf_rows_of(:'c') AS c_rows;
-- B can be replayed: it goes on from its failed step, its new rows in the
-- default partition
SELECT payflow.replay(:'b') AS replayed;
SELECT status, pf_rows_of(id) AS rows FROM payflow.operations WHERE id = :'b';

-- A day is kept while an operation of it is past retention but not yet
-- purged (purge deletes them first), and while it holds more operations to
-- keep than one call moves.
SELECT (now() AT TIME ZONE 'UTC')::date - 21 AS day2 \gset
SELECT count(*) FILTER (WHERE payflow._make_day_partition(p.parent, p.key_prefix, :'day2')) AS made
  FROM payflow._day_partitioned() p;
SELECT payflow.submit('pt-d', '{}') AS d, payflow.submit('pt-e', '{}') AS e \gset
SELECT pf_to_day(:'d', :'day2') AS d, pf_to_day(:'e', :'day2') AS e \gset
SELECT p -> 'partitions' -> 'dropped' AS dropped FROM payflow.purge(1) p;
SELECT count(*) AS day2_kept FROM payflow._day_partitions() WHERE day = :'day2';
SELECT p -> 'partitions' -> 'dropped' AS dropped, p -> 'partitions' -> 'rowsMoved' AS moved FROM payflow.purge(2) p;
-- (but for the outbox log's: D's and E's requests are not published)
SELECT string_agg(parent, ', ') AS day2_left FROM payflow._day_partitions() WHERE day = :'day2';
SELECT pf_rows_of(:'d') AS d_rows;

-- Rows written while no partition held their day wait in the default
-- partition; making the day's partition moves them in.
SELECT (now() AT TIME ZONE 'UTC')::date - 2 AS day3 \gset
SELECT payflow.submit('pt-f', '{}') AS f \gset
SELECT pf_to_day(:'f', :'day3') AS f \gset
SELECT pf_rows_of(:'f') AS f_rows_before;
SELECT count(*) FILTER (WHERE payflow._make_day_partition(p.parent, p.key_prefix, :'day3')) AS made
  FROM payflow._day_partitioned() p;
SELECT pf_rows_of(:'f') AS f_rows_after;
SELECT length(payflow.payload_get(payflow._request_ref(id, request_ref, request_mac, request_size))) > 0 AS f_request_readable FROM payflow.operations WHERE id = :'f';

-- purge makes today's and tomorrow's partitions
SELECT p -> 'partitions' -> 'busy' AS busy FROM payflow.purge() p;
SELECT count(*) AS ahead FROM payflow._day_partitions()
 WHERE day BETWEEN (now() AT TIME ZONE 'UTC')::date AND (now() AT TIME ZONE 'UTC')::date + 1;
SELECT count(*) AS beyond FROM payflow._day_partitions() WHERE day > (now() AT TIME ZONE 'UTC')::date + 1;
-- a new partition's block-range index leaves its first range unsummarized,
-- so that an insert there writes nothing to it (summarizing it now is
-- summarizing one range; made on the empty table, it was summarized
-- already, and each insert widened the summary, a WAL record each)
BEGIN;
SELECT payflow._make_day_partition('outbox_events', '', (now() AT TIME ZONE 'UTC')::date + 40) AS made;
INSERT INTO payflow.outbox_events (seq, event_id, operation_id, event_type, destination, message_group_id, body)
SELECT -1, gen_random_uuid(), payflow._day_id_floor((now() AT TIME ZONE 'UTC')::date + 40) || '0', 'T', 'd', 'g', '{}';
SELECT CASE WHEN c.relname ~ '_seq_idx$' THEN 'seq'
			WHEN pg_get_indexdef(c.oid) ~ 'operation_id text_bloom_ops' THEN 'operation_id (bloom)' END AS brin_index,
	   brin_summarize_range(c.oid::regclass, 0) AS ranges_summarized_now
  FROM payflow._day_partitions() p
  JOIN pg_index i ON i.indrelid = ('payflow.' || p.name)::regclass
  JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am a ON a.oid = c.relam
 WHERE p.parent = 'outbox_events' AND p.day = (now() AT TIME ZONE 'UTC')::date + 40 AND a.amname = 'brin'
 ORDER BY 1;
-- The log's B-tree by operation holds its terminal events alone (one an
-- operation: the webhook check's); every event of an operation is found
-- through the bloom filters (the console), summarized or not
INSERT INTO payflow.outbox_events (seq, event_id, operation_id, rendered)
SELECT -1 - n, gen_random_uuid(), payflow._day_id_floor((now() AT TIME ZONE 'UTC')::date + 40) || (n % 49),
	   (n % 4)::smallint
  FROM generate_series(1, 20000) n;
SELECT brin_summarize_new_values(c.oid::regclass) > 0 AS summarized
  FROM payflow._day_partitions() p
  JOIN pg_index i ON i.indrelid = ('payflow.' || p.name)::regclass
  JOIN pg_class c ON c.oid = i.indexrelid
 WHERE p.parent = 'outbox_events' AND p.day = (now() AT TIME ZONE 'UTC')::date + 40
   AND pg_get_indexdef(c.oid) ~ 'text_bloom_ops';
SELECT regexp_replace(pg_get_indexdef(i.indexrelid), '^.* USING ', '') AS log_index
  FROM pg_index i WHERE i.indrelid = 'payflow.outbox_events_default'::regclass ORDER BY 1;
SET LOCAL enable_seqscan = off;
SELECT count(*) AS events_of_one_operation
  FROM payflow.outbox_events e
 WHERE e.operation_id = payflow._day_id_floor((now() AT TIME ZONE 'UTC')::date + 40) || '7';
SELECT count(*) AS its_terminal_events
  FROM payflow.outbox_events e
 WHERE e.operation_id = payflow._day_id_floor((now() AT TIME ZONE 'UTC')::date + 40) || '7'
   AND payflow._operation_event(e.destination, e.rendered);
-- (which index each of the two uses, in the default partition)
EXPLAIN (COSTS OFF) SELECT FROM payflow.outbox_events_default e WHERE e.operation_id = 'pay_x';
EXPLAIN (COSTS OFF) SELECT FROM payflow.outbox_events_default e
 WHERE e.operation_id = 'pay_x' AND payflow._operation_event(e.destination, e.rendered);
ROLLBACK;
-- they are not the extension's (pg_dump keeps them with their rows); the
-- default partitions are, and marked for pg_dump (where payflow is an
-- extension: the plain SQL install's tables are all dumped)
SELECT count(*) AS members FROM payflow._day_partitions() p
  JOIN pg_depend d ON d.objid = ('payflow.' || p.name)::regclass AND d.deptype = 'e';
SELECT NOT EXISTS (SELECT FROM pg_extension WHERE extname = 'payflow')
	   OR (SELECT count(*) FROM pg_extension x, unnest(x.extconfig) c
			WHERE x.extname = 'payflow' AND c::regclass::text ~ '_default$') = 6 AS defaults_dumped;

-- The published batches have a partition an hour: purge makes this hour's
-- and the next one's (one transaction: its now() is purge's), where a
-- batch published now goes.
BEGIN;
SELECT p -> 'partitions' -> 'busy' AS busy FROM payflow.purge() p;
SELECT count(*) AS hours_ahead FROM payflow._hour_partitions()
 WHERE hour IN (date_trunc('hour', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC',
				date_trunc('hour', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' + interval '1 hour');
INSERT INTO payflow.outbox_batches (first_seq, last_seq, seqs, message_ids)
VALUES (-1, -1, '{-1}', '{m-now}') RETURNING tableoid::regclass::text ~ '^payflow.outbox_batches_h[0-9]{10}$' AS in_its_hour;
COMMIT;
-- An hour whose end is past retention_published goes whole; a batch of an
-- hour without a partition waits in the default partition, and goes row
-- by row (publishedEvents counts those).
SELECT payflow._make_hour_partition(now() - interval '3 hours') AS made,
	   payflow._make_hour_partition(now() - interval '3 hours') AS again;
INSERT INTO payflow.outbox_batches (published_at, first_seq, last_seq, seqs, message_ids)
VALUES (now() - interval '3 hours', -3, -2, '{-3,-2}', '{m-3a,m-3b}'),
	   (now() - interval '5 hours', -5, -5, '{-5}', '{m-5}');
SELECT message_ids[1] AS batch, regexp_replace(tableoid::regclass::text, '_h[0-9]{10}$', '_h<hour>') AS partition
  FROM payflow.outbox_batches WHERE first_seq < 0 ORDER BY first_seq;
-- (no partition is made for an hour whose batches wait in the default
-- partition: moving them in would hold the relays' acks meanwhile)
SELECT payflow._make_hour_partition(now() - interval '5 hours') AS made_over_waiting_batches;
SELECT p -> 'partitions' -> 'publishedHours' -> 'dropped' AS hours_dropped, p -> 'publishedEvents' AS published
  FROM payflow.purge() p;
SELECT string_agg(message_ids[1], ', ' ORDER BY first_seq) AS batches_left FROM payflow.outbox_batches WHERE first_seq < 0;
SELECT count(*) AS old_hours FROM payflow._hour_partitions() WHERE hour < now() - interval '2 hours';
DELETE FROM payflow.outbox_batches WHERE first_seq < 0;
-- metrics() tells whether purge keeps the partitions made, and how many
-- rows wait in the default partitions (the planner's figure: exact after
-- an ANALYZE of tables this small)
ANALYZE payflow.step_results_default, payflow.step_attempts_default, payflow.history_events_default,
		payflow.payloads_default, payflow.outbox_events_default;
SELECT (r ->> 'daysAhead')::int AS days_ahead,
	   (r ->> 'dayPartitions')::int = (SELECT count(DISTINCT day) FROM payflow._day_partitions()) AS partitions_counted,
	   (r ->> 'defaultPartitionRows')::bigint
		   = (SELECT (SELECT count(*) FROM payflow.step_results_default) + (SELECT count(*) FROM payflow.step_attempts_default)
					 + (SELECT count(*) FROM payflow.history_events_default) + (SELECT count(*) FROM payflow.payloads_default)
					 + (SELECT count(*) FROM payflow.outbox_events_default))
		   AS default_rows_counted,
	   (r ->> 'defaultPartitionRows')::bigint > 0 AS some_wait
  FROM (SELECT payflow.metrics() -> 'retention' AS r) m;
