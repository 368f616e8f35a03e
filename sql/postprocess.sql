-- Post-processing hooks: the default one, and any (text, jsonb) -> jsonb
-- function run with the caller's rights in complete_step's transaction.
SELECT payflow.submit('pp-1', '{"amount": 1250, "currency": "EUR", "customer": "C-9", "card_number": "4111111111111111"}') AS op \gset
SELECT payflow.claim_step(:'op', 'PROCESS_PAYMENT', 'w') ->> 'action' AS action;
SELECT payflow.complete_step(:'op', 'PROCESS_PAYMENT', 'w', '{"charge_id": "CH-1", "status": "CHARGED"}') ->> 'status' AS status;

-- the default hook copies fields by name: never the card number
SELECT h - 'operationId' AS invoice_input, h ->> 'operationId' = :'op' AS op_ok
  FROM payflow.default_postprocess(:'op', '{"charge_id": "CH-1"}') h;

-- one statement: hook + complete_step, one transaction
SELECT payflow.claim_step(:'op', 'POST_PROCESS', 'pp') ->> 'action' AS action;
SELECT payflow.complete_step(:'op', 'POST_PROCESS', 'pp',
	   payflow.invoke_postprocess('payflow.default_postprocess(text,jsonb)', :'op', '{"charge_id": "CH-1"}')) ->> 'eventType' AS event;
-- (the whole card number: its first digits can occur in a random id or checksum)
SELECT convert_from(payflow.payload_get(body -> 'invoiceInput'), 'UTF8')::jsonb - 'operationId' AS invoice_input_sent,
       position('4111111111111111' IN body::text) = 0 AS no_card_in_message
  FROM payflow.outbox WHERE operation_id = :'op' AND event_type = 'InvoiceRequested';

-- a custom hook
CREATE FUNCTION my_hook(operation_id text, payment_result jsonb) RETURNS jsonb
	LANGUAGE sql AS $$ SELECT jsonb_build_object('ref', payment_result ->> 'charge_id', 'lines', 2) $$;
SELECT payflow.invoke_postprocess('my_hook(text,jsonb)', :'op', '{"charge_id": "CH-2"}') AS custom;
-- wrong signature, wrong answer, unknown function
CREATE FUNCTION bad_sig(text) RETURNS jsonb LANGUAGE sql AS $$ SELECT '{}'::jsonb $$;
CREATE FUNCTION bad_answer(text, jsonb) RETURNS jsonb LANGUAGE sql AS $$ SELECT '[1]'::jsonb $$;
SELECT * FROM pf_try(format($$SELECT payflow.invoke_postprocess('bad_sig(text)', %L, '{}')$$, :'op'));
SELECT * FROM pf_try(format($$SELECT payflow.invoke_postprocess('bad_answer(text,jsonb)', %L, '{}')$$, :'op'));
SELECT * FROM pf_try(format($$SELECT payflow.invoke_postprocess('nope(text,jsonb)', %L, '{}')$$, :'op'));
SELECT * FROM pf_try($$SELECT payflow.default_postprocess('pay_00000000000000000000000000', '{}')$$);
-- the hook runs as the caller, not as payflow's owner
CREATE FUNCTION whoami_hook(operation_id text, payment_result jsonb) RETURNS jsonb
	LANGUAGE sql AS $$ SELECT jsonb_build_object('user', current_user) $$;
SET client_min_messages = warning;
DROP ROLE IF EXISTS pp_worker_test;
RESET client_min_messages;
CREATE ROLE pp_worker_test IN ROLE payflow_worker;
GRANT EXECUTE ON FUNCTION whoami_hook(text, jsonb) TO pp_worker_test;
SET ROLE pp_worker_test;
SELECT payflow.invoke_postprocess('whoami_hook(text,jsonb)', :'op', '{}') ->> 'user' AS hook_ran_as;
RESET ROLE;
DROP OWNED BY pp_worker_test;
DROP ROLE pp_worker_test;

-- run_hook_steps: a batch of hook steps in one transaction.  Four
-- operations at POST_PROCESS: two whose hook succeeds (one of them twice
-- in the batch, as a message delivered twice: busy, its hook run once, the
-- completion given to both),
-- one whose hook raises after writing, one already done; plus an unknown
-- operation.  Hooks run with invoke_postprocess's search_path: they name
-- their own tables with their schema.
CREATE TABLE hook_writes (operation_id text, charge text);
CREATE FUNCTION batch_hook(operation_id text, payment_result jsonb) RETURNS jsonb
	LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO public.hook_writes VALUES (operation_id, payment_result ->> 'charge_id');
	IF payment_result ->> 'charge_id' = 'CH-BAD' THEN
		RAISE EXCEPTION 'the customer service is unreachable';
	END IF;
	RETURN jsonb_build_object('ref', payment_result ->> 'charge_id');
END
$$;
SELECT array_agg(payflow.submit('pp-batch-' || g, '{"amount": 5}') ORDER BY g) AS bops FROM generate_series(1, 4) g \gset
SELECT count(*) AS paid FROM unnest(:'bops'::text[]) WITH ORDINALITY b(id, n),
	LATERAL (SELECT payflow.claim_step(b.id, 'PROCESS_PAYMENT', 'w') AS c) c,
	LATERAL (SELECT payflow.complete_step(b.id, 'PROCESS_PAYMENT', 'w',
			 jsonb_build_object('charge_id', CASE WHEN b.n = 3 THEN 'CH-BAD' ELSE 'CH-' || b.n END)) AS d) d;
