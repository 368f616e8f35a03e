-- Bad input at every public SQL function: NULLs, empty strings, wrong JSON
-- types, oversize values, over-long keys and ids, malformed and unknown
-- operation ids, out-of-range numbers, and SQL-injection strings in every
-- text argument.  Each case shows its SQLSTATE and message; after each
-- group, pf_changed() lists the payflow tables whose row count moved (it
-- must say "none"), so no error leaves a half-written operation behind.
--
-- The whole file runs in one transaction that is rolled back: the suites
-- after it see the database as 00_setup left it.
SET client_min_messages = warning;
BEGIN;

-- Row counts of every table of schema payflow (new tables are included
-- by themselves), and the tables whose count differs from a snapshot.
CREATE FUNCTION pf_row_counts() RETURNS jsonb
	LANGUAGE plpgsql AS $$
DECLARE
	r record;
	n bigint;
	counts jsonb := '{}';
BEGIN
	FOR r IN SELECT c.relname FROM pg_class c
			  WHERE c.relnamespace = 'payflow'::regnamespace AND c.relkind IN ('r', 'p')
				AND NOT c.relispartition	-- counted in their parent
			  ORDER BY c.relname
	LOOP
		EXECUTE format('SELECT count(*) FROM payflow.%I', r.relname) INTO n;
		counts := counts || jsonb_build_object(r.relname, n);
	END LOOP;
	RETURN counts;
END
$$;
CREATE FUNCTION pf_changed(before jsonb) RETURNS text
	LANGUAGE sql AS $$
	SELECT coalesce(string_agg(format('%s %s->%s', a.key, b.value, a.value), ', ' ORDER BY a.key), 'none')
	  FROM jsonb_each(pf_row_counts()) a
	  LEFT JOIN jsonb_each(before) b ON b.key = a.key
	 WHERE a.value IS DISTINCT FROM b.value
$$;
-- pf_cases(): the SQLSTATE and message (its first 100 characters) of each
-- statement of a list, one line each, in the order given.
CREATE FUNCTION pf_cases(cases text[])
	RETURNS TABLE (n integer, label text, sqlstate text, message text)
	LANGUAGE plpgsql AS $$
DECLARE
	i integer;
BEGIN
	FOR i IN 1 .. array_length(cases, 1) / 2 LOOP
		n := i;
		label := cases[2 * i - 1];
		SELECT t.sqlstate, left(t.message, 100) INTO sqlstate, message FROM pf_try(cases[2 * i]) t;
		RETURN NEXT;
	END LOOP;
END
$$;

-- the same injection strings go into every text argument
\set inj 'x''); DROP TABLE payflow.operations; --'
\set inj2 '$$; DELETE FROM payflow.outbox; $$ %s %I \\'' OR ''1''=''1'
SELECT :'inj' AS inj, :'inj2' AS inj2;

-- an operation to point at, and one well-formed id nobody has
SELECT payflow.submit('bad-input-1', '{"amount": 1}') AS op \gset
\set unknown 'pay_00000000000000000000000000'
SELECT pf_row_counts() AS before \gset
SELECT count(*) AS tables_before FROM pg_class
 WHERE relnamespace = 'payflow'::regnamespace AND relkind = 'r' \gset

---------------------------------------------------------------------------
-- Operation ids: the same rules at every function that takes one
---------------------------------------------------------------------------
-- malformed: 22P02 (or 22004 NULL, 22023 empty, 22001 over 64 characters);
-- well-formed but unknown: PF003
SELECT n, label, sqlstate, message FROM pf_cases(ARRAY[
	'NULL',                    $$SELECT payflow.status(NULL)$$,
	'empty',                   $$SELECT payflow.status('')$$,
	'65 characters',           $$SELECT payflow.status('pay_' || repeat('0', 61))$$,
	'10 000 characters',       $$SELECT payflow.status(repeat('A', 10000))$$,
	'too short',               $$SELECT payflow.status('pay_123')$$,
	'upper-case prefix',       $$SELECT payflow.status('PAY_00000000000000000000000000')$$,
	'lower-case ULID',         $$SELECT payflow.status('pay_0000000000000000000000000a')$$,
	'excluded letter I',       $$SELECT payflow.status('pay_0000000000000000000000000I')$$,
	'leading space',           $$SELECT payflow.status(' pay_00000000000000000000000000')$$,
	'trailing newline',        $$SELECT payflow.status(E'pay_00000000000000000000000000\n')$$,
	'SQL injection',           format($$SELECT payflow.status(%L)$$, :'inj'),
	'LIKE pattern',            $$SELECT payflow.status('pay_%')$$,
	'unknown, well-formed',    format($$SELECT payflow.status(%L)$$, :'unknown')
]);

-- every function taking an operation id: malformed 22P02, unknown PF003
SELECT n, label, sqlstate, message FROM pf_cases(ARRAY[
	'history malformed',        format($$SELECT * FROM payflow.history(%L)$$, :'inj'),
	'history unknown',          format($$SELECT * FROM payflow.history(%L)$$, :'unknown'),
	'cancel malformed',         format($$SELECT payflow.cancel(%L)$$, :'inj'),
	'cancel unknown',           format($$SELECT payflow.cancel(%L)$$, :'unknown'),
	'claim_step malformed',     format($$SELECT payflow.claim_step(%L, 'PROCESS_PAYMENT', 'w')$$, :'inj'),
	'claim_step unknown',       format($$SELECT payflow.claim_step(%L, 'PROCESS_PAYMENT', 'w')$$, :'unknown'),
	'heartbeat malformed',      format($$SELECT payflow.heartbeat(%L, 'PROCESS_PAYMENT', 'w')$$, :'inj'),
	'heartbeat unknown',        format($$SELECT payflow.heartbeat(%L, 'PROCESS_PAYMENT', 'w')$$, :'unknown'),
	'save_step_ref malformed',  format($$SELECT payflow.save_step_ref(%L, 'PROCESS_PAYMENT', 'w', 'r')$$, :'inj'),
	'save_step_ref unknown',    format($$SELECT payflow.save_step_ref(%L, 'PROCESS_PAYMENT', 'w', 'r')$$, :'unknown'),
	'complete_step malformed',  format($$SELECT payflow.complete_step(%L, 'PROCESS_PAYMENT', 'w', '{}')$$, :'inj'),
	'complete_step unknown',    format($$SELECT payflow.complete_step(%L, 'PROCESS_PAYMENT', 'w', '{}')$$, :'unknown'),
	'fail_step malformed',      format($$SELECT payflow.fail_step(%L, 'PROCESS_PAYMENT', 'w', '{}', true)$$, :'inj'),
	'fail_step unknown',        format($$SELECT payflow.fail_step(%L, 'PROCESS_PAYMENT', 'w', '{}', true)$$, :'unknown'),
	'payload_put malformed',    format($$SELECT payflow.payload_put(%L, 'a.json', '\x00')$$, :'inj'),
	'payload_put unknown',      format($$SELECT payflow.payload_put(%L, 'a.json', '\x00')$$, :'unknown'),
	'default_postprocess malformed', format($$SELECT payflow.default_postprocess(%L, '{}')$$, :'inj'),
	'default_postprocess unknown',   format($$SELECT payflow.default_postprocess(%L, '{}')$$, :'unknown'),
	'replay malformed',         format($$SELECT payflow.replay(%L)$$, :'inj'),
	'replay unknown',           format($$SELECT payflow.replay(%L)$$, :'unknown')
]);
SELECT pf_changed(:'before') AS changed;

