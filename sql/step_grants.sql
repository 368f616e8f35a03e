-- Steps bound to roles, and lease tokens (issue 26, H1).  Once a step has
-- a grant, only members of a granted role may act on it (42501), and each
-- call after a claim presents the claim's lease token (PF004 without it or
-- with another); a wrong token is PF004 on any step.  Membership is the
-- login's (session_user).
DO $$
BEGIN
	IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'pf_sg_payment') THEN
		CREATE ROLE pf_sg_payment;
	END IF;
	IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'pf_sg_risk') THEN
		CREATE ROLE pf_sg_risk;
	END IF;
END
$$;
GRANT payflow_worker TO pf_sg_payment, pf_sg_risk;
SELECT count(payflow.submit('sg-' || n, '{"amount": 1}')) AS submitted FROM generate_series(1, 3) n;
SELECT id AS op1 FROM payflow.operations WHERE payment_id = 'sg-1' \gset
SELECT id AS op2 FROM payflow.operations WHERE payment_id = 'sg-2' \gset
SELECT id AS op3 FROM payflow.operations WHERE payment_id = 'sg-3' \gset

-- bad input
SELECT * FROM pf_try($$SELECT payflow.grant_step('NO_SUCH_STEP', 'pf_sg_payment')$$);
SELECT * FROM pf_try($$SELECT payflow.grant_step('PROCESS_PAYMENT', NULL)$$);
SELECT * FROM pf_try($$SELECT payflow.grant_step('PROCESS_PAYMENT', 'pf_sg_nobody')$$);
SELECT * FROM pf_try($$SELECT payflow.revoke_step(NULL, 'pf_sg_payment')$$);
SELECT count(*) AS grants FROM payflow.step_grants;

-- a step without grants: any worker, no token needed, a wrong one refused
SELECT c ->> 'action' AS action, c ->> 'leaseToken' ~ '^[0-9a-f-]{36}$' AS token_given
  FROM payflow.claim_step(:'op3', 'PROCESS_PAYMENT', 'w-any') c;
SELECT payflow.heartbeat(:'op3', 'PROCESS_PAYMENT', 'w-any') AS renewed_without_token,
	   payflow.heartbeat(:'op3', 'PROCESS_PAYMENT', 'w-any', 300, '00000000-0000-0000-0000-000000000000') AS renewed_wrong_token;
SELECT * FROM pf_try(format($$SELECT payflow.complete_step(%L, 'PROCESS_PAYMENT', 'w-any', '{}', NULL,
	'00000000-0000-0000-0000-000000000000')$$, :'op3'));

-- PROCESS_PAYMENT bound to the payment login
SELECT payflow.grant_step('PROCESS_PAYMENT', 'pf_sg_payment') AS granted,
	   payflow.grant_step('PROCESS_PAYMENT', 'pf_sg_payment') AS granted_again;
SELECT step_name, role_name FROM payflow.step_grants;

-- another worker login: 42501 for every call on the step, nothing changed
SET SESSION AUTHORIZATION pf_sg_risk;
SELECT * FROM pf_try(format($$SELECT payflow.claim_step(%L, 'PROCESS_PAYMENT', 'w-risk')$$, :'op1'));
SELECT * FROM pf_try(format($$SELECT * FROM payflow.claim_steps('PROCESS_PAYMENT', 'w-risk', ARRAY[%L])$$, :'op1'));
SELECT * FROM pf_try(format($$SELECT payflow.heartbeat(%L, 'PROCESS_PAYMENT', 'w-risk')$$, :'op1'));
SELECT * FROM pf_try(format($$SELECT * FROM payflow.heartbeat_steps('PROCESS_PAYMENT', 'w-risk', ARRAY[%L])$$, :'op1'));
SELECT * FROM pf_try(format($$SELECT payflow.complete_step(%L, 'PROCESS_PAYMENT', 'w-risk', '{"charge_id": "fake"}')$$, :'op1'));
SELECT * FROM pf_try(format($$SELECT * FROM payflow.complete_steps('PROCESS_PAYMENT', 'w-risk',
	'[{"operationId": %s, "result": {"charge_id": "fake"}}]')$$, to_json(:'op1'::text)));
SELECT * FROM pf_try(format($$SELECT payflow.fail_step(%L, 'PROCESS_PAYMENT', 'w-risk', '{"code": "x"}', false)$$, :'op1'));
SELECT * FROM pf_try(format($$SELECT * FROM payflow.fail_steps('PROCESS_PAYMENT', 'w-risk',
	'[{"operationId": %s, "error": {"code": "x"}, "retryable": false}]')$$, to_json(:'op1'::text)));
SELECT * FROM pf_try(format($$SELECT payflow.payload_put(%L, 'payment-result.json', 'x', 'PROCESS_PAYMENT', 'w-risk')$$, :'op1'));
RESET SESSION AUTHORIZATION;
SELECT status, step_status, step_attempt FROM payflow.operations WHERE id = :'op1';

-- the payment login: the claim's token is required after it
SET SESSION AUTHORIZATION pf_sg_payment;
SELECT c ->> 'leaseToken' AS token1 FROM payflow.claim_step(:'op1', 'PROCESS_PAYMENT', 'w-pay') c \gset
SELECT payflow.heartbeat(:'op1', 'PROCESS_PAYMENT', 'w-pay') AS renewed_without_token,
	   payflow.heartbeat(:'op1', 'PROCESS_PAYMENT', 'w-pay', 300, :'token1') AS renewed_with_token;
