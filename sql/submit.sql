-- submit / submit_ref: one transaction writes operation, payload, step,
-- history and the PaymentRequested event; idempotency by key.
SET client_min_messages = warning;

SELECT payflow.submit('payment-1', '{"amount": 1250, "currency": "EUR"}', NULL, 'req-1') AS op1 \gset

SELECT :'op1' ~ '^pay_[0-9A-HJKMNP-TV-Z]{26}$' AS id_is_pay_ulid;

SELECT status = 'PENDING' AS pending, current_step = 'PROCESS_PAYMENT' AS first_step,
       idempotency_key = 'payment-1' AS key_defaults_to_payment_id,
       correlation_id = 'req-1' AS correlation_kept
  FROM payflow.operations WHERE id = :'op1';

-- the payload is stored as its key and bytes (its checksum and size are
-- the operation's, below) and referenced, never inlined
SELECT p.key = 'payments/' || :'op1' || '/request.json' AS key_ok,
       (SELECT count(*) FROM pg_attribute a WHERE a.attrelid = 'payflow.payloads'::regclass
           AND a.attname IN ('checksum', 'size', 'operation_id') AND NOT a.attisdropped) = 0 AS key_and_bytes_only,
       convert_from(p.content, 'UTF8')::jsonb = '{"amount": 1250, "currency": "EUR"}' AS content_ok
  FROM payflow.payloads p WHERE payflow._payload_operation(p.key) = :'op1';
-- ... and the operation's row keeps that reference once, as the payload's
-- keyed checksum and size: no document beside them (tables.sql)
SELECT o.request_ref IS NULL AS no_reference_document,
       'hmac-sha256:' || encode(o.request_mac, 'hex') = payflow._checksum(p.content) AS mac_is_the_checksum,
       o.request_size = octet_length(p.content) AS size_kept,
       payflow._request_ref(o.id, o.request_ref, o.request_mac, o.request_size)
         = jsonb_build_object('store', 'pg', 'key', p.key, 'checksum', payflow._checksum(p.content),
                              'size', octet_length(p.content)) AS reference_rendered
  FROM payflow.operations o JOIN payflow.payloads p ON payflow._payload_operation(p.key) = o.id WHERE o.id = :'op1';

SELECT count(*) = 1 AS one_history_row,
       bool_and(from_status IS NULL AND to_status = 'PENDING') AS history_ok
  FROM payflow.operation_history WHERE operation_id = :'op1';

SELECT status = 'PENDING' AS step_pending, attempt = 0 AS no_attempt_yet,
       input_ref = (SELECT payflow._request_ref(id, request_ref, request_mac, request_size) FROM payflow.operations WHERE id = :'op1') AS input_is_request
  FROM payflow.steps WHERE operation_id = :'op1';

-- the outbox event follows DESIGN §2
SELECT event_type, destination, message_group_id,
       body ->> 'eventType' AS "eventType",
       (body ->> 'eventVersion')::int AS "eventVersion",
       body ->> 'eventId' = event_id::text AS event_id_ok,
       body ->> 'operationId' = :'op1' AS operation_ok,
       body ->> 'paymentId' AS "paymentId",
       (body ->> 'attempt')::int AS attempt,
       body ->> 'correlationId' AS "correlationId",
       body ->> 'createdAt' ~ '^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$' AS created_at_iso_utc,
       body -> 'payload' = (SELECT payflow._request_ref(id, request_ref, request_mac, request_size) FROM payflow.operations WHERE id = :'op1') AS payload_is_ref,
       NOT (body -> 'payload' ? 'amount') AS no_details_in_message
  FROM payflow.outbox WHERE operation_id = :'op1';
-- ... and its SQS attributes, as a relay claims it (rolled back: the event stays)
BEGIN;
SELECT c.attributes = jsonb_build_object('eventType', 'PaymentRequested', 'operationId', :'op1',
                                         'correlationId', 'req-1',
                                         'traceparent', (SELECT payflow._traceparent_text(traceparent) FROM payflow.operations WHERE id = :'op1')) AS attributes_ok
  FROM payflow.outbox_claim(1000, 'relay-attr') c WHERE c.event_id = (SELECT event_id FROM payflow.outbox WHERE operation_id = :'op1');
ROLLBACK;

-- same key, same details: same operation, nothing new written, not even
-- a transaction id (a replay commits without a WAL flush)
BEGIN;
SELECT payflow.submit('payment-1', '{"currency": "EUR", "amount": 1250}') = :'op1' AS same_id;
SELECT pg_current_xact_id_if_assigned() IS NULL AS no_xid_taken;
COMMIT;
SELECT count(*) = 1 AS still_one_event FROM payflow.outbox WHERE message_group_id = 'payment-1';

-- same key, other details: PF002
SELECT * FROM pf_try($$SELECT payflow.submit('payment-1', '{"amount": 9999, "currency": "EUR"}')$$);
-- same key, other payment id: PF002 too
SELECT * FROM pf_try($$SELECT payflow.submit('payment-x', '{"amount": 1250, "currency": "EUR"}', 'payment-1')$$);

-- an explicit idempotency key separates two submissions of one payment
SELECT payflow.submit('payment-2', '{"amount": 5}', 'key-a') AS op2a \gset
SELECT payflow.submit('payment-2', '{"amount": 5}', 'key-b') AS op2b \gset
SELECT :'op2a' <> :'op2b' AS distinct_ops;

-- ids are monotonic within a session
SELECT :'op2a' < :'op2b' AS monotonic;

-- bad input: a specific SQLSTATE and nothing written
SELECT count(*) AS ops_before FROM payflow.operations \gset
SELECT * FROM pf_try($$SELECT payflow.submit(NULL, '{}')$$);
SELECT * FROM pf_try($$SELECT payflow.submit('', '{}')$$);
SELECT * FROM pf_try($$SELECT payflow.submit(repeat('x', 256), '{}')$$);
SELECT * FROM pf_try($$SELECT payflow.submit('p', NULL)$$);
SELECT * FROM pf_try($$SELECT payflow.submit('p', '[1,2]')$$);
SELECT * FROM pf_try($$SELECT payflow.submit('p', '"text"')$$);
SELECT * FROM pf_try($$SELECT payflow.submit('p', '{}', '')$$);
SELECT * FROM pf_try($$SELECT payflow.submit('p', '{}', NULL, repeat('c', 300))$$);
SET payflow.payload_max_bytes = 64;
SELECT * FROM pf_try($$SELECT payflow.submit('p-big', jsonb_build_object('blob', repeat('a', 100)))$$);
RESET payflow.payload_max_bytes;
SELECT payflow.submit('x''; DROP TABLE payflow.operations; --', '{"a": "'' OR 1=1 --"}') ~ '^pay_' AS injection_is_just_data;
SELECT count(*) = :ops_before + 1 AS only_the_valid_one_written FROM payflow.operations;
SELECT count(*) = 1 AS table_still_there FROM payflow.operations WHERE payment_id LIKE 'x%DROP%';

-- submit_ref: the payload is already in S3, only the reference is kept
SELECT payflow.submit_ref('payment-3', 's3', 'incoming/p3.json',
       'sha256:' || repeat('ab', 32), 5000000, NULL, 'req-3') AS op3 \gset
SELECT request_ref = jsonb_build_object('store', 's3', 'key', 'incoming/p3.json',
                                        'checksum', 'sha256:' || repeat('ab', 32), 'size', 5000000) AS ref_kept,
       request_mac IS NULL AND request_size IS NULL AS no_checksum_beside_it,
       NOT EXISTS (SELECT FROM payflow.payloads WHERE payflow._payload_operation(key) = :'op3') AS nothing_stored
  FROM payflow.operations WHERE id = :'op3';
SELECT body -> 'payload' ->> 'store' AS store FROM payflow.outbox WHERE operation_id = :'op3';
SELECT payflow.submit_ref('payment-3', 's3', 'incoming/p3.json', 'sha256:' || repeat('ab', 32), 5000000) = :'op3' AS same_id;
SELECT * FROM pf_try($$SELECT payflow.submit_ref('payment-3', 's3', 'incoming/other.json', 'sha256:' || repeat('ab', 32), 5000000)$$);
SELECT * FROM pf_try($$SELECT payflow.submit_ref('payment-4', 'ftp', 'k', 'sha256:' || repeat('ab', 32), 1)$$);
SELECT * FROM pf_try($$SELECT payflow.submit_ref('payment-4', 's3', 'k', 'md5:abc', 1)$$);
SELECT * FROM pf_try($$SELECT payflow.submit_ref('payment-4', 's3', 'k', 'sha256:' || repeat('ab', 32), -1)$$);
SELECT * FROM pf_try($$SELECT payflow.submit_ref('payment-4', 'pg', 'payments/none/request.json', 'sha256:' || repeat('ab', 32), 1)$$);
-- a "pg" reference must match what is stored
SELECT sqlstate, message LIKE 'checksum mismatch for payload "payments/pay_%/request.json"' AS message_ok
  FROM pf_try(format($$SELECT payflow.submit_ref('payment-4', 'pg', 'payments/' || %L || '/request.json', 'sha256:' || repeat('ab', 32), 1)$$, :'op1'));
SELECT payflow.submit_ref('payment-5', 'pg', key, payflow._checksum(content), octet_length(content)) ~ '^pay_' AS pg_ref_ok
  FROM payflow.payloads WHERE payflow._payload_operation(key) = :'op1';
-- the check is of the stored bytes (no checksum is stored beside them): a
-- plain digest of them passes (an application's own, as before 0.5.0), and
-- bytes changed behind payflow's back fail whatever reference is given
SELECT payflow.submit_ref('payment-6', 'pg', key, 'sha256:' || encode(sha256(content), 'hex'), octet_length(content))
         ~ '^pay_' AS plain_digest_ok
  FROM payflow.payloads WHERE payflow._payload_operation(key) = :'op1';
SELECT payflow._checksum(content) AS op1_checksum, octet_length(content) AS op1_size, key AS op1_key
  FROM payflow.payloads WHERE payflow._payload_operation(key) = :'op1' \gset
BEGIN;
UPDATE payflow.payloads SET content = content || '\x20'::bytea WHERE key = :'op1_key';
SELECT sqlstate FROM pf_try(format($$SELECT payflow.submit_ref('payment-7', 'pg', %L, %L, %s)$$,
                                   :'op1_key', :'op1_checksum', :op1_size));
ROLLBACK;

-- status and history
SELECT doc ->> 'operationId' = :'op1' AS id_ok, doc ->> 'paymentId' AS "paymentId",
       doc ->> 'status' AS status, (doc ->> 'attempts')::int AS attempts,
       doc -> 'nextAttemptAt' = 'null' AS no_retry, doc -> 'error' = 'null' AS no_error,
       doc ->> 'correlationId' AS "correlationId",
       doc ->> 'createdAt' ~ 'Z$' AND doc ->> 'updatedAt' ~ 'Z$' AS timestamps_utc,
       (doc ->> 'terminal')::boolean AS terminal
  FROM payflow.status(:'op1') AS doc;
SELECT from_status, to_status, reason, actor = current_user AS actor_ok FROM payflow.history(:'op1');
SELECT * FROM pf_try($$SELECT payflow.status('pay_00000000000000000000000000')$$);
SELECT * FROM pf_try($$SELECT payflow.status('not-an-id')$$);
SELECT * FROM pf_try($$SELECT payflow.status(NULL)$$);
SELECT * FROM pf_try($$SELECT * FROM payflow.history('pay_00000000000000000000000000')$$);
SELECT * FROM pf_try($$SELECT * FROM payflow.history('pay_0000''; select 1; --')$$);
