-- outbox_claim / outbox_ack / outbox_nack: SKIP LOCKED batches, claim
-- leases, nack backoff, and per-group order.
TRUNCATE payflow.outbox, payflow.outbox_events, payflow.outbox_batches;
SELECT count(payflow.submit('ob-' || n, jsonb_build_object('n', n))) AS submitted FROM generate_series(1, 5) n;

-- a batch: at most max_events, oldest first, each with its dedup id
SELECT count(*) AS claimed, bool_and(dedup_id = event_id::text) AS dedup_is_event_id,
       bool_and(message_group_id LIKE 'ob-%') AS group_is_payment,
       bool_and(body::jsonb ->> 'eventId' = event_id::text) AS body_ok,
       bool_and(attributes = jsonb_strip_nulls(jsonb_build_object(
                    'eventType', body::jsonb ->> 'eventType', 'operationId', body::jsonb ->> 'operationId',
                    'correlationId', body::jsonb ->> 'correlationId',
                    'traceparent', (SELECT payflow._traceparent_text(o.traceparent) FROM payflow.operations o WHERE o.id = body::jsonb ->> 'operationId')))
                AND attributes ->> 'eventType' = 'PaymentRequested') AS attributes_ok
  FROM payflow.outbox_claim(3, 'relay-1');
-- claimed rows are not handed out again while the claim lasts
SELECT count(*) AS second_relay_gets FROM payflow.outbox_claim(10, 'relay-2');
SELECT count(*) AS nothing_left FROM payflow.outbox_claim(10, 'relay-3');

-- only the relay holding the claim may ack or nack (another login could
-- otherwise ack events that were never sent)
SELECT payflow.outbox_ack(array_agg(event_id), NULL, 'relay-2') AS acked_by_another_relay,
       bool_and(payflow.outbox_nack(event_id, 'x', 'relay-2')) AS nacked_by_another_relay
  FROM payflow.outbox WHERE claimed_by = 'relay-1';
SELECT count(*) AS still_claimed_by_relay_1 FROM payflow.outbox WHERE claimed_by = 'relay-1' AND last_error IS NULL;
-- ack removes them and logs the message ids
SELECT payflow.outbox_ack(array_agg(event_id), array_agg('msg-' || seq), 'relay-1') AS acked
  FROM payflow.outbox WHERE claimed_by = 'relay-1';
SELECT count(*) AS left_in_outbox FROM payflow.outbox;
SELECT count(*) AS logged, bool_and(message_id LIKE 'msg-%') AS message_ids
  FROM payflow.outbox_published;
SELECT payflow.outbox_ack(array_agg(event_id), NULL, 'relay-2') AS acked_without_message_ids
  FROM payflow.outbox WHERE claimed_by = 'relay-2';
-- acking again is harmless
SELECT payflow.outbox_ack(ARRAY(SELECT event_id FROM payflow.outbox_published), NULL, 'relay-1') AS acked_twice;

-- a relay that died: its claim expires and the rows come back
SELECT payflow.submit('ob-dead', '{}') IS NOT NULL AS submitted;
SELECT count(*) AS claimed_by_dying_relay FROM payflow.outbox_claim(10, 'relay-dies', 30);
SELECT count(*) AS while_claimed FROM payflow.outbox_claim(10, 'relay-4');
UPDATE payflow.outbox SET claim_expires_at = now() - interval '1 second';
SELECT count(*) AS after_expiry, min(o.attempts) AS attempts
  FROM payflow.outbox_claim(10, 'relay-4') c JOIN payflow.outbox o USING (event_id);

-- nack: available again after a backoff, the error kept
SELECT payflow.outbox_nack(event_id, 'ServiceUnavailable: try later', claimed_by) AS nacked FROM payflow.outbox;
SELECT claimed_by IS NULL AS unclaimed, available_at > now() AS backed_off,
       available_at <= now() + interval '3 seconds' AS short_first_backoff, last_error
  FROM payflow.outbox;
SELECT count(*) AS during_backoff FROM payflow.outbox_claim(10, 'relay-4');
UPDATE payflow.outbox SET available_at = now() - interval '1 second';
SELECT count(*) AS after_backoff FROM payflow.outbox_claim(10, 'relay-4');
SELECT payflow.outbox_nack('00000000-0000-0000-0000-000000000000', 'x', 'relay-4') AS unknown_event;
TRUNCATE payflow.outbox;

-- per-group order: a later event of a payment is never handed out while an
-- earlier one is unacked, while other payments flow on
INSERT INTO payflow.outbox (event_id, operation_id, event_type, destination, message_group_id, body)
SELECT gen_random_uuid(), 'op', 'E' || n, 'payment-requests', g, jsonb_build_object('n', n)
  FROM (VALUES (1, 'A'), (2, 'A'), (3, 'B'), (4, 'A'), (5, 'C')) v(n, g);
