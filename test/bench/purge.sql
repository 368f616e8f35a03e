-- test/bench/purge.sh's driver: moves the operations of run :run (made by
-- step_engine.sql, all COMPLETED) to day :day, as if submitted then and
-- ended ten minutes later, into that day's partitions (:mode 'days') or
-- into the default partitions, where no partition holds their day (:mode
-- 'rows', the row-by-row purge of 0.4); then VACUUM and CHECKPOINT (purge
-- comes days after the rows were written: every page it touches writes a
-- full-page image first) and purge() until it has no more.  Prints one
-- line: WAL bytes, milliseconds, operations purged, partitions dropped,
-- purge calls.
SELECT :'mode' = 'days' AS by_day \gset
\if :by_day
SELECT count(*) FILTER (WHERE payflow._make_day_partition(p.parent, p.key_prefix, :'day')) AS made
  FROM payflow._day_partitioned() p \gset
SELECT payflow._make_hour_partition((:'day'::date + time '12:05') AT TIME ZONE 'UTC') AS made_hour \gset
\endif

CREATE TEMP TABLE moved AS
SELECT o.id AS old, payflow._day_id_floor(:'day') || right(o.id, 16) AS new
  FROM payflow.operations o WHERE o.payment_id LIKE :'run' || '-%';
CREATE INDEX ON moved (old);
ANALYZE moved;
UPDATE payflow.operations o
   SET id = m.new, created_at = :'day'::date + time '12:00', terminal_at = :'day'::date + time '12:10',
	   request_ref = jsonb_set(o.request_ref, '{key}', to_jsonb(replace(o.request_ref ->> 'key', m.old, m.new)))
  FROM moved m WHERE o.id = m.old;
UPDATE payflow.step_results t SET operation_id = m.new FROM moved m WHERE t.operation_id = m.old;
UPDATE payflow.step_attempts t SET operation_id = m.new FROM moved m WHERE t.operation_id = m.old;
UPDATE payflow.history_events t SET operation_id = m.new FROM moved m WHERE t.operation_id = m.old;
UPDATE payflow.payloads t SET key = replace(t.key, m.old, m.new)
  FROM moved m WHERE payflow._payload_operation(t.key) = m.old;
UPDATE payflow.outbox_events t SET operation_id = m.new, created_at = :'day'::date + time '12:05'
  FROM moved m WHERE t.operation_id = m.old;
-- the batches that published them, that day too (into its hour's
-- partition, or the default one)
UPDATE payflow.outbox_batches b SET published_at = (:'day'::date + time '12:05') AT TIME ZONE 'UTC'
  FROM (SELECT min(e.seq) AS lo, max(e.seq) AS hi FROM payflow.outbox_events e JOIN moved m ON m.new = e.operation_id) r
 WHERE b.first_seq >= r.lo AND b.last_seq <= r.hi;
-- the relays published them days ago
INSERT INTO payflow.outbox_position (done_below) SELECT max(seq) + 1 FROM payflow.outbox_events
ON CONFLICT (id) DO UPDATE SET done_below = greatest(excluded.done_below, payflow.outbox_position.done_below);
VACUUM ANALYZE payflow.operations;
VACUUM ANALYZE payflow.step_results;
VACUUM ANALYZE payflow.payloads;
VACUUM ANALYZE payflow.outbox_events;
VACUUM ANALYZE payflow.outbox_batches;
CHECKPOINT;

CREATE OR REPLACE PROCEDURE pg_temp.bench_purge(INOUT operations bigint, INOUT dropped bigint, INOUT calls integer)
	LANGUAGE plpgsql
	AS $$
DECLARE
	p jsonb;
BEGIN
	operations := 0;
	dropped := 0;
	calls := 0;
	LOOP
		p := payflow.purge();
		COMMIT;
		calls := calls + 1;
		operations := operations + (p ->> 'operations')::bigint;
		dropped := dropped + (p -> 'partitions' ->> 'dropped')::bigint;
		EXIT WHEN NOT (p ->> 'more')::boolean OR calls > 1000;
	END LOOP;
END
$$;

SELECT pg_current_wal_lsn() AS wal0, extract(epoch FROM clock_timestamp()) AS t0 \gset
CALL pg_temp.bench_purge(0, 0, 0) \gset
SELECT format('%s %s %s %s %s', pg_current_wal_lsn() - :'wal0'::pg_lsn,
			  round((extract(epoch FROM clock_timestamp()) - :t0) * 1000), :operations, :dropped, :calls);
