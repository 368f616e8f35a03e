-- test/bench/retained.sh's filler: :n retained operations, COMPLETED, spread
-- over the :days days before today, each a copy of one of the operations of
-- run :run (made by step_engine.sql) under an id of its day, with its
-- steps done, its request payload and its events, in the days' partitions
-- (made here as purge makes them).  What purge would keep with
-- retention_completed of :days days.
SELECT count(*) FILTER (WHERE payflow._make_day_partition(p.parent, p.key_prefix, d::date)) AS made
  FROM payflow._day_partitioned() p,
	   generate_series((now() AT TIME ZONE 'UTC')::date - :days, (now() AT TIME ZONE 'UTC')::date - 1, '1 day') d \gset

CREATE TEMP TABLE tpl AS
SELECT row_number() OVER (ORDER BY o.id) - 1 AS k, o.id AS tpl_id
  FROM payflow.operations o WHERE o.payment_id LIKE :'run' || '-%' AND o.status = 'COMPLETED';
SELECT count(*) AS tpl_n FROM tpl \gset

-- the copies' ids: a ULID of their minute (g's share of :days days) and g
-- in the random part; the minutes' time digits computed once each
CREATE TEMP TABLE minutes AS
SELECT m, ts, left(payflow._admin_id_floor(ts), 14) AS prefix
  FROM generate_series(0, :days * 1440 - 1) m
 CROSS JOIN LATERAL (SELECT ((now() AT TIME ZONE 'UTC')::date - :days)::timestamp AT TIME ZONE 'UTC'
							+ make_interval(mins => m) AS ts) x;
CREATE TEMP TABLE copies AS
SELECT g, t.tpl_id, mi.prefix || lpad(upper(to_hex(g)), 16, '0') AS id, mi.ts
  FROM generate_series(1, :n) g
  JOIN minutes mi ON mi.m = (g::bigint * :days * 1440) / (:n + 1)
  JOIN tpl t ON t.k = g % :tpl_n;
ANALYZE copies;

-- (the columns named one by one: jsonb_populate_record took 0.8 ms a row)
SELECT string_agg(CASE a.attname
					  WHEN 'id' THEN 'c.id'
					  WHEN 'payment_id' THEN $$'ret-' || c.g$$
					  WHEN 'idempotency_key' THEN $$'ret-' || c.g$$
					  WHEN 'created_at' THEN 'c.ts'
					  WHEN 'updated_at' THEN $$c.ts + interval '10 minutes'$$
					  WHEN 'terminal_at' THEN $$c.ts + interval '10 minutes'$$
					  WHEN 'request_ref' THEN $$jsonb_set(o.request_ref, '{key}', to_jsonb(replace(o.request_ref ->> 'key', o.id, c.id)))$$
					  ELSE 'o.' || quote_ident(a.attname) END, ', ' ORDER BY a.attnum) AS op_columns
  FROM pg_attribute a WHERE a.attrelid = 'payflow.operations'::regclass AND a.attnum > 0 AND NOT a.attisdropped \gset
SELECT string_agg(CASE a.attname
					  WHEN 'operation_id' THEN 'c.id'
					  WHEN 'result_ref' THEN $$CASE WHEN r.result_ref IS NOT NULL THEN jsonb_set(r.result_ref, '{key}', to_jsonb(replace(r.result_ref ->> 'key', r.operation_id, c.id))) END$$
					  ELSE 'r.' || quote_ident(a.attname) END, ', ' ORDER BY a.attnum) AS step_columns
  FROM pg_attribute a WHERE a.attrelid = 'payflow.step_results'::regclass AND a.attnum > 0 AND NOT a.attisdropped \gset
INSERT INTO payflow.operations SELECT :op_columns FROM copies c JOIN payflow.operations o ON o.id = c.tpl_id;
INSERT INTO payflow.step_results SELECT :step_columns FROM copies c JOIN payflow.step_results r ON r.operation_id = c.tpl_id;
INSERT INTO payflow.payloads (key, content, created_at)
SELECT replace(p.key, c.tpl_id, c.id), p.content, c.ts
  FROM copies c JOIN payflow.payloads p ON payflow._payload_operation(p.key) = c.tpl_id;
-- their events in the outbox log, published long ago
INSERT INTO payflow.outbox_events (seq, event_id, operation_id, event_type, destination, message_group_id, created_at,
								   enveloped, rendered, body)
SELECT nextval('payflow.outbox_seq_seq'), gen_random_uuid(), c.id, e.event_type, e.destination, e.message_group_id,
	   c.ts, e.enveloped, e.rendered, e.body
  FROM copies c JOIN payflow.outbox_events e ON e.operation_id = c.tpl_id;
INSERT INTO payflow.outbox_position (done_below) SELECT max(seq) + 1 FROM payflow.outbox_events
ON CONFLICT (id) DO UPDATE SET done_below = greatest(excluded.done_below, payflow.outbox_position.done_below);
VACUUM ANALYZE payflow.operations;
VACUUM ANALYZE payflow.step_results;
VACUUM ANALYZE payflow.payloads;
VACUUM ANALYZE payflow.outbox_events;
CHECKPOINT;
SELECT count(*) AS retained FROM payflow.operations;
