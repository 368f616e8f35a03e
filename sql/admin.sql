-- cancel, replay, purge, schedule_purge, metrics, create_api_key.
SET payflow.retry_jitter = 0;

-- cancel: only while PENDING
SELECT payflow.submit('adm-1', '{}') AS op1 \gset
SELECT payflow.cancel(:'op1', 'customer changed their mind') AS cancelled;
SELECT status, error FROM payflow.operations WHERE id = :'op1';
SELECT s.status AS step_status FROM payflow.steps s WHERE operation_id = :'op1';
SELECT payflow.cancel(:'op1') AS again;
SELECT c ->> 'action' AS action, c ->> 'reason' AS reason FROM payflow.claim_step(:'op1', 'PROCESS_PAYMENT', 'w') c;
SELECT to_status, reason FROM payflow.history(:'op1') ORDER BY at DESC LIMIT 1;
SELECT payflow.submit('adm-2', '{}') AS op2 \gset
SELECT c ->> 'action' AS action FROM payflow.claim_step(:'op2', 'PROCESS_PAYMENT', 'w') c;
SELECT * FROM pf_try(format($$SELECT payflow.cancel(%L)$$, :'op2'));
SELECT * FROM pf_try($$SELECT payflow.cancel('pay_00000000000000000000000000')$$);

-- replay: a FAILED operation re-runs its failed step, same idempotency key
SELECT f ->> 'action' AS action FROM payflow.fail_step(:'op2', 'PROCESS_PAYMENT', 'w', '{"code": "DECLINED"}', false) f;
SELECT count(*) FILTER (WHERE replayed_at IS NULL) AS open_dead_letters FROM payflow.dead_letters WHERE operation_id = :'op2';
TRUNCATE payflow.outbox;
SELECT payflow.replay(:'op2') AS replayed;
SELECT status, error, terminal_at IS NULL AS not_terminal FROM payflow.operations WHERE id = :'op2';
SELECT status, attempt FROM payflow.steps WHERE operation_id = :'op2';
SELECT count(*) FILTER (WHERE replayed_at IS NULL) AS open_dead_letters FROM payflow.dead_letters WHERE operation_id = :'op2';
SELECT event_type FROM payflow.outbox WHERE operation_id = :'op2';
SELECT c ->> 'action' AS action, (c ->> 'attempt')::int AS attempt,
       c ->> 'idempotencyKey' = :'op2' || ':process_payment' AS same_key
  FROM payflow.claim_step(:'op2', 'PROCESS_PAYMENT', 'w2') c;
SELECT from_status, to_status, reason FROM payflow.history(:'op2');
SELECT payflow.replay(:'op2') AS not_failed_any_more;

-- replay from a later step
SELECT c ->> 'status' AS status FROM payflow.complete_step(:'op2', 'PROCESS_PAYMENT', 'w2', '{"tx": 1}') c;
SELECT c ->> 'action' AS action FROM payflow.claim_step(:'op2', 'POST_PROCESS', 'pp') c;
SELECT f ->> 'action' AS action FROM payflow.fail_step(:'op2', 'POST_PROCESS', 'pp', '{"code": "bad_mapping"}', false) f;
SELECT payflow.replay(:'op2') AS replayed;
SELECT status, current_step FROM payflow.operations WHERE id = :'op2';

-- purge: bounded, by retention; FAILED kept longer than COMPLETED
SELECT payflow.submit('adm-3', '{}') AS op3 \gset
SELECT payflow.claim_step(:'op3', 'PROCESS_PAYMENT', 'w') IS NOT NULL AS claimed;
SELECT payflow.fail_step(:'op3', 'PROCESS_PAYMENT', 'w', '{"code": "X"}', false) IS NOT NULL AS failed;
-- op1 is CANCELLED, op3 FAILED; age both by two days
UPDATE payflow.operations SET terminal_at = now() - interval '2 days' WHERE id IN (:'op1', :'op3');
SELECT p ->> 'payloads' AS payloads, p ->> 'operations' AS operations FROM payflow.purge() p;
-- the cancelled one's payloads are purged: payload_get no longer has them
SELECT sqlstate AS cancelled_one_lost_its_payload
  FROM pf_try(format($$SELECT payflow.payload_get(%L)$$, (SELECT payflow._request_ref(id, request_ref, request_mac, request_size) FROM payflow.operations WHERE id = :'op1')));
SELECT count(*) AS failed_payload_kept_for_replay FROM payflow.payloads WHERE payflow._payload_operation(key) = :'op3';
SELECT status, payflow.status(id) ->> 'status' AS still_visible FROM payflow.operations WHERE id = :'op1';
UPDATE payflow.operations SET terminal_at = now() - interval '8 days' WHERE id IN (:'op1', :'op3');
SELECT p ->> 'operations' AS operations FROM payflow.purge() p;
SELECT id = :'op3' AS failed_kept FROM payflow.operations WHERE id IN (:'op1', :'op3');
SELECT count(*) AS history_left FROM payflow.operation_history WHERE operation_id = :'op1';
SELECT count(*) AS steps_left FROM payflow.steps WHERE operation_id = :'op1';
UPDATE payflow.operations SET terminal_at = now() - interval '31 days' WHERE id = :'op3';
SELECT p ->> 'operations' AS operations FROM payflow.purge() p;
SELECT count(*) AS gone FROM payflow.operations WHERE id = :'op3';
SELECT count(*) AS dead_letters_gone FROM payflow.dead_letters WHERE operation_id = :'op3';
SELECT count(*) AS payloads_gone FROM payflow.payloads p JOIN payflow.operations o ON o.id = payflow._payload_operation(p.key)
 WHERE payflow._payload_operation(p.key) = :'op3';	-- its rows in today's partitions go with the day (partitions.sql)
