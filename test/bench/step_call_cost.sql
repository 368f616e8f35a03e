-- test/bench/step_engine.sh's driver for a step call's fixed cost: N
-- operations submitted, then claimed and completed (PROCESS_PAYMENT) in
-- calls of BATCH items, one COMMIT per call as a worker makes them.
-- Prints one line, "claim|complete": the backend's CPU (/proc/self/stat,
-- this backend does all the work) a claim_steps call and a complete_steps
-- call, in us (/proc/self/schedstat: nanoseconds, cpu_ns.sql).  Run
-- with BATCH 1 and 10, the difference tells a call's cost from an item's:
-- at the batch sizes the workers gather (about five), a call's fixed cost
-- (its commit, the executor start-up of its statements) is most of it.
\ir cpu_ns.sql

CREATE OR REPLACE PROCEDURE pg_temp.bench_call_cost(p_run text, p_n integer, p_batch integer,
													 INOUT claim_us numeric DEFAULT NULL,
													 INOUT complete_us numeric DEFAULT NULL)
	LANGUAGE plpgsql
	AS $$
DECLARE
	v_ids text[] := '{}';
	v_chunk text[];
	v_t bigint;
	v_claim bigint := 0;
	v_complete bigint := 0;
	v_calls integer := 0;
BEGIN
	FOR v_i IN 1 .. p_n LOOP
		v_ids := v_ids || payflow.submit(p_run || '-' || v_i, jsonb_build_object('amount', v_i, 'currency', 'EUR'));
		COMMIT;
	END LOOP;
	v_ids := ARRAY(SELECT x FROM unnest(v_ids) x ORDER BY x);
	-- all the claims, then all the completions: each loop timed whole
	v_t := pg_temp.bench_cpu_ns();
	FOR v_i IN 1 .. p_n BY p_batch LOOP
		PERFORM count(*) FROM payflow.claim_steps('PROCESS_PAYMENT', 'bench-worker', v_ids[v_i : v_i + p_batch - 1], 300);
		COMMIT;
		v_calls := v_calls + 1;
	END LOOP;
	v_claim := pg_temp.bench_cpu_ns() - v_t;
	v_t := pg_temp.bench_cpu_ns();
	FOR v_i IN 1 .. p_n BY p_batch LOOP
		v_chunk := v_ids[v_i : v_i + p_batch - 1];
		PERFORM count(*) FROM payflow.complete_steps('PROCESS_PAYMENT', 'bench-worker',
			(SELECT jsonb_agg(jsonb_build_object('operationId', id, 'result', '{"ok": true, "ref": "r-1"}'::jsonb))
			   FROM unnest(v_chunk) id));
		COMMIT;
	END LOOP;
	v_complete := pg_temp.bench_cpu_ns() - v_t;
	claim_us := round(v_claim / 1e3 / v_calls);
	complete_us := round(v_complete / 1e3 / v_calls);
END
$$;

CALL pg_temp.bench_call_cost(:'run', :n, :batch);
