-- Keyed checksums (issue 26, M4): what leaves the database names no plain
-- SHA-256 of a request.  The reference implementation is pgcrypto's hmac().
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS pgcrypto;
RESET client_min_messages;
SELECT n.nspname AS pgc FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
 WHERE e.extname = 'pgcrypto' \gset

-- one key of 32 bytes, handed out by payload_mac_key()
SELECT count(*) = 1 AS one_key, bool_and(octet_length(key) = 32) AS key_32_bytes,
       bool_and(payflow.payload_mac_key() = key) AS handed_out
  FROM payflow._content_key;

-- a request's reference, its operation's row and its event carry the HMAC
SELECT payflow.submit('cm-1', '{"amount": 12, "cardNumber": "4111111111111111"}') AS op \gset
SELECT payflow._request_ref(id, request_ref, request_mac, request_size) AS ref FROM payflow.operations WHERE id = :'op' \gset
SELECT (:'ref'::jsonb) ->> 'checksum' = 'hmac-sha256:' || encode(:"pgc".hmac(p.content, payflow.payload_mac_key(), 'sha256'), 'hex')
	   AS ref_is_hmac,
	   'hmac-sha256:' || encode(o.request_mac, 'hex') = (:'ref'::jsonb) ->> 'checksum' AS operation_row_same,
	   position(encode(sha256(p.content), 'hex') IN (SELECT e.body::text FROM payflow.outbox e WHERE e.operation_id = :'op')) = 0
	   AS event_has_no_plain_hash,
	   (SELECT e.body -> 'payload' ->> 'checksum' FROM payflow.outbox e WHERE e.operation_id = :'op') = (:'ref'::jsonb) ->> 'checksum'
	   AS event_carries_it
  FROM payflow.payloads p, payflow.operations o WHERE p.key = (:'ref'::jsonb) ->> 'key' AND o.id = :'op';

-- the idempotency check compares the keyed checksum (no hash of the
-- request of its own, plain or keyed): the same request finds its
-- operation, other details, another payment id or a reference are PF002
SELECT count(*) AS request_hash_columns FROM pg_attribute
 WHERE attrelid = 'payflow.operations'::regclass AND attname = 'request_hash' AND NOT attisdropped;
SELECT payflow.submit('cm-1', '{"amount": 12, "cardNumber": "4111111111111111"}') = :'op' AS same_request_same_id;
SELECT * FROM pf_try($$SELECT payflow.submit('cm-1', '{"amount": 13, "cardNumber": "4111111111111111"}')$$);
SELECT * FROM pf_try($$SELECT payflow.submit('cm-1-other', '{"amount": 12, "cardNumber": "4111111111111111"}', 'cm-1')$$);
SELECT * FROM pf_try(format($$SELECT payflow.submit_ref('cm-1', 'pg', %L, %L, %s)$$,
	(:'ref'::jsonb) ->> 'key', (:'ref'::jsonb) ->> 'checksum', (:'ref'::jsonb) ->> 'size'));
-- submit_ref's request is told by its reference (store, key, checksum)
SELECT payflow.submit_ref('cm-ref', 'pg', (:'ref'::jsonb) ->> 'key', (:'ref'::jsonb) ->> 'checksum',
						  ((:'ref'::jsonb) ->> 'size')::bigint) AS ref_op \gset
SELECT payflow.submit_ref('cm-ref', 'pg', (:'ref'::jsonb) ->> 'key', (:'ref'::jsonb) ->> 'checksum',
						  ((:'ref'::jsonb) ->> 'size')::bigint) = :'ref_op' AS same_reference_same_id;
SELECT * FROM pf_try($$SELECT payflow.submit('cm-ref', '{"amount": 12, "cardNumber": "4111111111111111"}')$$);
SELECT * FROM pf_try(format($$SELECT payflow.submit_ref('cm-ref', 's3', %L, %L, %s)$$,
	(:'ref'::jsonb) ->> 'key', (:'ref'::jsonb) ->> 'checksum', (:'ref'::jsonb) ->> 'size'));

-- payload_get verifies: a keyed reference, a plain one made before 0.5.0,
-- and refuses either for other bytes (PF005)
SELECT convert_from(payflow.payload_get(:'ref'), 'UTF8')::jsonb ->> 'amount' AS read_keyed;
SELECT payflow.payload_get(jsonb_set(:'ref'::jsonb, '{checksum}',
									 to_jsonb('sha256:' || encode(sha256(p.content), 'hex')))) = p.content AS read_plain
  FROM payflow.payloads p WHERE p.key = (:'ref'::jsonb) ->> 'key';
SELECT sqlstate FROM pf_try(format($$SELECT payflow.payload_get(%L)$$,
	jsonb_set(:'ref'::jsonb, '{checksum}', to_jsonb('hmac-sha256:' || encode(sha256('other'::bytea), 'hex')))));
SELECT sqlstate FROM pf_try(format($$SELECT payflow.payload_get(%L)$$,
	jsonb_set(:'ref'::jsonb, '{checksum}', to_jsonb('sha256:' || encode(sha256('other'::bytea), 'hex')))));

-- submit_ref takes a keyed checksum, or an application's plain one
SELECT payflow.submit_ref('cm-2', 's3', 'incoming/cm-2.json', 'hmac-sha256:' || repeat('ab', 32), 10) LIKE 'pay_%' AS keyed_ref;
SELECT payflow.submit_ref('cm-3', 's3', 'incoming/cm-3.json', 'sha256:' || repeat('ab', 32), 10) LIKE 'pay_%' AS plain_ref;
SELECT * FROM pf_try($$SELECT payflow.submit_ref('cm-4', 's3', 'k', 'hmac-md5:' || repeat('ab', 32), 10)$$);

-- who may read the key: the step and post-processing workers, not the
-- application, the relay, the webhook worker or the S3 sweeper
SELECT r AS role, has_function_privilege(r, 'payflow.payload_mac_key()', 'EXECUTE') AS may_read_key
  FROM unnest(ARRAY['payflow_app', 'payflow_relay', 'payflow_webhook_worker', 'payflow_s3_sweeper',
					'payflow_step_worker', 'payflow_postprocess_worker', 'payflow_payload_mac']) r;
SELECT has_table_privilege(r, 'payflow._content_key', 'SELECT') AS table_readable
  FROM unnest(ARRAY['payflow_app', 'payflow_worker', 'payflow_admin']) r;

-- a restore's key replaces the one CREATE EXTENSION made (one row)
BEGIN;
INSERT INTO payflow._content_key (key) VALUES (sha256('restored'::bytea));
SELECT count(*) = 1 AS still_one_key, bool_and(key = sha256('restored'::bytea)) AS restored_key_in_use,
	   bool_and(payflow._checksum('x'::bytea) = 'hmac-sha256:' || encode(:"pgc".hmac('x'::bytea, sha256('restored'::bytea), 'sha256'), 'hex'))
	   AS checksums_follow
  FROM payflow._content_key;
ROLLBACK;
