-- pg_temp.bench_relay_drain([batch]): what a relay does to the database,
-- without SQS: claim 100 events (or batch), ack them, commit, until the
-- outbox is empty.  Included by step_engine.sql, outbox_vacuum.sql and
-- outbox_snapshot.sql.
CREATE OR REPLACE PROCEDURE pg_temp.bench_relay_drain(p_batch integer DEFAULT 100)
	LANGUAGE plpgsql
	AS $$
DECLARE
	v_ids uuid[];
BEGIN
	LOOP
		SELECT array_agg(c.event_id) INTO v_ids FROM payflow.outbox_claim(p_batch, 'bench-relay', 30) c;
		EXIT WHEN v_ids IS NULL;
		PERFORM payflow.outbox_ack(v_ids, NULL, 'bench-relay');
		COMMIT;
	END LOOP;
END
$$;