-- the fourth is done already, by another worker
SELECT payflow.claim_step((:'bops'::text[])[4], 'POST_PROCESS', 'pp-0') ->> 'action' AS action;
SELECT payflow.complete_step((:'bops'::text[])[4], 'POST_PROCESS', 'pp-0', '{"ref": "before"}') ->> 'status' AS status;
SELECT r.item, r.answer ->> 'action' AS action, r.answer ->> 'reason' AS reason,
	   r.completion ->> 'status' AS completed_to, r.completion ->> 'eventType' AS event,
	   r.error ->> 'code' AS error_code, r.error ->> 'message' AS error_message
  FROM payflow.run_hook_steps('POST_PROCESS', 'pp-b', 'batch_hook(text,jsonb)',
	   ARRAY[(:'bops'::text[])[1], (:'bops'::text[])[2], (:'bops'::text[])[3], (:'bops'::text[])[4],
			 'pay_00000000000000000000000000', (:'bops'::text[])[1]], 60) r
 ORDER BY r.item;
-- the hook ran once per operation; the failed one's write is gone and its
-- step is still leased to the batch's worker, which goes on the usual way
-- (the hook again inside complete_step, its error classified)
SELECT b.n, o.status, s.status AS step_status, s.lease_owner, s.result ->> 'ref' AS result,
	   (SELECT count(*) FROM hook_writes w WHERE w.operation_id = b.id) AS hook_writes,
	   (SELECT count(*) FROM payflow.outbox e WHERE e.operation_id = b.id AND e.event_type = 'InvoiceRequested') AS invoice_requests
  FROM unnest(:'bops'::text[]) WITH ORDINALITY b(id, n)
  JOIN payflow.operations o ON o.id = b.id
  JOIN payflow.steps s ON s.operation_id = b.id AND s.step_name = 'POST_PROCESS'
 ORDER BY b.n;
-- again: a step done is skipped, its hook not run again
SELECT r.item, r.answer ->> 'action' AS action, r.completion IS NOT NULL AS has_completion
  FROM payflow.run_hook_steps('POST_PROCESS', 'pp-b', 'batch_hook(text,jsonb)', ARRAY[(:'bops'::text[])[1]]) r;
SELECT count(*) AS hook_writes_of_first FROM hook_writes WHERE operation_id = (:'bops'::text[])[1];
-- arguments shared by every item are checked once
SELECT * FROM pf_try($$SELECT * FROM payflow.run_hook_steps('POST_PROCESS', 'w', NULL, ARRAY['x'])$$);
SELECT * FROM pf_try($$SELECT * FROM payflow.run_hook_steps('REFUND', 'w', 'batch_hook(text,jsonb)', ARRAY['x'])$$);
SELECT * FROM pf_try($$SELECT * FROM payflow.run_hook_steps('POST_PROCESS', 'w', 'batch_hook(text,jsonb)', NULL)$$);
-- a hook of the wrong signature fails its item (22023), beside one that
-- the batch's worker holds already (busy)
SELECT payflow.submit('pp-batch-5', '{"amount": 5}') AS op5 \gset
SELECT payflow.claim_step(:'op5', 'PROCESS_PAYMENT', 'w') ->> 'action' AS action;
SELECT payflow.complete_step(:'op5', 'PROCESS_PAYMENT', 'w', '{"charge_id": "CH-5"}') ->> 'status' AS status;
SELECT r.item, r.answer ->> 'action' AS action, r.error ->> 'code' AS error_code, r.error ->> 'message' AS error_message
  FROM payflow.run_hook_steps('POST_PROCESS', 'pp-b', 'bad_sig(text)', ARRAY[:'op5', (:'bops'::text[])[3]]) r
 ORDER BY r.item;
-- the shipped hook in a batch (a statement whose plan is kept, not
-- EXECUTE): each invoice input is the hook's answer alone, with the
-- request's fields; for a request in S3, which it cannot read, the
-- payment's only (alone: the batch leaves a step whose input is in S3 to
-- the usual path)
SELECT payflow.submit('pp-batch-6', '{"amount": 7, "currency": "SEK", "description": "six"}') AS op6,
	   payflow.submit('pp-batch-8', '{"amount": 8, "customer": "C-8", "card_number": "4111111111111111"}') AS op8,
	   payflow.submit_ref('pp-batch-7', 's3', 'in/pp-7.json', 'sha256:' || repeat('ab', 32), 10) AS op7 \gset
SELECT count(*) AS paid FROM unnest(ARRAY[:'op6', :'op8']) WITH ORDINALITY b(id, n),
	LATERAL (SELECT payflow.claim_step(b.id, 'PROCESS_PAYMENT', 'w') AS c) c,
	LATERAL (SELECT payflow.complete_step(b.id, 'PROCESS_PAYMENT', 'w',
			 jsonb_build_object(CASE WHEN b.n = 1 THEN 'charge_id' ELSE 'chargeId' END, 'CH-' || b.n)) AS d) d;
CREATE TEMP TABLE shipped_batch AS
SELECT * FROM payflow.run_hook_steps('POST_PROCESS', 'pp-b', 'payflow.default_postprocess(text,jsonb)', ARRAY[:'op6', :'op8']);
SELECT r.item, r.completion ->> 'eventType' AS event,
	   convert_from(payflow.payload_get(s.result_ref), 'UTF8')::jsonb - 'operationId' AS invoice_input,
	   convert_from(payflow.payload_get(s.result_ref), 'UTF8')::jsonb
	   = payflow.default_postprocess(r.operation_id, jsonb_build_object(CASE WHEN r.item = 1 THEN 'charge_id' ELSE 'chargeId' END,
																	   'CH-' || r.item)) AS same_as_alone
  FROM shipped_batch r
  JOIN payflow.steps s ON s.operation_id = r.operation_id AND s.step_name = 'POST_PROCESS'
 ORDER BY r.item;
SELECT payflow.default_postprocess(:'op7', '{"transactionId": "T-7"}') - 'operationId' AS invoice_input_s3;
