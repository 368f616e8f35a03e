-- test/soak/report.sql — the tables a soak run ends with.  Run after
-- invariants.sql (soak.final).  psql variables: seed, load_start and
-- load_end (epoch seconds of the load phase).
\pset footer off
\pset null ''

\echo
\echo '== faults injected, by kind (time to recover: first operation COMPLETED after the fault ended;'
\echo '   in flight settled: every operation not yet terminal when the fault began is terminal)'
SELECT f.kind,
	   count(*) FILTER (WHERE f.injected) AS injected,
	   count(*) FILTER (WHERE NOT f.injected) AS not_injected,
	   round(percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM fc.at - f.started_at))
			 FILTER (WHERE f.injected)::numeric, 1) AS first_completion_p50_s,
	   round(max(extract(epoch FROM fc.at - f.started_at)) FILTER (WHERE f.injected)::numeric, 1) AS first_completion_max_s,
	   round(percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM st.at - f.started_at))
			 FILTER (WHERE f.injected)::numeric, 1) AS in_flight_settled_p50_s,
	   round(max(extract(epoch FROM st.at - f.started_at)) FILTER (WHERE f.injected)::numeric, 1) AS in_flight_settled_max_s
  FROM soak.faults f
  LEFT JOIN LATERAL (SELECT min(t.at) AS at FROM soak.transitions t
					  WHERE t.to_status = 'COMPLETED' AND t.at >= f.ended_at) fc ON true
  LEFT JOIN LATERAL (SELECT greatest(max(o.terminal_at), f.started_at) AS at FROM soak.final o
					  WHERE o.submitted_at < f.started_at AND o.terminal_at >= f.started_at) st ON true
 GROUP BY f.kind ORDER BY f.kind;

\echo '== operations'
SELECT count(*) AS submitted,
	   count(*) FILTER (WHERE status = 'COMPLETED') AS completed,
	   count(*) FILTER (WHERE status = 'FAILED') AS failed,
	   count(*) FILTER (WHERE status = 'FAILED' AND EXISTS (
			SELECT FROM soak.dead_letters d WHERE d.operation_id = f.operation_id AND d.source = 'step'
											  AND d.error ->> 'code' = 'P0001')) AS failed_declined,
	   count(*) FILTER (WHERE status IS NULL) AS lost,
	   (SELECT count(*) FROM (SELECT idempotency_key FROM soak.charges GROUP BY 1 HAVING count(*) > 1) d)
		 + (SELECT count(*) FROM (SELECT operation_id FROM soak.invoices GROUP BY 1 HAVING count(*) > 1) d)
		 AS duplicate_side_effects,
	   (SELECT count(*) FROM soak.charges) AS legacy_charges,
	   (SELECT count(*) FROM soak.invoices) AS invoices
  FROM soak.final f;

\echo '== failures by step and code'
SELECT d.step_name, d.error ->> 'code' AS code, count(*) AS operations, min(left(d.error ->> 'message', 60)) AS example
  FROM soak.final f JOIN soak.dead_letters d ON d.operation_id = f.operation_id AND d.source = 'step'
 WHERE f.status = 'FAILED'
 GROUP BY 1, 2 ORDER BY 1, 2;

\echo '== submit -> COMPLETED, seconds (faults included)'
SELECT round(percentile_cont(0.5) WITHIN GROUP (ORDER BY s)::numeric, 2) AS p50,
	   round(percentile_cont(0.95) WITHIN GROUP (ORDER BY s)::numeric, 2) AS p95,
	   round(percentile_cont(0.99) WITHIN GROUP (ORDER BY s)::numeric, 2) AS p99,
	   round(max(s)::numeric, 2) AS max,
	   round((count(*) / nullif(:load_end - :load_start, 0))::numeric, 1) AS completed_per_s
  FROM (SELECT extract(epoch FROM terminal_at - submitted_at) AS s FROM soak.final WHERE status = 'COMPLETED') x;