SELECT * FROM pf_try(format($$SELECT payflow.status(%L)$$, :'op3'));
-- batches are bounded and say when to come back
SELECT count(payflow.cancel(payflow.submit('adm-bulk-' || n, '{}'))) AS cancelled FROM generate_series(1, 5) n;
UPDATE payflow.operations SET terminal_at = now() - interval '8 days' WHERE payment_id LIKE 'adm-bulk-%';
SELECT p ->> 'operations' AS operations, p ->> 'more' AS more FROM payflow.purge(3) p;
SELECT p ->> 'operations' AS operations, p ->> 'more' AS more FROM payflow.purge(3) p;
-- published log and consumed ids
WITH logged AS (
	INSERT INTO payflow.outbox_events (seq, event_id, operation_id, event_type, destination, message_group_id, body)
	SELECT nextval('payflow.outbox_seq_seq'), gen_random_uuid(), 'x', 'E', 'd', 'g', '{}' FROM generate_series(1, 2)
	RETURNING seq
)
INSERT INTO payflow.outbox_batches (published_at, first_seq, last_seq, seqs, message_ids)
SELECT CASE WHEN seq = min(seq) OVER () THEN now() - interval '2 hours' ELSE now() END, seq, seq, ARRAY[seq], '{NULL}'
  FROM logged;
INSERT INTO payflow.consumed_events (consumer, event_id, consumed_at)
VALUES ('c', gen_random_uuid(), now() - interval '15 days'), ('c', gen_random_uuid(), now());
SELECT p ->> 'publishedEvents' AS published, p ->> 'consumedEvents' AS consumed FROM payflow.purge() p;
SELECT * FROM pf_try($$SELECT payflow.purge(0)$$);

-- schedule_purge and schedule_scheduler need pg_cron: 0A000 with a hint
-- where it is missing (the C flavour's test database), a job where it is
-- there (the C-free flavour needs it), removed again here.
SELECT bool_and((sqlstate = '0A000' AND message = 'pg_cron is not installed')
				= (to_regnamespace('cron') IS NULL)) AS needs_pg_cron
  FROM (SELECT * FROM pf_try($$SELECT payflow.schedule_purge()$$)
		UNION ALL
		SELECT * FROM pf_try($$SELECT payflow.schedule_scheduler()$$)) t;
SELECT * FROM pf_try($$SELECT payflow.schedule_purge('')$$);
DO $$
BEGIN
	IF to_regnamespace('cron') IS NOT NULL THEN
		PERFORM cron.unschedule('payflow-purge');
		PERFORM cron.unschedule('payflow-scheduler');
	END IF;
END
$$;

-- metrics
SELECT payflow.submit('adm-m', '{}') IS NOT NULL AS submitted;
SELECT jsonb_object_keys(payflow.metrics()) AS key ORDER BY 1;
SELECT (m -> 'operations' -> 'PENDING' ->> 'count')::int > 0 AS pending_counted,
       (m -> 'outbox' ->> 'backlog')::int > 0 AS backlog_counted,
       m -> 'steps' ? 'PROCESS_PAYMENT' AS steps_listed,
       (m -> 'deadLetters' ->> 'open')::int >= 0 AS dead_letters_counted
  FROM payflow.metrics() m;
-- operations: those in flight (exact, by status); finishedLastHour: the ended ones
SELECT NOT (m -> 'operations' ?| ARRAY['COMPLETED', 'FAILED', 'CANCELLED']) AS only_in_flight,
       (m -> 'operations' -> 'PENDING' ->> 'count')::int
         = (SELECT count(*) FROM payflow.operations WHERE status = 'PENDING') AS pending_exact,
       m -> 'finishedLastHour'
         = (SELECT coalesce(jsonb_object_agg(status, n), '{}') FROM (SELECT status, count(*) AS n FROM payflow.operations
                                                                     WHERE terminal_at > now() - interval '1 hour' GROUP BY status) f) AS finished_exact,
       (SELECT sum((v ->> 'count')::int) FROM jsonb_each(m -> 'operations') e(k, v))
         = (SELECT count(*) FROM payflow.operations WHERE terminal_at IS NULL) AS in_flight_exact
  FROM payflow.metrics() m;

-- API keys: the secret once, only its hash stored
SELECT payflow.create_api_key('tenant-a', 'ci') AS secret \gset
SELECT :'secret' ~ '^pfk_[0-9a-f]{64}$' AS secret_format;
SELECT tenant, name, key_hash = sha256(convert_to(:'secret', 'UTF8')) AS hash_stored,
       NOT EXISTS (SELECT FROM payflow.api_keys WHERE key_hash::text LIKE '%' || :'secret' || '%') AS no_plaintext
  FROM payflow.api_keys;
SELECT * FROM pf_try($$SELECT payflow.create_api_key('')$$);
