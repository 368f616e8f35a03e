-- pg_temp.bench_submit(run, n): n operations submitted one by one, a
-- COMMIT each, their payment ids run-1 .. run-n.  Included by
-- outbox_vacuum.sql and outbox_snapshot.sql.
CREATE OR REPLACE PROCEDURE pg_temp.bench_submit(p_run text, p_n integer)
	LANGUAGE plpgsql
	AS $$
BEGIN
	FOR v_i IN 1 .. p_n LOOP
		PERFORM payflow.submit(p_run || '-' || v_i, '{"amount": 1}');
		COMMIT;
	END LOOP;
END
$$;