---------------------------------------------------------------------------
-- submit
---------------------------------------------------------------------------
SELECT n, label, sqlstate, message FROM pf_cases(ARRAY[
	'payment_id NULL',          $$SELECT payflow.submit(NULL, '{}')$$,
	'payment_id empty',         $$SELECT payflow.submit('', '{}')$$,
	'payment_id 256 chars',     $$SELECT payflow.submit(repeat('p', 256), '{}')$$,
	'payment_id 256 multibyte', $$SELECT payflow.submit(repeat('é', 256), '{}')$$,
	'details NULL',             $$SELECT payflow.submit('p', NULL)$$,
	'details array',            $$SELECT payflow.submit('p', '[{"amount": 1}]')$$,
	'details string',           $$SELECT payflow.submit('p', '"amount=1"')$$,
	'details number',           $$SELECT payflow.submit('p', '12.5')$$,
	'details boolean',          $$SELECT payflow.submit('p', 'true')$$,
	'details JSON null',        $$SELECT payflow.submit('p', 'null')$$,
	'details not JSON',         $$SELECT payflow.submit('p', '{"amount": 1')$$,
	'details with \u0000',      $$SELECT payflow.submit('p', '{"a": "\u0000"}')$$,
	'idempotency_key empty',    $$SELECT payflow.submit('p', '{}', '')$$,
	'idempotency_key 256',      $$SELECT payflow.submit('p', '{}', repeat('k', 256))$$,
	'correlation_id empty',     $$SELECT payflow.submit('p', '{}', NULL, '')$$,
	'correlation_id 256',       $$SELECT payflow.submit('p', '{}', NULL, repeat('c', 256))$$
]);
-- oversize details: PF007 before anything is written
SET payflow.payload_max_bytes = 1024;
SELECT n, label, sqlstate, message FROM pf_cases(ARRAY[
	'details of 2 kB',          $$SELECT payflow.submit('p-big', jsonb_build_object('blob', repeat('a', 2000)))$$,
	'details of 1 kB deep',     $$SELECT payflow.submit('p-big', (SELECT jsonb_object_agg('k' || i, i) FROM generate_series(1, 200) i))$$
]);
RESET payflow.payload_max_bytes;
-- the largest details that fit and one byte more (the limit counts the
-- details as jsonb prints them)
SET payflow.payload_max_bytes = 100;
SELECT octet_length(jsonb_build_object('b', repeat('a', 100 - 9))::text) AS bytes_at_limit;
SELECT payflow.submit('p-fits', jsonb_build_object('b', repeat('a', 100 - 9))) ~ '^pay_' AS exactly_at_limit_accepted;
SELECT * FROM pf_try($$SELECT payflow.submit('p-over', jsonb_build_object('b', repeat('a', 100 - 8)))$$);
RESET payflow.payload_max_bytes;
SELECT pf_changed(:'before') AS changed;
SELECT pf_row_counts() AS before \gset

-- injection strings are data: stored and returned verbatim, in every field
SELECT payflow.submit(:'inj', jsonb_build_object(:'inj2', :'inj'), :'inj2', :'inj') AS inj_op \gset
SELECT payment_id = :'inj' AS payment_id_verbatim,
       idempotency_key = :'inj2' AS key_verbatim,
       correlation_id = :'inj' AS correlation_verbatim
  FROM payflow.operations WHERE id = :'inj_op';
SELECT convert_from(p.content, 'UTF8')::jsonb = jsonb_build_object(:'inj2', :'inj') AS details_verbatim
  FROM payflow.payloads p WHERE payflow._payload_operation(p.key) = :'inj_op';
SELECT (payflow.status(:'inj_op')) ->> 'paymentId' = :'inj' AS status_returns_it;
SELECT body ->> 'paymentId' = :'inj' AS event_carries_it,
       -- not a valid SQS FIFO group id (spaces): its hash stands in
       message_group_id = 'sha256:' || encode(sha256(convert_to(:'inj', 'UTF8')), 'hex') AS group_is_its_hash
  FROM payflow.outbox WHERE operation_id = :'inj_op';
SAVEPOINT attributes;
SELECT c.attributes ->> 'correlationId' = :'inj' AS attribute_is_it
  FROM payflow.outbox_claim(1000, 'relay-attr') c
 WHERE c.event_id = (SELECT event_id FROM payflow.outbox WHERE operation_id = :'inj_op');
ROLLBACK TO SAVEPOINT attributes;
-- the same call again is the same operation; other details under that key PF002
SELECT payflow.submit(:'inj', jsonb_build_object(:'inj2', :'inj'), :'inj2', :'inj') = :'inj_op' AS idempotent;
SELECT * FROM pf_try(format($$SELECT payflow.submit(%L, '{}', %L)$$, :'inj', :'inj2'));
SELECT pf_changed(:'before') AS changed;
SELECT to_regclass('payflow.operations') IS NOT NULL AS operations_still_there,
       (SELECT count(*) FROM payflow.outbox) > 0 AS outbox_not_emptied;
SELECT pf_row_counts() AS before \gset

