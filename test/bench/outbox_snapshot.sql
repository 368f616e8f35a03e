-- test/bench/step_engine.sh's driver for the relay's claim while another
-- session holds a snapshot open (a report, pg_dump): :n operations are
-- submitted and drained twice, 10 events a claim as a relay with a trickle
-- claims, and the second drain is timed.  With :held the bench holds a
-- REPEATABLE READ snapshot in another session meanwhile, so the acked rows
-- can be neither pruned nor marked dead in the index: a claim that starts
-- at the front of the outbox fetches every one of them again.  Prints the
-- second drain's milliseconds (wall clock; this backend is the only one
-- working).
CREATE OR REPLACE PROCEDURE pg_temp.submit(p_run text, p_n integer)
	LANGUAGE plpgsql
	AS $$
BEGIN
	FOR v_i IN 1 .. p_n LOOP
		PERFORM payflow.submit(p_run || '-' || v_i, '{"amount": 1}');
		COMMIT;
	END LOOP;
END
$$;
CREATE OR REPLACE PROCEDURE pg_temp.drain_by_10()
	LANGUAGE plpgsql
	AS $$
DECLARE
	v_ids uuid[];
BEGIN
	LOOP
		SELECT array_agg(c.event_id) INTO v_ids FROM payflow.outbox_claim(10, 'bench-relay', 30) c;
		EXIT WHEN v_ids IS NULL;
		PERFORM payflow.outbox_ack(v_ids, NULL, 'bench-relay');
		COMMIT;
	END LOOP;
END
$$;

CALL pg_temp.submit(:'run' || '-a', :n);
CALL pg_temp.drain_by_10();
CALL pg_temp.submit(:'run' || '-b', :n);
SELECT clock_timestamp() AS t0 \gset
CALL pg_temp.drain_by_10();
SELECT round(extract(epoch FROM clock_timestamp() - :'t0'::timestamptz) * 1000, 1);
