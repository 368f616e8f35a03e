-- test/bench/step_limit_claims.sh's driver: N operations submitted (not
-- measured), then their PROCESS_PAYMENT steps claimed and completed, one
-- COMMIT per call as the workers make them: claim_step + complete_step per
-- operation (mode 'single'), or claim_steps + complete_steps of 10 (mode
-- 'batch').  The backend's CPU (from /proc/self/stat: this backend does all
-- the work) of the claims and of the completions, apart.  Prints one line:
-- claim_cpu_ms complete_cpu_ms claimed.
\ir cpu_ticks.sql

CREATE OR REPLACE PROCEDURE pg_temp.bench_claims(p_run text, p_n integer, p_mode text, INOUT claim_ticks bigint,
												 INOUT complete_ticks bigint, INOUT claimed integer)
	LANGUAGE plpgsql
	AS $$
DECLARE
	v_ids text[];
	v_chunk text[];
	v_t bigint;
	v_i integer;
BEGIN
	FOR v_i IN 1 .. p_n LOOP
		PERFORM payflow.submit(p_run || '-' || v_i, jsonb_build_object('amount', v_i, 'currency', 'EUR'));
		COMMIT;
	END LOOP;
	SELECT array_agg(o.id ORDER BY o.id) INTO v_ids FROM payflow.operations o WHERE o.payment_id LIKE p_run || '-%';
	claim_ticks := 0;
	complete_ticks := 0;
	claimed := 0;
	FOR v_i IN 1 .. cardinality(v_ids) BY CASE p_mode WHEN 'single' THEN 1 ELSE 10 END LOOP
		v_chunk := v_ids[v_i : v_i + CASE p_mode WHEN 'single' THEN 0 ELSE 9 END];
		v_t := pg_temp.bench_cpu_ticks();
		IF p_mode = 'single' THEN
			claimed := claimed + (payflow.claim_step(v_chunk[1], 'PROCESS_PAYMENT', 'bench-worker', 300)
								  ->> 'action' = 'run')::integer;
		ELSE
			claimed := claimed + (SELECT count(*) FROM payflow.claim_steps('PROCESS_PAYMENT', 'bench-worker', v_chunk, 300) c
								   WHERE c.answer ->> 'action' = 'run');
		END IF;
		COMMIT;
		claim_ticks := claim_ticks + pg_temp.bench_cpu_ticks() - v_t;
		v_t := pg_temp.bench_cpu_ticks();
		IF p_mode = 'single' THEN
			PERFORM payflow.complete_step(v_chunk[1], 'PROCESS_PAYMENT', 'bench-worker', '{"ok": true}');
		ELSE
			PERFORM count(*) FROM payflow.complete_steps('PROCESS_PAYMENT', 'bench-worker',
				(SELECT jsonb_agg(jsonb_build_object('operationId', id, 'result', '{"ok": true}'::jsonb))
				   FROM unnest(v_chunk) id));
		END IF;
		COMMIT;
		complete_ticks := complete_ticks + pg_temp.bench_cpu_ticks() - v_t;
	END LOOP;
END
$$;

CALL pg_temp.bench_claims(:'run', :n, :'mode', 0, 0, 0);