---------------------------------------------------------------------------
-- submit_ref
---------------------------------------------------------------------------
SELECT n, label, sqlstate, message FROM pf_cases(ARRAY[
	'payment_id NULL',          $$SELECT payflow.submit_ref(NULL, 's3', 'k', 'sha256:' || repeat('0', 64), 1)$$,
	'store NULL',               $$SELECT payflow.submit_ref('p', NULL, 'k', 'sha256:' || repeat('0', 64), 1)$$,
	'store empty',              $$SELECT payflow.submit_ref('p', '', 'k', 'sha256:' || repeat('0', 64), 1)$$,
	'store unknown',            $$SELECT payflow.submit_ref('p', 'ftp', 'k', 'sha256:' || repeat('0', 64), 1)$$,
	'store upper case',         $$SELECT payflow.submit_ref('p', 'S3', 'k', 'sha256:' || repeat('0', 64), 1)$$,
	'store injection',          $$SELECT payflow.submit_ref('p', 's3''--', 'k', 'sha256:' || repeat('0', 64), 1)$$,
	'store long injection',     format($$SELECT payflow.submit_ref('p', %L, 'k', 'sha256:' || repeat('0', 64), 1)$$, :'inj'),
	'key NULL',                 $$SELECT payflow.submit_ref('p', 's3', NULL, 'sha256:' || repeat('0', 64), 1)$$,
	'key empty',                $$SELECT payflow.submit_ref('p', 's3', '', 'sha256:' || repeat('0', 64), 1)$$,
	'key 1025 chars',           $$SELECT payflow.submit_ref('p', 's3', repeat('k', 1025), 'sha256:' || repeat('0', 64), 1)$$,
	'checksum NULL',            $$SELECT payflow.submit_ref('p', 's3', 'k', NULL, 1)$$,
	'checksum md5',             $$SELECT payflow.submit_ref('p', 's3', 'k', 'md5:' || repeat('0', 32), 1)$$,
	'checksum upper hex',       $$SELECT payflow.submit_ref('p', 's3', 'k', 'sha256:' || repeat('A', 64), 1)$$,
	'checksum 63 digits',       $$SELECT payflow.submit_ref('p', 's3', 'k', 'sha256:' || repeat('0', 63), 1)$$,
	'checksum 77 chars',        $$SELECT payflow.submit_ref('p', 's3', 'k', 'hmac-sha256:' || repeat('0', 65), 1)$$,
	'checksum injection',       format($$SELECT payflow.submit_ref('p', 's3', 'k', %L, 1)$$, :'inj'),
	'size NULL',                $$SELECT payflow.submit_ref('p', 's3', 'k', 'sha256:' || repeat('0', 64), NULL)$$,
	'size negative',            $$SELECT payflow.submit_ref('p', 's3', 'k', 'sha256:' || repeat('0', 64), -1)$$,
	'pg key unknown',           $$SELECT payflow.submit_ref('p', 'pg', 'payments/none/request.json', 'sha256:' || repeat('0', 64), 1)$$,
	'pg key injection',         format($$SELECT payflow.submit_ref('p', 'pg', %L, 'sha256:' || repeat('0', 64), 1)$$, :'inj'),
	'idempotency_key empty',    $$SELECT payflow.submit_ref('p', 's3', 'k', 'sha256:' || repeat('0', 64), 1, '')$$,
	'correlation_id 256',       $$SELECT payflow.submit_ref('p', 's3', 'k', 'sha256:' || repeat('0', 64), 1, NULL, repeat('c', 256))$$
]);
-- a "pg" reference whose checksum or size does not match the stored payload: PF005
SELECT p.key AS stored_key, payflow._checksum(p.content) AS stored_sum, octet_length(p.content) AS stored_size
  FROM payflow.payloads p WHERE payflow._payload_operation(p.key) = :'op' \gset
SELECT n, label, sqlstate, message FROM pf_cases(ARRAY[
	'pg checksum mismatch',     format($$SELECT payflow.submit_ref('p', 'pg', %L, 'sha256:' || repeat('0', 64), %s)$$, :'stored_key', :stored_size),
	'pg size mismatch',         format($$SELECT payflow.submit_ref('p', 'pg', %L, %L, %s)$$, :'stored_key', :'stored_sum', :stored_size + 1)
]);
SELECT pf_changed(:'before') AS changed;
-- identifiers may hold no control character: SQS refuses them in message
-- attributes, and a newline would split a log line.
SELECT n, label, sqlstate, message FROM pf_cases(ARRAY[
	'payment_id with a newline', $$SELECT payflow.submit_ref(E'p\ns3', 's3', 'k', 'sha256:' || repeat('0', 64), 1, 'collide')$$,
	'key with a newline',        $$SELECT payflow.submit_ref('p', 's3', E's3\nk', 'sha256:' || repeat('0', 64), 1, 'collide')$$,
	'idempotency_key with a tab', $$SELECT payflow.submit('p', '{}', E'k\tk')$$,
	'correlation_id with a CR',  $$SELECT payflow.submit('p', '{}', 'k', E'c\rc')$$
]);
SELECT pf_changed(:'before') AS changed;
-- nor U+FFFE or U+FFFF: SQS refuses them in a message, so an event naming
-- one would be refused at every try of the relay (issue 26, M3)
SELECT n, label, sqlstate, message FROM pf_cases(ARRAY[
	'payment_id with U+FFFF',     $$SELECT payflow.submit(E'p\uFFFF', '{}')$$,
	'idempotency_key with U+FFFE', $$SELECT payflow.submit('p', '{}', E'k\uFFFE')$$,
	'correlation_id with U+FFFF', $$SELECT payflow.submit('p', '{}', 'k', E'c\uFFFFc')$$,
	'submit_ref with U+FFFE',     $$SELECT payflow.submit_ref(E'p\uFFFE', 's3', 'k', 'sha256:' || repeat('0', 64), 1)$$,
	'submit_many with U+FFFF',    $$SELECT payflow.submit_many(jsonb_build_array(jsonb_build_object('payment_id', E'p\uFFFF', 'details', '{}'::jsonb)))$$
]);
SELECT pf_changed(:'before') AS changed;
-- the characters next to them are fine (rolled back: the counts below stay)
SAVEPOINT fine_characters;
SELECT payflow.submit(E'p-ok\uFFFD\U0001F600\uE000', '{}') IS NOT NULL AS submitted;
ROLLBACK TO SAVEPOINT fine_characters;
SELECT pf_row_counts() AS before \gset
-- injection strings in the reference are data too
SELECT payflow.submit_ref(:'inj2', 's3', :'inj', 'sha256:' || repeat('0', 64), 0, 'ref-key', :'inj2') AS ref_op \gset
SELECT payflow._request_ref(id, request_ref, request_mac, request_size) ->> 'key' = :'inj' AS key_verbatim, payment_id = :'inj2' AS payment_verbatim
  FROM payflow.operations WHERE id = :'ref_op';
SELECT pf_changed(:'before') AS changed;
SELECT pf_row_counts() AS before \gset

---------------------------------------------------------------------------
-- cancel
---------------------------------------------------------------------------
SELECT n, label, sqlstate, message FROM pf_cases(ARRAY[
	'reason empty',             format($$SELECT payflow.cancel(%L, '')$$, :'op'),
	'reason 501 chars',         format($$SELECT payflow.cancel(%L, repeat('r', 501))$$, :'op')
]);
SELECT pf_changed(:'before') AS changed;
-- a reason with injection strings is stored verbatim in history and error
SELECT payflow.cancel(:'inj_op', :'inj') AS cancelled;
SELECT reason = :'inj' AS reason_verbatim FROM payflow.history(:'inj_op') WHERE to_status = 'CANCELLED';
SELECT error ->> 'message' = :'inj' AS error_verbatim FROM payflow.operations WHERE id = :'inj_op';
SELECT pf_row_counts() AS before \gset

