-- submit_many: one statement, many submits; each item checked and made
-- idempotent exactly as submit() does it; all or nothing.
SET client_min_messages = warning;

-- one operation made by submit() itself, to compare with
SELECT payflow.submit('many-single', '{"amount": 1}') AS single \gset

CREATE TEMP TABLE many AS
SELECT * FROM payflow.submit_many($$[
	{"payment_id": "many-1", "details": {"amount": 100, "currency": "EUR"}},
	{"payment_id": "many-2", "details": {"amount": 200, "currency": "EUR"}, "correlation_id": "req-many"},
	{"payment_id": "many-3", "details": {"amount": 300, "currency": "USD"}, "idempotency_key": "key-many-3"}
]$$);

-- one row per item, in order, each a new operation
SELECT item, payment_id, operation_id ~ '^pay_[0-9A-HJKMNP-TV-Z]{26}$' AS id_ok FROM many ORDER BY item;

-- each operation is what submit() makes: status, step, payload, history, event
SELECT m.item, o.status, o.current_step, o.idempotency_key, o.correlation_id,
       (SELECT count(*) FROM payflow.payloads p WHERE payflow._payload_operation(p.key) = o.id) AS payloads,
       (SELECT count(*) FROM payflow.operation_history h WHERE h.operation_id = o.id) AS history,
       (SELECT string_agg(event_type, ',') FROM payflow.outbox e WHERE e.operation_id = o.id) AS events
  FROM many m JOIN payflow.operations o ON o.id = m.operation_id ORDER BY m.item;

-- the rows hold what submit() writes: the payload with its checksum, the
-- step's input and the event's payload are the request reference
SELECT m.item,
       payflow._checksum(p.content) LIKE 'hmac-sha256:%' AS checksum_ok,
       convert_from(p.content, 'UTF8')::jsonb ->> 'amount' AS amount,
       o.request_ref IS NULL AND 'hmac-sha256:' || encode(o.request_mac, 'hex') = payflow._checksum(p.content)
         AND o.request_size = octet_length(p.content) AS ref_kept_once,
       payflow._request_ref(o.id, o.request_ref, o.request_mac, o.request_size) ->> 'key' = p.key AS ref_ok,
       s.input_ref = payflow._request_ref(o.id, o.request_ref, o.request_mac, o.request_size) AS step_input_ok,
       e.body -> 'payload' = payflow._request_ref(o.id, o.request_ref, o.request_mac, o.request_size) AS event_payload_ok,
       e.body ->> 'paymentId' = o.payment_id AND e.body ->> 'operationId' = o.id
         AND e.body ->> 'correlationId' IS NOT DISTINCT FROM o.correlation_id AS event_ids_ok,
       e.message_group_id = o.payment_id AS group_ok,
       (SELECT array_agg(k ORDER BY k) FROM jsonb_object_keys(e.body) k) =
         (SELECT array_agg(k ORDER BY k) FROM payflow.outbox e1, jsonb_object_keys(e1.body) k
           WHERE e1.operation_id = :'single') AS same_event_fields
  FROM many m JOIN payflow.operations o ON o.id = m.operation_id
  JOIN payflow.payloads p ON payflow._payload_operation(p.key) = o.id
  JOIN payflow.steps s ON s.operation_id = o.id
  JOIN payflow.outbox e ON e.operation_id = o.id
 ORDER BY m.item;

-- its request checksum is submit's: submit() with the same details names the same operation
SELECT payflow.submit('many-2', '{"currency": "EUR", "amount": 200}') = operation_id AS submit_finds_it
  FROM many WHERE item = 2;

-- the same array again: the same operations, nothing new written
SELECT count(*) AS operations_before FROM payflow.operations \gset
SELECT bool_and(m.operation_id = again.operation_id) AS same_ids, count(*) AS items
  FROM many m JOIN payflow.submit_many($$[
	{"payment_id": "many-1", "details": {"amount": 100, "currency": "EUR"}},
	{"payment_id": "many-2", "details": {"amount": 200, "currency": "EUR"}, "correlation_id": "req-many"},
	{"payment_id": "many-3", "details": {"amount": 300, "currency": "USD"}, "idempotency_key": "key-many-3"}
]$$) again USING (item);
SELECT count(*) - :operations_before AS new_operations FROM payflow.operations;
-- nor a transaction id (a replay commits without a WAL flush)
BEGIN;
SELECT count(*) AS items FROM payflow.submit_many('[{"payment_id": "many-1", "details": {"amount": 100, "currency": "EUR"}}]');
SELECT pg_current_xact_id_if_assigned() IS NULL AS no_xid_taken;
COMMIT;

-- a key twice in one array with the same details: one operation, named twice
SELECT count(DISTINCT operation_id) AS operations, count(*) AS items FROM payflow.submit_many($$[
	{"payment_id": "many-4", "details": {"amount": 400}},
	{"payment_id": "many-4", "details": {"amount": 400}}
]$$);

-- an empty array: no rows, no error
SELECT count(*) AS items FROM payflow.submit_many('[]');

