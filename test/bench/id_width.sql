-- test/bench/id_width.sql: the rows one operation writes, keyed by the
-- operation's id as text ('pay_' + 26 characters, today) or as uuid (the
-- same 128 bits), in schemas id_text and id_uuid (made by id_width.sh).
-- psql variables: kind (text or uuid), n (operations), run (a label).
-- Prints "<WAL bytes> <operations>".
SET search_path = id_:kind;
CHECKPOINT;
SELECT pg_current_wal_insert_lsn() AS start_lsn \gset
DO $$
DECLARE
	v_id id_key;
BEGIN
	FOR i IN 1 .. current_setting('bench.n')::integer LOOP
		v_id := new_id();
		INSERT INTO operations (id, tenant, payment_id, idempotency_key, request_ref)
		VALUES (v_id, 't', current_setting('bench.run') || '-' || i, current_setting('bench.run') || '-' || i,
				jsonb_build_object('store', 'pg', 'key', 'payments/' || v_id || '/request.json',
								   'checksum', 'sha256:' || repeat('ab', 32), 'size', 120));
		INSERT INTO history (operation_id, to_status) SELECT v_id, s FROM unnest(ARRAY['PENDING', 'P1', 'P2', 'P3', 'P4', 'COMPLETED']) s;
		INSERT INTO steps (operation_id, step_name) SELECT v_id, s FROM unnest(ARRAY['PROCESS_PAYMENT', 'POST_PROCESS', 'CREATE_INVOICE']) s;
		INSERT INTO events (operation_id) SELECT v_id FROM generate_series(1, 4);
		UPDATE operations SET status = 'P1' WHERE id = v_id;
		UPDATE operations SET status = 'P3' WHERE id = v_id;
		UPDATE operations SET status = 'COMPLETED', terminal_at = now() WHERE id = v_id;
	END LOOP;
END
$$;
SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), :'start_lsn')::bigint || ' ' || current_setting('bench.n');
