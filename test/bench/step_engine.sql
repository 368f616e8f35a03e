-- test/bench/step_engine.sh's driver: the database work of N operations
-- from submit to COMPLETED, one COMMIT per call as the edge processes make
-- them, with no-op steps and a relay that claims and acks 100 events at a
-- time.  mode 'single': claim_step, payload_get, complete_step per step
-- (the calls of payflow-worker 0.3); mode 'batch': claim_steps and
-- complete_steps of BATCH items (the calls of payflow-worker 0.4, which
-- needs no payload_get).  Prints one line: cpu_ms commits wal_bytes, the
-- backend's own CPU (from /proc/self/stat: this backend does all the work)
-- and the database's commits and WAL from the statistics.
\ir relay_drain.sql

CREATE OR REPLACE PROCEDURE pg_temp.bench_run(p_run text, p_n integer, p_mode text, p_batch integer)
	LANGUAGE plpgsql
	AS $$
DECLARE
	v_ids text[];
	v_chunk text[];
	v_answer jsonb;
	v_step text;
	v_i integer;
BEGIN
	-- the run's operations, as a worker knows them from its messages: no
	-- query of the driver's own over every retained operation (retained.sh)
	v_ids := '{}';
	FOR v_i IN 1 .. p_n LOOP
		v_ids := v_ids || payflow.submit(p_run || '-' || v_i, jsonb_build_object('amount', v_i, 'currency', 'EUR'));
		COMMIT;
	END LOOP;
	v_ids := ARRAY(SELECT x FROM unnest(v_ids) x ORDER BY x);
	CALL pg_temp.bench_relay_drain();
	-- every step of every operation succeeds: all are at each step in turn
	FOREACH v_step IN ARRAY ARRAY['PROCESS_PAYMENT', 'POST_PROCESS', 'CREATE_INVOICE'] LOOP
		IF p_mode = 'single' THEN
			FOR v_i IN 1 .. cardinality(v_ids) LOOP
				v_answer := payflow.claim_step(v_ids[v_i], v_step, 'bench-worker', 300);
				PERFORM payflow.payload_get(v_answer -> 'input');
				COMMIT;
				PERFORM payflow.complete_step(v_ids[v_i], v_step, 'bench-worker', '{"ok": true, "ref": "r-1"}');
				COMMIT;
			END LOOP;
		ELSE
			FOR v_i IN 1 .. cardinality(v_ids) BY p_batch LOOP
				v_chunk := v_ids[v_i : v_i + p_batch - 1];
				PERFORM count(*) FROM payflow.claim_steps(v_step, 'bench-worker', v_chunk, 300);
				COMMIT;
				PERFORM count(*) FROM payflow.complete_steps(v_step, 'bench-worker',
					(SELECT jsonb_agg(jsonb_build_object('operationId', id, 'result', '{"ok": true, "ref": "r-1"}'::jsonb))
					   FROM unnest(v_chunk) id));
				COMMIT;
			END LOOP;
		END IF;
		CALL pg_temp.bench_relay_drain();
	END LOOP;
END
$$;

\ir cpu_ticks.sql

SELECT pg_temp.bench_cpu_ticks() AS cpu0, pg_current_wal_lsn() AS wal0,
	   (SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()) AS commits0 \gset
CALL pg_temp.bench_run(:'run', :n, :'mode', :batch);
SELECT pg_stat_force_next_flush();
SELECT pg_sleep(0.2);
SELECT (pg_temp.bench_cpu_ticks() - :cpu0) * 1000.0 / :ticks AS cpu_ms,
	   (SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()) - :commits0 AS commits,
	   pg_current_wal_lsn() - :'wal0'::pg_lsn AS wal \gset
-- (counted after the figures: a scan of every retained operation)
SELECT (SELECT count(*) FROM payflow.operations WHERE payment_id LIKE :'run' || '-%' AND status = 'COMPLETED') AS done \gset
SELECT format('%s %s %s %s', :cpu_ms, :commits, :wal, :done);