---------------------------------------------------------------------------
-- claim_step, heartbeat, save_step_ref
---------------------------------------------------------------------------
SELECT n, label, sqlstate, message FROM pf_cases(ARRAY[
	'step NULL',                format($$SELECT payflow.claim_step(%L, NULL, 'w')$$, :'op'),
	'step empty',               format($$SELECT payflow.claim_step(%L, '', 'w')$$, :'op'),
	'step lower case',          format($$SELECT payflow.claim_step(%L, 'process_payment', 'w')$$, :'op'),
	'step 65 chars',            format($$SELECT payflow.claim_step(%L, repeat('S', 65), 'w')$$, :'op'),
	'step injection',           format($$SELECT payflow.claim_step(%L, %L, 'w')$$, :'op', :'inj'),
	'worker_id NULL',           format($$SELECT payflow.claim_step(%L, 'PROCESS_PAYMENT', NULL)$$, :'op'),
	'worker_id empty',          format($$SELECT payflow.claim_step(%L, 'PROCESS_PAYMENT', '')$$, :'op'),
	'worker_id 201 chars',      format($$SELECT payflow.claim_step(%L, 'PROCESS_PAYMENT', repeat('w', 201))$$, :'op'),
	'lease_seconds NULL',       format($$SELECT payflow.claim_step(%L, 'PROCESS_PAYMENT', 'w', NULL)$$, :'op'),
	'lease_seconds 0',          format($$SELECT payflow.claim_step(%L, 'PROCESS_PAYMENT', 'w', 0)$$, :'op'),
	'lease_seconds -1',         format($$SELECT payflow.claim_step(%L, 'PROCESS_PAYMENT', 'w', -1)$$, :'op'),
	'lease_seconds 86401',      format($$SELECT payflow.claim_step(%L, 'PROCESS_PAYMENT', 'w', 86401)$$, :'op'),
	'lease_seconds not int',    format($$SELECT payflow.claim_step(%L, 'PROCESS_PAYMENT', 'w', '1.5'::text::integer)$$, :'op'),
	'heartbeat step NULL',      format($$SELECT payflow.heartbeat(%L, NULL, 'w')$$, :'op'),
	'heartbeat worker empty',   format($$SELECT payflow.heartbeat(%L, 'PROCESS_PAYMENT', '')$$, :'op'),
	'heartbeat lease 0',        format($$SELECT payflow.heartbeat(%L, 'PROCESS_PAYMENT', 'w', 0)$$, :'op'),
	'save_step_ref ref NULL',   format($$SELECT payflow.save_step_ref(%L, 'PROCESS_PAYMENT', 'w', NULL)$$, :'op'),
	'save_step_ref ref empty',  format($$SELECT payflow.save_step_ref(%L, 'PROCESS_PAYMENT', 'w', '')$$, :'op'),
	'save_step_ref ref 1001',   format($$SELECT payflow.save_step_ref(%L, 'PROCESS_PAYMENT', 'w', repeat('r', 1001))$$, :'op'),
	'save_step_ref not held',   format($$SELECT payflow.save_step_ref(%L, 'PROCESS_PAYMENT', 'w', 'r')$$, :'op')
]);
-- an unknown step name at heartbeat is an error, as at claim_step
SELECT * FROM pf_try(format($$SELECT payflow.heartbeat(%L, %L, 'w')$$, :'op', :'inj'));
SELECT pf_changed(:'before') AS changed;

-- a worker id full of injection strings works as a worker id
SELECT c ->> 'action' AS action FROM payflow.claim_step(:'op', 'PROCESS_PAYMENT', :'inj') c;
SELECT lease_owner = :'inj' AS owner_verbatim FROM payflow.steps WHERE operation_id = :'op';
SELECT payflow.heartbeat(:'op', 'PROCESS_PAYMENT', :'inj') AS renewed,
       payflow.heartbeat(:'op', 'PROCESS_PAYMENT', :'inj2') AS other_worker_not_renewed;
SELECT payflow.save_step_ref(:'op', 'PROCESS_PAYMENT', :'inj', :'inj2') AS saved;
SELECT external_ref = :'inj2' AS ref_verbatim FROM payflow.steps WHERE operation_id = :'op';
SELECT actor = :'inj' AS actor_verbatim FROM payflow.operation_history
 WHERE operation_id = :'op' AND to_status = 'PAYMENT_PROCESSING';
SELECT pf_row_counts() AS before \gset

---------------------------------------------------------------------------
-- complete_step, fail_step
---------------------------------------------------------------------------
SELECT n, label, sqlstate, message FROM pf_cases(ARRAY[
	'result NULL',              format($$SELECT payflow.complete_step(%L, 'PROCESS_PAYMENT', %L, NULL)$$, :'op', :'inj'),
	'result array',             format($$SELECT payflow.complete_step(%L, 'PROCESS_PAYMENT', %L, '[1]')$$, :'op', :'inj'),
	'result string',            format($$SELECT payflow.complete_step(%L, 'PROCESS_PAYMENT', %L, '"ok"')$$, :'op', :'inj'),
	'result number',            format($$SELECT payflow.complete_step(%L, 'PROCESS_PAYMENT', %L, '1')$$, :'op', :'inj'),
	'result JSON null',         format($$SELECT payflow.complete_step(%L, 'PROCESS_PAYMENT', %L, 'null')$$, :'op', :'inj'),
	'result_ref array',         format($$SELECT payflow.complete_step(%L, 'PROCESS_PAYMENT', %L, '{}', '[]')$$, :'op', :'inj'),
	'step unknown',             format($$SELECT payflow.complete_step(%L, 'REFUND', %L, '{}')$$, :'op', :'inj'),
	'worker_id NULL',           format($$SELECT payflow.complete_step(%L, 'PROCESS_PAYMENT', NULL, '{}')$$, :'op'),
	'not the lease holder',     format($$SELECT payflow.complete_step(%L, 'PROCESS_PAYMENT', %L, '{}')$$, :'op', :'inj2'),
	'step not claimed',         format($$SELECT payflow.complete_step(%L, 'POST_PROCESS', %L, '{}')$$, :'op', :'inj'),
	'error NULL',               format($$SELECT payflow.fail_step(%L, 'PROCESS_PAYMENT', %L, NULL, true)$$, :'op', :'inj'),
	'error array',              format($$SELECT payflow.fail_step(%L, 'PROCESS_PAYMENT', %L, '["x"]', true)$$, :'op', :'inj'),
	'error string',             format($$SELECT payflow.fail_step(%L, 'PROCESS_PAYMENT', %L, '"declined"', true)$$, :'op', :'inj'),
	'error number',             format($$SELECT payflow.fail_step(%L, 'PROCESS_PAYMENT', %L, '402', true)$$, :'op', :'inj'),
	'retryable NULL',           format($$SELECT payflow.fail_step(%L, 'PROCESS_PAYMENT', %L, '{}', NULL)$$, :'op', :'inj'),
	'not the lease holder',     format($$SELECT payflow.fail_step(%L, 'PROCESS_PAYMENT', %L, '{}', true)$$, :'op', :'inj2')
]);
-- oversize: an error over payload_max_bytes is PF007; a result over it is
-- PF007 where the result becomes a payload
SET payflow.payload_max_bytes = 1024;
SELECT n, label, sqlstate, message FROM pf_cases(ARRAY[
	'error of 2 kB',            format($$SELECT payflow.fail_step(%L, 'PROCESS_PAYMENT', %L, jsonb_build_object('message', repeat('e', 2000)), true)$$, :'op', :'inj'),
	'result of 2 kB',           format($$SELECT payflow.complete_step(%L, 'PROCESS_PAYMENT', %L, jsonb_build_object('blob', repeat('r', 2000)))$$, :'op', :'inj')
]);
RESET payflow.payload_max_bytes;
SELECT pf_changed(:'before') AS changed;
-- still RUNNING under its lease: nothing above moved it
SELECT o.status, s.status AS step_status, s.attempt FROM payflow.operations o
  JOIN payflow.steps s ON s.operation_id = o.id WHERE o.id = :'op';

