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
SELECT convert_from(payflow.payload_get(body -> 'invoiceInput'), 'UTF8')::jsonb - 'operationId' AS invoice_input_sent,
       position('4111' IN body::text) = 0 AS no_card_in_message
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
