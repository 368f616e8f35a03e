-- One round of test/bench/outbox_log.sh: :n events through the outbox as
-- it is (mode 'now': payflow._outbox_write_all, then outbox_claim and
-- outbox_ack of :batch at a time) or through the emission log storage v2
-- phase 1 plans (mode 'log', docs/design.md: an insert-only row per event,
-- the body rendered at read from the operation's write-once fields, one
-- row per batch sent and one cursor update).  Events are written :batch to
-- a transaction, as a completion batch writes them.  Prints
-- "write_wal relay_wal relay_ms" for the round.
\set ON_ERROR_STOP 1
SET synchronous_commit = on;
SELECT pg_current_wal_insert_lsn() AS lsn0 \gset

DO $$
DECLARE
	v_n integer := current_setting('bench.n')::integer;
	v_batch integer := current_setting('bench.batch')::integer;
	v_ids uuid[];
BEGIN
	FOR i IN 0 .. v_n / v_batch - 1 LOOP
		SELECT array_agg(gen_random_uuid()) INTO v_ids FROM generate_series(1, v_batch);
		IF current_setting('bench.mode') = 'now' THEN
			PERFORM payflow._outbox_write_all(
				v_ids,
				array_agg('pay_bench' || lpad((i * v_batch + g)::text, 21, '0')),
				array_agg('bench-' || (i * v_batch + g)),
				array_fill('PaymentRequested'::text, ARRAY[v_batch]),
				array_fill('payment-requests'::text, ARRAY[v_batch]),
				array_agg(payflow._event_body(v_ids[g], 'pay_bench' || lpad((i * v_batch + g)::text, 21, '0'),
											  'bench-' || (i * v_batch + g), 'corr-' || (i * v_batch + g),
											  'PaymentRequested', 1,
											  jsonb_build_object('payload', jsonb_build_object(
												  'store', 'pg', 'key', 'payments/pay_x/request.json',
												  'checksum', 'sha256:' || repeat('ab', 32), 'size', 120)))))
			  FROM generate_series(1, v_batch) g;
		ELSE
			INSERT INTO bench_log.emissions (lane, operation_id, event_id, kind, attempt)
			SELECT (i * v_batch + g) % 4, 'pay_bench' || lpad((i * v_batch + g)::text, 21, '0'), v_ids[g], 1, 1
			  FROM generate_series(1, v_batch) g;
		END IF;
		COMMIT;
	END LOOP;
END
$$;

SELECT pg_current_wal_insert_lsn() AS lsn1, clock_timestamp() AS t1 \gset

DO $$
DECLARE
	v_batch integer := current_setting('bench.batch')::integer;
	v_ids uuid[];
	v_seqs bigint[];
	v_bodies text[];
	v_cursor bigint;
BEGIN
	IF current_setting('bench.mode') = 'now' THEN
		LOOP
			SELECT array_agg(c.event_id), array_agg(c.body) INTO v_ids, v_bodies
			  FROM payflow.outbox_claim(v_batch, 'bench-relay', 30) c;
			EXIT WHEN v_ids IS NULL;
			PERFORM payflow.outbox_ack(v_ids, (SELECT array_agg('m-' || x) FROM unnest(v_ids) x), 'bench-relay');
			COMMIT;
		END LOOP;
	ELSE
		FOR v_lane IN 0 .. 3 LOOP
			LOOP
				SELECT l.cursor INTO v_cursor FROM bench_log.lanes l WHERE l.lane = v_lane;
				-- the read: the body rendered from the operation's write-once fields
				SELECT array_agg(e.seq ORDER BY e.seq),
					   array_agg(jsonb_build_object('eventType', 'PaymentRequested', 'eventVersion', 1,
													'eventId', e.event_id, 'operationId', e.operation_id,
													'paymentId', o.payment_id, 'attempt', e.attempt,
													'correlationId', o.correlation_id,
													'createdAt', e.created_at,
													'payload', o.request_ref)::text ORDER BY e.seq)
				  INTO v_seqs, v_bodies
				  FROM (SELECT * FROM bench_log.emissions x
						 WHERE x.lane = v_lane AND x.seq > v_cursor ORDER BY x.seq LIMIT v_batch) e
				  JOIN bench_log.ops o ON o.id = e.operation_id;
				EXIT WHEN v_seqs IS NULL;
				-- the advance: one row for the batch sent, one update of the lane
				INSERT INTO bench_log.batches (lane, seqs, message_ids)
				VALUES (v_lane, v_seqs, (SELECT array_agg('m-' || x) FROM unnest(v_seqs) x));
				UPDATE bench_log.lanes SET cursor = v_seqs[cardinality(v_seqs)], moved_at = now() WHERE lane = v_lane;
				COMMIT;
			END LOOP;
		END LOOP;
	END IF;
END
$$;

SELECT pg_wal_lsn_diff(:'lsn1', :'lsn0')::bigint || ' ' ||
	   pg_wal_lsn_diff(pg_current_wal_insert_lsn(), :'lsn1')::bigint || ' ' ||
	   round(extract(epoch FROM clock_timestamp() - :'t1'::timestamptz) * 1000);