-- a retryable failure whose error carries injection strings and an absurd
-- retryAfterSeconds: stored verbatim, the delay capped by retry_max_delay
SET payflow.retry_jitter = 0;
SELECT f ->> 'action' AS action FROM payflow.fail_step(:'op', 'PROCESS_PAYMENT', :'inj',
	jsonb_build_object('code', :'inj2', 'message', :'inj', 'retryAfterSeconds', 1e300), true) f;
SELECT last_error ->> 'code' = :'inj2' AS code_verbatim,
       next_attempt_at - now() <= payflow._seconds('retry_max_delay') AS delay_capped
  FROM payflow.steps WHERE operation_id = :'op';
-- a retryAfterSeconds beyond float8 or of the wrong type
SELECT n, label, sqlstate, message FROM pf_cases(ARRAY[
	'retryAfterSeconds 1e400',  format($$SELECT payflow.fail_step(%L, 'PROCESS_PAYMENT', %L, '{"code": "x", "retryAfterSeconds": 1e400}', true)$$, :'op', :'inj'),
	'retryAfterSeconds "10"',   format($$SELECT payflow.fail_step(%L, 'PROCESS_PAYMENT', %L, '{"code": "y", "retryAfterSeconds": "10"}', true)$$, :'op', :'inj'),
	'retryAfterSeconds -5',     format($$SELECT payflow.fail_step(%L, 'PROCESS_PAYMENT', %L, '{"code": "z", "retryAfterSeconds": -5}', true)$$, :'op', :'inj')
]);
RESET payflow.retry_jitter;
-- a completion with injection strings in the result, stored verbatim in
-- the result payload
UPDATE payflow.operations SET step_next_attempt_at = now() WHERE id = :'op';
SELECT c ->> 'action' AS action FROM payflow.claim_step(:'op', 'PROCESS_PAYMENT', :'inj') c;
SELECT c ->> 'status' AS status FROM payflow.complete_step(:'op', 'PROCESS_PAYMENT', :'inj',
	jsonb_build_object('charge_id', :'inj', :'inj2', :'inj2')) c;
SELECT convert_from(content, 'UTF8')::jsonb = jsonb_build_object('charge_id', :'inj', :'inj2', :'inj2') AS result_verbatim
  FROM payflow.payloads WHERE payflow._payload_operation(key) = :'op' AND key LIKE '%/payment-result.json';
-- The last step's result travels inline in OperationCompleted (SQS takes
-- 256 KiB): above 64 KiB it is refused with PF007 and nothing is emitted.
SET payflow.payload_max_bytes = 1024;
SELECT payflow.submit('bad-input-big-result', '{}') AS op_big \gset
SELECT (payflow.claim_step(:'op_big', s, 'w')) ->> 'action' AS claimed,
       (payflow.complete_step(:'op_big', s, 'w', '{}')) ->> 'status' AS status
  FROM unnest(ARRAY['PROCESS_PAYMENT', 'POST_PROCESS']) s;
SELECT (payflow.claim_step(:'op_big', 'CREATE_INVOICE', 'w')) ->> 'action' AS claimed;
SELECT * FROM pf_try(format($$SELECT payflow.complete_step(%L, 'CREATE_INVOICE', 'w', jsonb_build_object('blob', repeat('r', 300000)))$$, :'op_big'));
RESET payflow.payload_max_bytes;
SELECT * FROM pf_try(format($$SELECT payflow.complete_step(%L, 'CREATE_INVOICE', 'w', jsonb_build_object('blob', repeat('r', 70000)))$$, :'op_big'));
SELECT count(*) AS completed_events
  FROM payflow.outbox WHERE operation_id = :'op_big' AND event_type = 'OperationCompleted';
SET payflow.payload_max_bytes = 1024;
RESET payflow.payload_max_bytes;
SELECT pf_row_counts() AS before \gset

---------------------------------------------------------------------------
-- payload_get, payload_put
---------------------------------------------------------------------------
SELECT payflow._request_ref(id, request_ref, request_mac, request_size)::text AS ref FROM payflow.operations WHERE id = :'op' \gset
SELECT n, label, sqlstate, message FROM pf_cases(ARRAY[
	'ref NULL',                 $$SELECT payflow.payload_get(NULL)$$,
	'ref array',                $$SELECT payflow.payload_get('[]')$$,
	'ref string',               $$SELECT payflow.payload_get('"payments/x/request.json"')$$,
	'ref store missing',        $$SELECT payflow.payload_get('{"key": "k", "checksum": "c"}')$$,
	'ref store s3',             $$SELECT payflow.payload_get('{"store": "s3", "key": "k", "checksum": "c"}')$$,
	'ref key missing',          $$SELECT payflow.payload_get('{"store": "pg", "checksum": "c"}')$$,
	'ref key a number',         $$SELECT payflow.payload_get('{"store": "pg", "key": 7, "checksum": "c"}')$$,
	'ref key empty',            $$SELECT payflow.payload_get('{"store": "pg", "key": "", "checksum": "c"}')$$,
	'ref checksum missing',     $$SELECT payflow.payload_get('{"store": "pg", "key": "k"}')$$,
	'ref key unknown',          $$SELECT payflow.payload_get('{"store": "pg", "key": "payments/none/request.json", "checksum": "c"}')$$,
	'ref key injection',        format($$SELECT payflow.payload_get(jsonb_build_object('store', 'pg', 'key', %L, 'checksum', 'c'))$$, :'inj'),
	'ref checksum mismatch',    format($$SELECT payflow.payload_get(%L::jsonb || '{"checksum": "sha256:%s"}')$$, :'ref', repeat('0', 64)),
	'put name NULL',            format($$SELECT payflow.payload_put(%L, NULL, '\x00')$$, :'op'),
	'put name empty',           format($$SELECT payflow.payload_put(%L, '', '\x00')$$, :'op'),
	'put name 101 chars',       format($$SELECT payflow.payload_put(%L, repeat('n', 101), '\x00')$$, :'op'),
	'put name with /',          format($$SELECT payflow.payload_put(%L, '../other/request.json', '\x00')$$, :'op'),
	'put name injection',       format($$SELECT payflow.payload_put(%L, %L, '\x00')$$, :'op', :'inj'),
	'put content NULL',         format($$SELECT payflow.payload_put(%L, 'a.json', NULL)$$, :'op'),
	'put over request.json',    format($$SELECT payflow.payload_put(%L, 'request.json', 'other')$$, :'op')
]);
SET payflow.payload_max_bytes = 1024;
SELECT * FROM pf_try(format($$SELECT payflow.payload_put(%L, 'big.bin', convert_to(repeat('b', 1025), 'UTF8'))$$, :'op'));
RESET payflow.payload_max_bytes;
SELECT pf_changed(:'before') AS changed;
SELECT pf_row_counts() AS before \gset