SELECT message_group_id, body::jsonb ->> 'n' AS n FROM payflow.outbox_claim(10, 'r1') ORDER BY 2;
SELECT count(*) AS blocked_behind_unacked FROM payflow.outbox_claim(10, 'r2');
-- a nacked head still blocks its group (order over speed), not the others
SELECT payflow.outbox_nack(event_id, 'boom', claimed_by) FROM payflow.outbox WHERE body ->> 'n' = '1';
SELECT payflow.outbox_ack(array_agg(event_id), NULL, max(claimed_by)) FROM payflow.outbox WHERE body ->> 'n' IN ('3', '5');
UPDATE payflow.outbox SET available_at = now() - interval '1 second' WHERE body ->> 'n' = '1';
SELECT message_group_id, body::jsonb ->> 'n' AS n FROM payflow.outbox_claim(10, 'r2') ORDER BY 2;
SELECT payflow.outbox_ack(array_agg(event_id), NULL, max(claimed_by)) FROM payflow.outbox WHERE body ->> 'n' = '1';
SELECT message_group_id, body::jsonb ->> 'n' AS n FROM payflow.outbox_claim(10, 'r2') ORDER BY 2;
SELECT payflow.outbox_ack(array_agg(event_id), NULL, max(claimed_by)) FROM payflow.outbox WHERE body ->> 'n' = '2';
SELECT message_group_id, body::jsonb ->> 'n' AS n FROM payflow.outbox_claim(10, 'r2') ORDER BY 2;

-- bad input
SELECT * FROM pf_try($$SELECT payflow.outbox_claim(0, 'r')$$);
SELECT * FROM pf_try($$SELECT payflow.outbox_claim(10, NULL)$$);
SELECT * FROM pf_try($$SELECT payflow.outbox_claim(10, 'r', 0)$$);
SELECT * FROM pf_try($$SELECT payflow.outbox_ack(NULL)$$);
SELECT * FROM pf_try($$SELECT payflow.outbox_ack(ARRAY[gen_random_uuid()])$$);
SELECT * FROM pf_try($$SELECT payflow.outbox_nack(gen_random_uuid(), 'x')$$);
SELECT * FROM pf_try($$SELECT payflow.outbox_ack(ARRAY[gen_random_uuid()], ARRAY['a', 'b'], 'r')$$);
SELECT * FROM pf_try($$SELECT payflow.outbox_nack(NULL, 'x')$$);

-- purge and the log: published rows go once retention_published passed,
-- read in seq order from outbox_position.purged_below up to the first row
-- not old enough; terminal events (operation-events) stay for their
-- operation, and are not read again by later calls.  A rendered event keeps
-- no destination (outbox_log.sql): 5 is a completed event (rendered 0), 6
-- a step's request.
TRUNCATE payflow.outbox, payflow.outbox_events, payflow.outbox_batches, payflow.outbox_position;
INSERT INTO payflow.outbox_events (seq, event_id, operation_id, event_type, destination, message_group_id, created_at,
								   rendered, body)
SELECT 1000 + n, gen_random_uuid(), 'op-purge', CASE WHEN r IS NULL THEN 'E' END, d, CASE WHEN r IS NULL THEN 'g' END,
	   now() - age, r, CASE WHEN r IS NULL THEN '{}'::jsonb END
  FROM (VALUES (1, 'payment-requests', NULL::smallint, interval '2 hours'),
			   (2, 'operation-events', NULL, interval '2 hours'),
			   (3, 'payment-requests', NULL, interval '1 minute'), (4, 'payment-requests', NULL, interval '2 hours'),
			   (5, NULL, 0, interval '2 hours'), (6, NULL, 2, interval '2 hours')) v(n, d, r, age);
INSERT INTO payflow.outbox_position (done_below) VALUES (1007);
SELECT p ->> 'more' AS more FROM payflow.purge() p;
SELECT string_agg((seq - 1000)::text, ',' ORDER BY seq) AS kept, (SELECT purged_below - 1000 FROM payflow.outbox_position) AS purged_below
  FROM payflow.outbox_events;
UPDATE payflow.outbox_events SET created_at = now() - interval '2 hours' WHERE seq = 1003;
SELECT p ->> 'more' AS more FROM payflow.purge() p;
SELECT string_agg((seq - 1000)::text, ',' ORDER BY seq) AS kept, (SELECT purged_below - 1000 FROM payflow.outbox_position) AS purged_below
  FROM payflow.outbox_events;
TRUNCATE payflow.outbox_events, payflow.outbox_position;
