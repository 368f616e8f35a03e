-- The "pg" claim-check store: payload_get verifies the checksum.
SELECT payflow.submit('pl-1', '{"amount": 1}') AS op \gset
SELECT payflow._request_ref(id, request_ref, request_mac, request_size) AS ref FROM payflow.operations WHERE id = :'op' \gset
SELECT convert_from(payflow.payload_get(:'ref'), 'UTF8')::jsonb AS content;

-- payload_put: a step's result, written only by the worker holding the
-- step's lease, only under the step's result name.
SELECT * FROM pf_try(format($$SELECT payflow.payload_put(%L, 'payment-result.json', '\x00')$$, :'op'));
SELECT * FROM pf_try(format($$SELECT payflow.payload_put(%L, 'payment-result.json', '\x00', 'PROCESS_PAYMENT', 'pl-w')$$, :'op'));
SELECT payflow.claim_step(:'op', 'PROCESS_PAYMENT', 'pl-w') ->> 'action' AS claimed;
SELECT * FROM pf_try(format($$SELECT payflow.payload_put(%L, 'payment-result.json', '\x00', 'PROCESS_PAYMENT', 'intruder')$$, :'op'));
SELECT * FROM pf_try(format($$SELECT payflow.payload_put(%L, 'invoice-input.json', '\x00', 'PROCESS_PAYMENT', 'pl-w')$$, :'op'));
SELECT * FROM pf_try(format($$SELECT payflow.payload_put(%L, 'payment-result.json', '\x00', 'POST_PROCESS', 'pl-w')$$, :'op'));
SELECT payflow.payload_put(:'op', 'payment-result.json', convert_to('{"n": 1}', 'UTF8'), 'PROCESS_PAYMENT', 'pl-w') AS put \gset
SELECT (:'put'::jsonb) ->> 'key' = 'payments/' || :'op' || '/payment-result.json' AS key_ok,
       (:'put'::jsonb) ->> 'checksum' = payflow._checksum(convert_to('{"n": 1}', 'UTF8')) AS checksum_ok,
       ((:'put'::jsonb) ->> 'size')::int AS size;
-- a key is written once: the same bytes again are fine, other bytes are refused
SELECT payflow.payload_put(:'op', 'payment-result.json', convert_to('{"n": 1}', 'UTF8'), 'PROCESS_PAYMENT', 'pl-w') = :'put'::jsonb AS idempotent;
SELECT * FROM pf_try(format($$SELECT payflow.payload_put(%L, 'payment-result.json', '\x00', 'PROCESS_PAYMENT', 'pl-w')$$, :'op'));
-- ... and handed on as the step's result_ref, which must be this
-- operation's own payload
SELECT payflow.submit('pl-2', '{"amount": 2}') AS op2 \gset
SELECT payflow.claim_step(:'op2', 'PROCESS_PAYMENT', 'pl-w') ->> 'action' AS claimed;
SELECT * FROM pf_try(format($$SELECT payflow.complete_step(%L, 'PROCESS_PAYMENT', 'pl-w', '{}', %L)$$, :'op2', :'put'));
SELECT * FROM pf_try(format($$SELECT payflow.complete_step(%L, 'PROCESS_PAYMENT', 'pl-w', '{}', %L)$$, :'op2',
						 jsonb_build_object('store', 'pg', 'key', 'payments/' || :'op2' || '/payment-result.json', 'checksum', 'sha256:' || repeat('0', 64))));
SELECT * FROM pf_try(format($$SELECT payflow.complete_step(%L, 'PROCESS_PAYMENT', 'pl-w', '{}', %L)$$, :'op2',
						 jsonb_build_object('store', 's3', 'key', 'payments/' || :'op' || '/x.json', 'checksum', 'sha256:' || repeat('0', 64))));
SELECT payflow.complete_step(:'op', 'PROCESS_PAYMENT', 'pl-w', '{"n": 1}', :'put') ->> 'action' AS completed_with_own_ref;
SELECT input_ref = :'put'::jsonb AS next_step_reads_it FROM payflow.steps WHERE operation_id = :'op' AND step_name = 'POST_PROCESS';

-- a reference whose checksum does not match what is stored: PF005
SELECT sqlstate, message LIKE 'checksum mismatch%' AS mismatch
  FROM pf_try(format($$SELECT payflow.payload_get(%L::jsonb || '{"checksum": "sha256:%s"}')$$, :'ref', repeat('0', 64)));
-- stored bytes corrupted behind payflow's back: PF005 too
UPDATE payflow.payloads SET content = content || '\x20'::bytea WHERE key = (:'ref'::jsonb) ->> 'key';
SELECT sqlstate FROM pf_try(format($$SELECT payflow.payload_get(%L)$$, :'ref'));
SELECT * FROM pf_try($$SELECT payflow.payload_get('{"store": "s3", "key": "k", "checksum": "sha256:00"}')$$);
SELECT * FROM pf_try($$SELECT payflow.payload_get('{"store": "pg", "key": "payments/gone/request.json", "checksum": "sha256:00"}')$$);
SELECT * FROM pf_try($$SELECT payflow.payload_get('{"store": "pg"}')$$);
SELECT * FROM pf_try(format($$SELECT payflow.payload_put(%L, '../etc/passwd', '\x00')$$, :'op'));
SELECT * FROM pf_try($$SELECT payflow.payload_put('pay_00000000000000000000000000', 'x.json', '\x00')$$);
SET payflow.payload_max_bytes = 10;
SELECT * FROM pf_try(format($$SELECT payflow.payload_put(%L, 'payment-result.json', '\x000102030405060708090a0b', 'PROCESS_PAYMENT', 'pl-w')$$, :'op2'));
RESET payflow.payload_max_bytes;

-- consumer de-duplication and message dead letters
SELECT payflow.mark_consumed('webhooks', '6f1c4b7e-8d2a-4c1e-9b3f-0a1b2c3d4e5f') AS first,
       payflow.mark_consumed('webhooks', '6f1c4b7e-8d2a-4c1e-9b3f-0a1b2c3d4e5f') AS second,
       payflow.mark_consumed('other', '6f1c4b7e-8d2a-4c1e-9b3f-0a1b2c3d4e5f') AS other_consumer;
SELECT payflow.record_dead_letter('payment-requests', '{not json', '{"code": "bad_json"}') > 0 AS recorded;
SELECT source, queue, message_body, error ->> 'code' AS code, operation_id FROM payflow.dead_letters WHERE source = 'message';