---------------------------------------------------------------------------
-- default_postprocess, invoke_postprocess
---------------------------------------------------------------------------
SELECT n, label, sqlstate, message FROM pf_cases(ARRAY[
	'payment_result NULL',      format($$SELECT payflow.default_postprocess(%L, NULL)$$, :'op'),
	'payment_result array',     format($$SELECT payflow.default_postprocess(%L, '[]')$$, :'op'),
	'hook NULL',                format($$SELECT payflow.invoke_postprocess(NULL, %L, '{}')$$, :'op'),
	'hook no such function',    format($$SELECT payflow.invoke_postprocess('public.nope(text,jsonb)', %L, '{}')$$, :'op'),
	'hook injection',           format($$SELECT payflow.invoke_postprocess(%L, %L, '{}')$$, :'inj', :'op'),
	'hook wrong signature',     format($$SELECT payflow.invoke_postprocess('pg_catalog.length(text)', %L, '{}')$$, :'op'),
	'hook op malformed',        format($$SELECT payflow.invoke_postprocess('payflow.default_postprocess(text,jsonb)', %L, '{}')$$, :'inj')
]);
SELECT pf_changed(:'before') AS changed;

---------------------------------------------------------------------------
-- mark_consumed, record_dead_letter
---------------------------------------------------------------------------
SELECT n, label, sqlstate, message FROM pf_cases(ARRAY[
	'consumer NULL',            $$SELECT payflow.mark_consumed(NULL, gen_random_uuid())$$,
	'consumer empty',           $$SELECT payflow.mark_consumed('', gen_random_uuid())$$,
	'consumer 201 chars',       $$SELECT payflow.mark_consumed(repeat('c', 201), gen_random_uuid())$$,
	'event_id NULL',            $$SELECT payflow.mark_consumed('c', NULL)$$,
	'event_id not a uuid',      $$SELECT payflow.mark_consumed('c', 'not-a-uuid')$$,
	'event_id injection',       format($$SELECT payflow.mark_consumed('c', %L)$$, :'inj'),
	'queue NULL',               $$SELECT payflow.record_dead_letter(NULL, 'body', '{}')$$,
	'queue empty',              $$SELECT payflow.record_dead_letter('', 'body', '{}')$$,
	'queue 1001 chars',         $$SELECT payflow.record_dead_letter(repeat('q', 1001), 'body', '{}')$$,
	'error NULL',               $$SELECT payflow.record_dead_letter('q', 'body', NULL)$$,
	'error array',              $$SELECT payflow.record_dead_letter('q', 'body', '[]')$$,
	'error string',             $$SELECT payflow.record_dead_letter('q', 'body', '"bad"')$$
]);
SELECT pf_changed(:'before') AS changed;
-- injection strings as consumer, queue, body and operation id are data;
-- an operation id that is not one is not kept as one
SELECT payflow.mark_consumed(:'inj', '00000000-0000-0000-0000-000000000001') AS first,
       payflow.mark_consumed(:'inj', '00000000-0000-0000-0000-000000000001') AS second;
SELECT payflow.record_dead_letter(:'inj', :'inj2', jsonb_build_object('code', :'inj'), :'inj') AS dl \gset
SELECT queue = :'inj' AS queue_verbatim, message_body = :'inj2' AS body_verbatim,
       error ->> 'code' = :'inj' AS error_verbatim, operation_id IS NULL AS bad_operation_id_dropped
  FROM payflow.dead_letters WHERE id = :dl;
-- a body of 300 kB is kept up to 256 KiB; no body at all is allowed
SELECT payflow.record_dead_letter('q', repeat('m', 300000), '{"code": "big"}') AS dl_big,
       payflow.record_dead_letter('q', NULL, '{"code": "empty"}') AS dl_empty \gset
SELECT length(message_body) AS kept_chars FROM payflow.dead_letters WHERE id = :dl_big;
SELECT message_body IS NULL AS no_body FROM payflow.dead_letters WHERE id = :dl_empty;
SELECT pf_changed(:'before') AS changed;
SELECT pf_row_counts() AS before \gset

---------------------------------------------------------------------------
-- outbox_claim, outbox_ack, outbox_nack
---------------------------------------------------------------------------
SELECT n, label, sqlstate, message FROM pf_cases(ARRAY[
	'max_events NULL',          $$SELECT * FROM payflow.outbox_claim(NULL, 'r')$$,
	'max_events 0',             $$SELECT * FROM payflow.outbox_claim(0, 'r')$$,
	'max_events -1',            $$SELECT * FROM payflow.outbox_claim(-1, 'r')$$,
	'max_events 10001',         $$SELECT * FROM payflow.outbox_claim(10001, 'r')$$,
	'max_events bigint',        $$SELECT * FROM payflow.outbox_claim(2147483648, 'r')$$,
	'relay_id NULL',            $$SELECT * FROM payflow.outbox_claim(1, NULL)$$,
	'relay_id empty',           $$SELECT * FROM payflow.outbox_claim(1, '')$$,
	'relay_id 201 chars',       $$SELECT * FROM payflow.outbox_claim(1, repeat('r', 201))$$,
	'lease_seconds 0',          $$SELECT * FROM payflow.outbox_claim(1, 'r', 0)$$,
	'lease_seconds NULL',       $$SELECT * FROM payflow.outbox_claim(1, 'r', NULL)$$,
	'ack NULL',                 $$SELECT payflow.outbox_ack(NULL)$$,
	'ack ids not uuids',        $$SELECT payflow.outbox_ack(ARRAY['x'])$$,
	'ack 2 ids, 1 message id',  $$SELECT payflow.outbox_ack(ARRAY[gen_random_uuid(), gen_random_uuid()], ARRAY['m'], 'r')$$,
	'ack relay NULL',           $$SELECT payflow.outbox_ack(ARRAY[gen_random_uuid()], NULL, NULL)$$,
	'ack relay 201 chars',      $$SELECT payflow.outbox_ack(ARRAY[gen_random_uuid()], NULL, repeat('r', 201))$$,
	'nack relay NULL',          $$SELECT payflow.outbox_nack(gen_random_uuid(), 'e', NULL)$$,
	'nack NULL',                $$SELECT payflow.outbox_nack(NULL, 'e')$$,
	'nack not a uuid',          format($$SELECT payflow.outbox_nack(%L, 'e')$$, :'inj')
]);
SELECT pf_changed(:'before') AS changed;
-- unknown event ids are no error: nothing acked, nothing nacked
SELECT payflow.outbox_ack(ARRAY['00000000-0000-0000-0000-000000000002'::uuid], ARRAY['m'], 'r') AS acked,
       payflow.outbox_ack(ARRAY[NULL::uuid], NULL, 'r') AS acked_null,
       payflow.outbox_nack('00000000-0000-0000-0000-000000000002', NULL, 'r') AS nacked;