-- Bad input: the first bad item's own SQLSTATE, its message naming the
-- item's place, and nothing of the array submitted.
SELECT count(*) AS operations_before FROM payflow.operations \gset
SELECT count(*) AS events_before FROM payflow.outbox \gset
SELECT c.label, t.sqlstate, t.message
  FROM (VALUES
	(1, 'NULL',                 $$SELECT payflow.submit_many(NULL)$$),
	(2, 'not an array',         $$SELECT payflow.submit_many('{"payment_id": "x", "details": {}}')$$),
	(3, 'a string',             $$SELECT payflow.submit_many('"x"')$$),
	(4, '1001 items',           $$SELECT payflow.submit_many((SELECT jsonb_agg(jsonb_build_object('payment_id', 'big-' || i, 'details', '{}'::jsonb)) FROM generate_series(1, 1001) i))$$),
	(5, 'a null item',          $$SELECT payflow.submit_many('[{"payment_id": "many-ok", "details": {}}, null]')$$),
	(6, 'an item not object',   $$SELECT payflow.submit_many('[{"payment_id": "many-ok", "details": {}}, [1, 2]]')$$),
	(7, 'an unknown field',     $$SELECT payflow.submit_many('[{"payment_id": "many-ok", "details": {}, "amount": 5}]')$$),
	(8, 'payment_id a number',  $$SELECT payflow.submit_many('[{"payment_id": 7, "details": {}}]')$$),
	(9, 'payment_id missing',   $$SELECT payflow.submit_many('[{"payment_id": "many-ok", "details": {}}, {"details": {}}]')$$),
	(10, 'payment_id JSON null', $$SELECT payflow.submit_many('[{"payment_id": null, "details": {}}]')$$),
	(11, 'payment_id empty',    $$SELECT payflow.submit_many('[{"payment_id": "", "details": {}}]')$$),
	(12, 'payment_id control',  $$SELECT payflow.submit_many(jsonb_build_array(jsonb_build_object('payment_id', E'a\nb', 'details', '{}'::jsonb)))$$),
	(13, 'payment_id too long', $$SELECT payflow.submit_many(jsonb_build_array(jsonb_build_object('payment_id', repeat('p', 256), 'details', '{}'::jsonb)))$$),
	(14, 'details missing',     $$SELECT payflow.submit_many('[{"payment_id": "many-ok"}]')$$),
	(15, 'details an array',    $$SELECT payflow.submit_many('[{"payment_id": "many-ok", "details": [1]}]')$$),
	(16, 'details too large',   $$SELECT payflow.submit_many(jsonb_build_array(jsonb_build_object('payment_id', 'many-ok', 'details', jsonb_build_object('pad', repeat('x', 300000)))))$$),
	(17, 'key a number',        $$SELECT payflow.submit_many('[{"payment_id": "many-ok", "details": {}, "idempotency_key": 5}]')$$),
	(18, 'correlation an object', $$SELECT payflow.submit_many('[{"payment_id": "many-ok", "details": {}, "correlation_id": {}}]')$$),
	(19, 'key reused, other details', $$SELECT payflow.submit_many('[{"payment_id": "many-ok", "details": {}}, {"payment_id": "many-1", "details": {"amount": 999}}]')$$),
	(20, 'key twice, other details',  $$SELECT payflow.submit_many('[{"payment_id": "many-ok", "details": {}}, {"payment_id": "many-ok", "details": {"a": 1}}]')$$)
  ) c(n, label, statement), LATERAL pf_try(c.statement) t
 ORDER BY c.n;
-- nothing of any bad array was written (many-ok led most of them; it exists nowhere)
SELECT count(*) - :operations_before AS new_operations, (SELECT count(*) FROM payflow.outbox) - :events_before AS new_events
  FROM payflow.operations;
SELECT count(*) AS many_ok_operations FROM payflow.operations WHERE payment_id = 'many-ok';

-- the detail and the hint of an item's error survive the prefix
DO $$
DECLARE
	v_detail text;
	v_hint text;
BEGIN
	PERFORM payflow.submit_many('[{"payment_id": "many-1", "details": {"amount": 999}}]');
EXCEPTION WHEN SQLSTATE 'PF002' THEN
	GET STACKED DIAGNOSTICS v_detail = PG_EXCEPTION_DETAIL, v_hint = PG_EXCEPTION_HINT;
	RAISE WARNING 'detail: %; hint: %', regexp_replace(v_detail, 'pay_[0-9A-Z]{26}', 'pay_<id>'), v_hint;
END
$$;

-- the application may call it; a worker may not
SET ROLE payflow_app;
SELECT count(*) AS items FROM payflow.submit_many('[{"payment_id": "many-app", "details": {"amount": 1}}]');
RESET ROLE;
SET ROLE payflow_worker;
SELECT * FROM pf_try($$SELECT payflow.submit_many('[{"payment_id": "many-worker", "details": {}}]')$$);
RESET ROLE;

-- a bound tenant: its own operations, keys per tenant as with submit()
SELECT payflow.create_api_key('tenant-many', 'many') AS key_m \gset
BEGIN;
SELECT payflow.authenticate(:'key_m') AS tenant;
SELECT operation_id AS op_m FROM payflow.submit_many('[{"payment_id": "many-1", "details": {"amount": 100, "currency": "EUR"}}]') \gset
-- (a statement apart: one that calls submit_many sees none of its rows)
SELECT :'op_m' <> (SELECT operation_id FROM many WHERE item = 1) AS not_the_default_tenants, o.tenant
  FROM payflow.operations o WHERE o.id = :'op_m';
SELECT count(*) AS same_again FROM payflow.submit_many('[{"payment_id": "many-1", "details": {"amount": 100, "currency": "EUR"}}]') m
 WHERE m.operation_id = :'op_m';
COMMIT;
SELECT count(*) AS many_1_operations, count(DISTINCT tenant) AS tenants FROM payflow.operations WHERE payment_id = 'many-1';