-- the batch form alike: no token or a wrong one is not this lease
SELECT h.item, h.held, h.error
  FROM payflow.heartbeat_steps('PROCESS_PAYMENT', 'w-pay', ARRAY[:'op1', :'op1', :'op1'], 300,
							   ARRAY[NULL, '00000000-0000-0000-0000-000000000000', :'token1']) h
 ORDER BY h.item;
SELECT * FROM pf_try(format($$SELECT payflow.save_step_ref(%L, 'PROCESS_PAYMENT', 'w-pay', 'job-1')$$, :'op1'));
SELECT payflow.save_step_ref(:'op1', 'PROCESS_PAYMENT', 'w-pay', 'job-1', :'token1') AS saved;
SELECT * FROM pf_try(format($$SELECT payflow.complete_step(%L, 'PROCESS_PAYMENT', 'w-pay', '{"charge_id": "c1"}')$$, :'op1'));
SELECT * FROM pf_try(format($$SELECT payflow.complete_step(%L, 'PROCESS_PAYMENT', 'w-pay', '{"charge_id": "c1"}', NULL,
	'00000000-0000-0000-0000-000000000000')$$, :'op1'));
SELECT * FROM pf_try(format($$SELECT payflow.fail_step(%L, 'PROCESS_PAYMENT', 'w-pay', '{"code": "x"}', true)$$, :'op1'));
SELECT * FROM pf_try(format($$SELECT payflow.payload_put(%L, 'payment-result.json', 'x', 'PROCESS_PAYMENT', 'w-pay')$$, :'op1'));
-- a takeover gets a new token; the old one is refused even under the same worker id
RESET SESSION AUTHORIZATION;
UPDATE payflow.operations SET step_lease_expires_at = now() - interval '1 second' WHERE id = :'op1';
SET SESSION AUTHORIZATION pf_sg_payment;
SELECT c ->> 'leaseToken' AS token2, (c ->> 'takeover')::boolean AS takeover
  FROM payflow.claim_step(:'op1', 'PROCESS_PAYMENT', 'w-pay') c \gset
SELECT :'token2' <> :'token1' AS new_token, :'takeover'::boolean AS takeover;
SELECT * FROM pf_try(format($$SELECT payflow.complete_step(%L, 'PROCESS_PAYMENT', 'w-pay', '{"charge_id": "c1"}', NULL, %L)$$,
	:'op1', :'token1'));
SELECT c ->> 'action' AS action, c ->> 'status' AS status
  FROM payflow.complete_step(:'op1', 'PROCESS_PAYMENT', 'w-pay', '{"charge_id": "c1"}', NULL, :'token2') c;
-- a repeated completion answers as the first, token or not
SELECT c ->> 'action' AS action FROM payflow.complete_step(:'op1', 'PROCESS_PAYMENT', 'w-pay', '{"charge_id": "c1"}') c;

-- batches: each item with its own token; an item without one fails alone
RESET SESSION AUTHORIZATION;
UPDATE payflow.operations SET step_lease_expires_at = now() - interval '1 second' WHERE id = :'op3';
SET SESSION AUTHORIZATION pf_sg_payment;
SELECT string_agg(c.answer ->> 'action', ',' ORDER BY c.item) AS actions,
	   split_part(string_agg(c.answer ->> 'leaseToken', ',' ORDER BY c.item), ',', 1) AS tok2
  FROM payflow.claim_steps('PROCESS_PAYMENT', 'w-pay', ARRAY[:'op2', :'op3']) c \gset
SELECT :'actions' AS actions;
SELECT c.item, c.answer ->> 'status' AS status, c.error ->> 'code' AS error
  FROM payflow.complete_steps('PROCESS_PAYMENT', 'w-pay',
	   jsonb_build_array(jsonb_build_object('operationId', :'op2', 'result', '{"charge_id": "c2"}'::jsonb, 'leaseToken', :'tok2'),
						 jsonb_build_object('operationId', :'op3', 'result', '{"charge_id": "c3"}'::jsonb))) c
 ORDER BY c.item;
RESET SESSION AUTHORIZATION;
SELECT payment_id, status FROM payflow.operations WHERE payment_id LIKE 'sg-%' ORDER BY 1;

-- revoked: the step is open to every worker again
SELECT payflow.revoke_step('PROCESS_PAYMENT', 'pf_sg_payment') AS revoked,
	   payflow.revoke_step('PROCESS_PAYMENT', 'pf_sg_payment') AS revoked_again;
SET SESSION AUTHORIZATION pf_sg_risk;
SELECT payflow.heartbeat(:'op3', 'PROCESS_PAYMENT', 'w-pay') AS risk_may_renew_unbound;
RESET SESSION AUTHORIZATION;

-- only the admin binds steps
SET SESSION AUTHORIZATION pf_sg_risk;
SELECT * FROM pf_try($$SELECT payflow.grant_step('PROCESS_PAYMENT', 'pf_sg_risk')$$);
RESET SESSION AUTHORIZATION;

-- a step bound only to a role since dropped admits no one
DO $$ BEGIN CREATE ROLE pf_sg_gone; EXCEPTION WHEN duplicate_object THEN NULL; END $$;
SELECT payflow.grant_step('POST_PROCESS', 'pf_sg_gone') AS granted;
DROP ROLE pf_sg_gone;
SET SESSION AUTHORIZATION pf_sg_risk;
SELECT sqlstate FROM pf_try($$SELECT payflow.claim_steps('POST_PROCESS', 'w-risk', ARRAY['pay_00000000000000000000000000'])$$);
RESET SESSION AUTHORIZATION;

DELETE FROM payflow.step_grants;
REVOKE payflow_worker FROM pf_sg_payment, pf_sg_risk;
DROP ROLE pf_sg_payment;
DROP ROLE pf_sg_risk;