-- a relay id, a message id and a nack error full of injection strings are data
SELECT count(*) AS claimed FROM payflow.outbox_claim(1, :'inj');
SELECT event_id AS ev FROM payflow.outbox WHERE claimed_by = :'inj' \gset
SELECT payflow.outbox_nack(:'ev', :'inj2', :'inj') AS nacked;
SELECT last_error = :'inj2' AS error_verbatim, claimed_by IS NULL AS released FROM payflow.outbox WHERE event_id = :'ev';
UPDATE payflow.outbox SET available_at = now() WHERE event_id = :'ev';
SELECT count(*) AS claimed_again FROM payflow.outbox_claim(1, :'inj');
SELECT payflow.outbox_ack(ARRAY[:'ev'::uuid], ARRAY[:'inj'], :'inj') AS acked;
SELECT message_id = :'inj' AS message_id_verbatim FROM payflow.outbox_published WHERE event_id = :'ev';
SELECT pf_row_counts() AS before \gset

---------------------------------------------------------------------------
-- replay, run_scheduler, purge, schedule_purge, create_api_key, backoff_delay
---------------------------------------------------------------------------
SELECT n, label, sqlstate, message FROM pf_cases(ARRAY[
	'replay NULL',              $$SELECT payflow.replay(NULL)$$,
	'run_scheduler NULL',       $$SELECT payflow.run_scheduler(NULL)$$,
	'run_scheduler 0',          $$SELECT payflow.run_scheduler(0)$$,
	'purge NULL',               $$SELECT payflow.purge(NULL)$$,
	'purge -1',                 $$SELECT payflow.purge(-1)$$,
	'schedule_purge NULL',      $$SELECT payflow.schedule_purge(NULL)$$,
	'schedule_purge empty',     $$SELECT payflow.schedule_purge('')$$,
	'create_api_key NULL',      $$SELECT payflow.create_api_key(NULL)$$,
	'create_api_key empty',     $$SELECT payflow.create_api_key('')$$,
	'create_api_key 201',       $$SELECT payflow.create_api_key(repeat('t', 201))$$,
	'create_api_key name empty', $$SELECT payflow.create_api_key('t', '')$$,
	'backoff attempt -1',       $$SELECT payflow.backoff_delay(-1, '1 second', '1 minute')$$,
	'backoff base negative',    $$SELECT payflow.backoff_delay(1, '-1 second', '1 minute')$$,
	'backoff jitter 2',         $$SELECT payflow.backoff_delay(1, '1 second', '1 minute', 2)$$,
	'backoff jitter NaN',       $$SELECT payflow.backoff_delay(1, '1 second', '1 minute', 'NaN')$$
]);
-- a replay of an operation that is not FAILED is false, not an error
SELECT payflow.replay(:'op') AS replayed;
-- backoff_delay is STRICT: NULL in, NULL out; huge attempts saturate at the cap
SELECT payflow.backoff_delay(NULL, '1 second', '1 minute') IS NULL AS strict,
       payflow.backoff_delay(2147483647, '1 second', '1 minute', 0) = '1 minute' AS saturated_at_cap;
SELECT pf_changed(:'before') AS changed;
-- an API key's tenant and name with injection strings are data
SELECT payflow.create_api_key(:'inj', :'inj2') ~ '^pfk_[0-9a-f]{64}$' AS key_made;
SELECT tenant = :'inj' AS tenant_verbatim, name = :'inj2' AS name_verbatim
  FROM payflow.api_keys ORDER BY id DESC LIMIT 1;

---------------------------------------------------------------------------
-- webhooks: set_webhook, delete_webhook, webhook_target,
-- record_webhook_failure, replay_webhook; revoke_api_key; changes
---------------------------------------------------------------------------
-- an operation that failed, so payflow published an OperationFailed event
-- for it: the only kind of event webhooks deliver and failures record
SELECT payflow.submit(:'inj' || '-wh', '{}') AS wh_op \gset
SELECT payflow.claim_step(:'wh_op', 'PROCESS_PAYMENT', 'bi-w') ->> 'action' = 'run'
	   AND payflow.fail_step(:'wh_op', 'PROCESS_PAYMENT', 'bi-w', jsonb_build_object('message', :'inj2'), false) ->> 'action' = 'failed' AS wh_failed;
SELECT event_id AS wh_ev, body AS wh_body FROM payflow.outbox
 WHERE operation_id = :'wh_op' AND destination = 'operation-events' \gset
