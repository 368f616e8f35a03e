-- metrics() is scraped every few seconds: it reads the steps done of the
-- operations in flight and of those that ended in the last hour by a probe
-- of step_results_pkey each, never by a scan, merge or hash join over the
-- steps of every retained operation (its cost follows the work in flight,
-- not the retention); the open steps are in the operations' rows.  Its
-- plan with 20,000 operations retained and 100 in flight:
BEGIN;
INSERT INTO payflow.operations (id, payment_id, idempotency_key, request_ref, status, current_step,
								created_at, updated_at, terminal_at)
SELECT 'pay_MPLANOLD' || lpad(g::text, 18, '0'), 'mp-old-' || g, 'mp-old-' || g, '{}', 'COMPLETED',
	   'CREATE_INVOICE', now() - interval '2 days', now() - interval '2 days', now() - interval '2 days'
  FROM generate_series(1, 20000) g;
INSERT INTO payflow.step_results (operation_id, step_name, attempt, created_at, claimed_at, finished_at)
SELECT 'pay_MPLANOLD' || lpad(g::text, 18, '0'), st, 1, now() - interval '2 days', now() - interval '2 days',
	   now() - interval '2 days'
  FROM generate_series(1, 20000) g, unnest(ARRAY['PROCESS_PAYMENT', 'POST_PROCESS', 'CREATE_INVOICE']) st;
SELECT count(payflow.submit('mp-new-' || n, '{"amount": 1}')) AS in_flight FROM generate_series(1, 100) n;
ANALYZE payflow.operations;
ANALYZE payflow.step_results;
CREATE FUNCTION pg_temp.plan_of(p_query text) RETURNS text
	LANGUAGE plpgsql AS $$
DECLARE
	l text;
	r text := '';
BEGIN
	FOR l IN EXECUTE 'EXPLAIN (COSTS OFF) ' || p_query LOOP
		r := r || l || E'\n';
	END LOOP;
	RETURN r;
END
$$;
SET LOCAL search_path = pg_catalog, payflow;
SELECT pg_temp.plan_of(prosrc) AS plan FROM pg_proc WHERE oid = 'payflow.metrics()'::regprocedure \gset
-- (the 20,000 are in step_results' default partition: their ids are of no
-- day's; a day's partition made by an earlier test's purge may be scanned)
SELECT :'plan' !~ 'Seq Scan on step_results_default' AS no_scan_of_steps,
	   :'plan' !~ 'Parallel' AS no_parallel_scan,
	   (SELECT count(*) FROM regexp_matches(:'plan', 'Index Scan using step_results_default_pkey on step_results_default', 'g')) = 1
		   AS steps_by_their_key;
ROLLBACK;