\echo '== messages sent past the relay'
SELECT (SELECT count(*) FROM soak.duplicates) AS duplicates_sent,
	   (SELECT count(*) FROM soak.poison) AS poison_sent,
	   (SELECT count(*) FROM soak.poison p WHERE EXISTS (
			SELECT FROM soak.dead_letters d WHERE position(p.marker IN d.message_body) > 0)) AS poison_dead_lettered,
	   (SELECT count(*) FROM soak.poison p WHERE EXISTS (
			SELECT FROM soak.dlq q WHERE position(p.marker IN q.body) > 0)) AS poison_in_dlq,
	   (SELECT count(*) FROM soak.poison p
		 WHERE NOT EXISTS (SELECT FROM soak.dead_letters d WHERE position(p.marker IN d.message_body) > 0)
		   AND NOT EXISTS (SELECT FROM soak.dlq q WHERE position(p.marker IN q.body) > 0)) AS poison_lost_with_emulator,
	   (SELECT count(*) FROM soak.dlq) AS dlq_messages;

\echo '== events re-emitted (same step, same attempt: the stuck-step recovery; attempt + 1: a retry or takeover)'
SELECT count(*) FILTER (WHERE copies > 1) AS step_requests_redriven,
	   coalesce(sum(copies - 1) FILTER (WHERE copies > 1), 0) AS extra_events,
	   count(DISTINCT operation_id) FILTER (WHERE copies > 1) AS operations_redriven,
	   (SELECT count(*) FROM soak.events e WHERE e.attempt > 1
		   AND e.event_type IN ('PaymentRequested', 'PaymentCompleted', 'InvoiceRequested')) AS retry_events
  FROM (SELECT operation_id, event_type, attempt, count(*) AS copies FROM soak.events
		 WHERE event_type IN ('PaymentRequested', 'PaymentCompleted', 'InvoiceRequested')
		 GROUP BY 1, 2, 3) x;

\echo '== hot tables over the run: total size in kB (heap + indexes + TOAST) at moments of the load (s after it began), and after the final purge'
CREATE TEMP TABLE moments AS
WITH m AS (SELECT DISTINCT at FROM soak.sizes),
	 picked AS (
		SELECT k, (SELECT m.at FROM m
					ORDER BY abs(extract(epoch FROM m.at) - (:load_start + (:load_end - :load_start) * k / 6.0)) LIMIT 1) AS at
		  FROM generate_series(0, 6) k
		UNION ALL
		SELECT 7, (SELECT max(at) FROM m))
SELECT DISTINCT ON (at) k, at,
	   CASE WHEN k = 7 THEN 'after' ELSE round(extract(epoch FROM at) - :load_start) || 's' END AS label
  FROM picked ORDER BY at, k;
SELECT x.relname AS "table", x.label, x.kb
  FROM (SELECT s.relname, m.k, m.label, (s.total_bytes / 1024)::text AS kb
		  FROM moments m JOIN soak.sizes s ON s.at = m.at
		 WHERE s.relname IN ('operations', 'steps', 'outbox', 'payloads', 'history_events', 'step_results', 'outbox_published',
							 'dead_letters', 'consumed_events', 'job_run_details')
		UNION ALL
		SELECT ' indexes of all', m.k, m.label, (sum(s.index_bytes) / 1024)::bigint::text
		  FROM moments m JOIN soak.sizes s ON s.at = m.at AND s.relname NOT LIKE '~%' GROUP BY m.k, m.label
		UNION ALL
		SELECT '(operations submitted)', m.k, m.label, (SELECT count(*) FROM soak.submitted u WHERE u.submitted_at <= m.at)::text
		  FROM moments m
		UNION ALL
		SELECT '(rows in operations)', m.k, m.label, s.live_rows::text
		  FROM moments m JOIN soak.sizes s ON s.at = m.at AND s.relname = 'operations'
		UNION ALL
		SELECT '(dead rows, all tables)', m.k, m.label, sum(s.dead_rows)::text
		  FROM moments m JOIN soak.sizes s ON s.at = m.at GROUP BY m.k, m.label
		UNION ALL
		SELECT '(oldest transaction, s)', m.k, m.label, s.total_bytes::text
		  FROM moments m JOIN soak.sizes s ON s.at = m.at AND s.relname = '~oldest transaction') x
 ORDER BY x.relname, x.k
\crosstabview "table" label kb