SELECT pf_row_counts() AS before \gset
SELECT n, label, sqlstate, message FROM pf_cases(ARRAY[
	'set_webhook tenant NULL',  $$SELECT payflow.set_webhook(NULL, 'https://hooks.test/h')$$,
	'set_webhook tenant empty', $$SELECT payflow.set_webhook('', 'https://hooks.test/h')$$,
	'set_webhook tenant 201',   $$SELECT payflow.set_webhook(repeat('t', 201), 'https://hooks.test/h')$$,
	'set_webhook url NULL',     $$SELECT payflow.set_webhook('t', NULL)$$,
	'set_webhook url empty',    $$SELECT payflow.set_webhook('t', '')$$,
	'set_webhook url 2001',     $$SELECT payflow.set_webhook('t', 'https://hooks.test/' || repeat('a', 1982))$$,
	'set_webhook url ftp',      $$SELECT payflow.set_webhook('t', 'ftp://hooks.test/h')$$,
	'set_webhook url javascript', $$SELECT payflow.set_webhook('t', 'javascript:alert(1)')$$,
	'set_webhook url no host',  $$SELECT payflow.set_webhook('t', 'https:///h')$$,
	'set_webhook url space',    $$SELECT payflow.set_webhook('t', 'https://hooks.test/a b')$$,
	'set_webhook url injection', format($$SELECT payflow.set_webhook('t', %L)$$, :'inj'),
	'delete_webhook NULL',      $$SELECT payflow.delete_webhook(NULL)$$,
	'webhook_target NULL',      $$SELECT payflow.webhook_target(NULL)$$,
	'webhook_target malformed', format($$SELECT payflow.webhook_target(%L)$$, :'inj'),
	'webhook_target unknown',   format($$SELECT payflow.webhook_target(%L)$$, :'unknown'),
	'webhook_target event NULL', format($$SELECT payflow.webhook_target(%L, NULL, %L)$$, :'wh_op', :'wh_body'),
	'webhook_target body NULL', format($$SELECT payflow.webhook_target(%L, %L, NULL)$$, :'wh_op', :'wh_ev'),
	'webhook_target forged id', format($$SELECT payflow.webhook_target(%L, gen_random_uuid(), %L)$$, :'wh_op', :'wh_body'),
	'webhook_target forged body', format($$SELECT payflow.webhook_target(%L, %L, %L)$$, :'wh_op', :'wh_ev', :'inj'),
	'webhook_target other op',  format($$SELECT payflow.webhook_target(%L, %L, %L)$$, :'op', :'wh_ev', :'wh_body'),
	'failure not published',    format($$SELECT payflow.record_webhook_failure(gen_random_uuid(), %L, '{"eventType": "OperationCompleted"}', 1, '{}')$$, :'op'),
	'failure event NULL',       format($$SELECT payflow.record_webhook_failure(NULL, %L, '{}', 1, '{}')$$, :'op'),
	'failure op malformed',     format($$SELECT payflow.record_webhook_failure(gen_random_uuid(), %L, '{}', 1, '{}')$$, :'inj'),
	'failure op unknown',       format($$SELECT payflow.record_webhook_failure(gen_random_uuid(), %L, '{"eventType": "OperationCompleted"}', 1, '{}')$$, :'unknown'),
	'failure body NULL',        format($$SELECT payflow.record_webhook_failure(gen_random_uuid(), %L, NULL, 1, '{}')$$, :'op'),
	'failure body an array',    format($$SELECT payflow.record_webhook_failure(gen_random_uuid(), %L, '[1]', 1, '{}')$$, :'op'),
	'failure body empty',       format($$SELECT payflow.record_webhook_failure(gen_random_uuid(), %L, '', 1, '{}')$$, :'op'),
	'failure body not JSON',    format($$SELECT payflow.record_webhook_failure(gen_random_uuid(), %L, %L, 1, '{}')$$, :'op', :'inj'),
	'failure body 256 KiB + 1', format($$SELECT payflow.record_webhook_failure(gen_random_uuid(), %L, repeat(' ', 262145), 1, '{}')$$, :'op'),
	'failure attempts NULL',    format($$SELECT payflow.record_webhook_failure(gen_random_uuid(), %L, '{"eventType": "OperationCompleted"}', NULL, '{}')$$, :'op'),
	'failure attempts 0',       format($$SELECT payflow.record_webhook_failure(gen_random_uuid(), %L, '{"eventType": "OperationCompleted"}', 0, '{}')$$, :'op'),
	'failure error array',      format($$SELECT payflow.record_webhook_failure(gen_random_uuid(), %L, '{"eventType": "OperationCompleted"}', 1, '[]')$$, :'op'),
	'revoke_api_key NULL',      $$SELECT payflow.revoke_api_key(NULL)$$,
	'revoke_api_key unknown',   $$SELECT payflow.revoke_api_key(-1)$$,
	'replay_webhook NULL',      $$SELECT payflow.replay_webhook(NULL)$$,
	'replay_webhook unknown',   $$SELECT payflow.replay_webhook(-1)$$,
	'changes NULL',             $$SELECT * FROM payflow.changes(NULL)$$,
	'changes 10001 ids',        $$SELECT * FROM payflow.changes(array_fill('x'::text, ARRAY[10001]))$$
]);
SELECT pf_changed(:'before') AS changed;
-- changes() takes any text: malformed, unknown and NULL ids are just absent
SELECT count(*) AS changes_rows FROM payflow.changes(ARRAY[:'inj', :'unknown', NULL, ''], -1);
-- a tenant full of injection strings is data; the URL is kept verbatim
SELECT payflow.set_webhook(:'inj', 'https://hooks.test/h?q=%27%3B--') ~ '^whsec_[0-9a-f]{64}$' AS secret_made;
SELECT url = 'https://hooks.test/h?q=%27%3B--' AS url_verbatim FROM payflow.webhooks WHERE tenant = :'inj';
SELECT payflow.delete_webhook(:'inj') AS deleted, payflow.delete_webhook(:'inj') AS deleted_again;
-- a delivery failure of the operation (tenant '' has no webhook: no URL)
SELECT payflow.webhook_target(:'wh_op', :'wh_ev', :'wh_body') IS NULL AS no_webhook;
SELECT payflow.record_webhook_failure(:'wh_ev', :'wh_op', :'wh_body', 3,
	jsonb_build_object('message', :'inj2')) AS wf \gset
SELECT payment = :'inj' || '-wh' AS body_verbatim, url = '' AS no_url
  FROM (SELECT body ->> 'paymentId' AS payment, url FROM payflow.webhook_failures WHERE id = :wf) f;
SELECT payflow.replay_webhook(:wf) AS replayed, payflow.replay_webhook(:wf) AS replayed_again;
-- a failure whose body is JSON but not an event is refused (its replay
-- could not be sent)
SELECT * FROM pf_try(format($$SELECT payflow.record_webhook_failure('00000000-0000-0000-0000-000000000004', %L, '[1, 2]', 1, NULL)$$, :'op'));
SELECT * FROM pf_try(format($$SELECT payflow.record_webhook_failure('00000000-0000-0000-0000-000000000004', %L, '{"eventType": 7}', 1, NULL)$$, :'op'));
SELECT pf_changed(:'before') AS changed;
SELECT pf_row_counts() AS before \gset

---------------------------------------------------------------------------
-- authenticate (last: a good key binds its tenant to this transaction)
---------------------------------------------------------------------------
SELECT payflow.create_api_key('tenant-a') AS key_a, payflow.create_api_key('tenant-r') AS key_r \gset
SELECT payflow.revoke_api_key(id) AS revoked FROM payflow.api_keys WHERE tenant = 'tenant-r';
SELECT n, label, sqlstate, message FROM pf_cases(ARRAY[
	'NULL',                     $$SELECT payflow.authenticate(NULL)$$,
	'empty',                    $$SELECT payflow.authenticate('')$$,
	'10 000 characters',        $$SELECT payflow.authenticate(repeat('k', 10000))$$,
	'unknown key',              $$SELECT payflow.authenticate('pfk_' || repeat('0', 64))$$,
	'key with a space',         format($$SELECT payflow.authenticate(%L)$$, :'key_a' || ' '),
	'key upper case',           format($$SELECT payflow.authenticate(%L)$$, upper(:'key_a')),
	'the hash of a key',        format($$SELECT payflow.authenticate(%L)$$, encode(sha256(convert_to(:'key_a', 'UTF8')), 'hex')),
	'revoked key',              format($$SELECT payflow.authenticate(%L)$$, :'key_r'),
	'SQL injection',            format($$SELECT payflow.authenticate(%L)$$, :'inj'),
	'injection for a tenant',   $$SELECT payflow.authenticate($k$' OR '1'='1$k$)$$
]);
-- no tenant was bound by any of them
SELECT payflow._current_tenant() = '' AS still_no_tenant;
-- a tenant of 150 non-ASCII characters (300 bytes) authenticates: the
-- binding holds 200 characters of any width
SELECT payflow.create_api_key(repeat('é', 150)) AS key_wide \gset
SELECT * FROM pf_try(format($$SELECT payflow.authenticate(%L)$$, :'key_wide'));
SELECT pf_changed(:'before') AS changed;
-- a good key: its tenant for the rest of the transaction; operations of
-- other tenants look unknown (PF003), their changes are absent
SELECT payflow.authenticate(:'key_a') AS tenant;
SELECT * FROM pf_try(format($$SELECT payflow.status(%L)$$, :'op'));
SELECT * FROM pf_try(format($$SELECT payflow.cancel(%L)$$, :'op'));
SELECT count(*) AS other_tenants_changes FROM payflow.changes(ARRAY[:'op']);
-- idempotency keys are per tenant: the same payment id is a new operation
SELECT payflow.submit('bad-input-1', '{"amount": 1}') <> :'op' AS new_operation_in_tenant;

-- the schema is whole after all of it
SELECT count(*) = :tables_before AS every_table_still_there FROM pg_class
 WHERE relnamespace = 'payflow'::regnamespace AND relkind = 'r';

ROLLBACK;
