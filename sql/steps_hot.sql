-- The step engine's common path writes as little as it can: the open step
-- is part of its operation's row, and a claim, a heartbeat, a saved
-- reference and a completion that opens the next step are each one HOT
-- update of that row (no index entry, the row logged as a diff), because
-- no index of payflow.operations names a column they change; only the last
-- completion, which sets the indexed terminal_at, is not.  A completed step
-- is one insert into step_results.  The counters of this transaction
-- (pg_stat_xact_user_tables) show it.
BEGIN;
SELECT count(payflow.submit('hot-' || n, '{"amount": 1}')) AS submitted FROM generate_series(1, 3) n;
SELECT array_agg(id ORDER BY id) AS ids FROM payflow.operations WHERE payment_id LIKE 'hot-%' \gset
SELECT coalesce(n_tup_upd, 0) AS upd0, coalesce(n_tup_hot_upd, 0) AS hot0
  FROM (SELECT 1) one LEFT JOIN pg_stat_xact_user_tables ON relid = 'payflow.operations'::regclass \gset
SELECT count(*) FILTER (WHERE answer ->> 'action' = 'run') AS claimed
  FROM payflow.claim_steps('PROCESS_PAYMENT', 'w-hot', :'ids'::text[], 60);
SELECT payflow.heartbeat(id, 'PROCESS_PAYMENT', 'w-hot', 120) AS renewed
  FROM unnest(:'ids'::text[]) id ORDER BY id LIMIT 1;
SELECT payflow.save_step_ref(id, 'PROCESS_PAYMENT', 'w-hot', 'job-1') AS saved
  FROM unnest(:'ids'::text[]) id ORDER BY id LIMIT 1;
SELECT n_tup_upd - :upd0 AS updates, n_tup_hot_upd - :hot0 AS hot_updates FROM pg_stat_xact_user_tables
 WHERE relid = 'payflow.operations'::regclass;
SELECT n_tup_upd AS upd1, n_tup_hot_upd AS hot1 FROM pg_stat_xact_user_tables
 WHERE relid = 'payflow.operations'::regclass \gset
SELECT count(*) FILTER (WHERE answer ->> 'action' = 'completed') AS completed
  FROM payflow.complete_steps('PROCESS_PAYMENT', 'w-hot',
	   (SELECT jsonb_agg(jsonb_build_object('operationId', id, 'result', '{"ok": true}'::jsonb))
		  FROM unnest(:'ids'::text[]) id));
SELECT n_tup_upd - :upd1 AS updates, n_tup_hot_upd - :hot1 AS hot_updates FROM pg_stat_xact_user_tables
 WHERE relid = 'payflow.operations'::regclass;
SELECT sum(n_tup_ins) AS step_results_written FROM pg_stat_xact_user_tables	-- in its partitions
 WHERE relid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = 'payflow.step_results'::regclass);
-- the open steps are the next ones
SELECT step_name, status, finished_at IS NULL AS open, count(*)
  FROM payflow.steps WHERE operation_id = ANY (:'ids'::text[]) GROUP BY 1, 2, 3 ORDER BY 1;
ROLLBACK;
