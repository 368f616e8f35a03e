-- Limits on a step across every worker (issue 27): max_running,
-- max_running_per_tenant, per_second.  A claim beyond a limit answers
-- "limited" with retryAfterSeconds and changes nothing (no attempt used);
-- a slot frees itself when its attempt ends or its lease expires.

-- bad input: specific SQLSTATEs, nothing stored
SELECT * FROM pf_try($$SELECT payflow.set_step_limit('NO_SUCH_STEP', 5)$$);
SELECT * FROM pf_try($$SELECT payflow.set_step_limit('PROCESS_PAYMENT', NULL)$$);
SELECT * FROM pf_try($$SELECT payflow.set_step_limit('PROCESS_PAYMENT', 0)$$);
SELECT * FROM pf_try($$SELECT payflow.set_step_limit('PROCESS_PAYMENT', -3)$$);
SELECT * FROM pf_try($$SELECT payflow.set_step_limit('PROCESS_PAYMENT', 5, 0)$$);
SELECT * FROM pf_try($$SELECT payflow.set_step_limit('PROCESS_PAYMENT', 5, NULL, 0)$$);
SELECT * FROM pf_try($$SELECT payflow.set_step_limit('PROCESS_PAYMENT', 5, NULL, -1.5)$$);
SELECT * FROM pf_try($$SELECT payflow.set_step_limit('PROCESS_PAYMENT', 5, NULL, 'NaN')$$);
SELECT * FROM pf_try($$SELECT payflow.clear_step_limit('NO_SUCH_STEP')$$);
SELECT count(*) AS limits FROM payflow.step_limits;

SELECT payflow.set_step_limit('PROCESS_PAYMENT', 2) AS lim;
SELECT payflow.set_step_limit('PROCESS_PAYMENT', 2, 1) AS lim;
SELECT count(payflow.submit('lim-' || n, '{"amount": 1}')) AS submitted FROM generate_series(1, 4) n;
UPDATE payflow.operations SET tenant = 'tenant-b' WHERE payment_id = 'lim-4';
SELECT array_agg(id ORDER BY payment_id) AS ids FROM payflow.operations WHERE payment_id LIKE 'lim-%' \gset

-- one per tenant: the first claim runs, the second of the same tenant is
-- limited (nothing changed), another tenant's runs; then max_running (2)
SELECT c.item, c.answer ->> 'action' AS action, c.answer ->> 'reason' AS reason,
	   c.answer ->> 'retryAfterSeconds' AS retry_after
  FROM payflow.claim_steps('PROCESS_PAYMENT', 'w-lim', :'ids'::text[]) c ORDER BY 1;
SELECT payment_id, status, step_status, step_attempt FROM payflow.operations WHERE payment_id LIKE 'lim-%' ORDER BY 1;
SELECT count(*) AS slots FROM payflow.step_slots;

-- per tenant lifted: still max_running 2, and single claims say the same
SELECT payflow.set_step_limit('PROCESS_PAYMENT', 2) ->> 'maxRunning' AS max_running;
SELECT (payflow.claim_step(id, 'PROCESS_PAYMENT', 'w-lim')) ->> 'reason' AS reason
  FROM payflow.operations WHERE payment_id = 'lim-2';

-- a completion frees its slot
SELECT (payflow.complete_step(id, 'PROCESS_PAYMENT', 'w-lim', '{"charge_id": "c1"}')) ->> 'status' AS status
  FROM payflow.operations WHERE payment_id = 'lim-1';
SELECT (payflow.claim_step(id, 'PROCESS_PAYMENT', 'w-lim')) ->> 'action' AS action
  FROM payflow.operations WHERE payment_id = 'lim-2';
-- a retryable failure frees it too (the attempt ended)
SELECT (payflow.fail_step(id, 'PROCESS_PAYMENT', 'w-lim', '{"code": "busy"}', true)) ->> 'action' AS action
  FROM payflow.operations WHERE payment_id = 'lim-2';
SELECT (payflow.claim_step(id, 'PROCESS_PAYMENT', 'w-lim')) ->> 'action' AS action
  FROM payflow.operations WHERE payment_id = 'lim-3';
-- an expired lease frees its slot: a worker that died holds nothing
SELECT (payflow.claim_step(id, 'PROCESS_PAYMENT', 'w-lim')) ->> 'reason' AS reason
  FROM payflow.operations WHERE payment_id = 'lim-2';
UPDATE payflow.operations SET step_lease_expires_at = now() - interval '1 second' WHERE payment_id = 'lim-4';
UPDATE payflow.operations SET step_next_attempt_at = now() - interval '1 second' WHERE payment_id = 'lim-2';
SELECT (payflow.claim_step(id, 'PROCESS_PAYMENT', 'w-lim')) ->> 'action' AS action
  FROM payflow.operations WHERE payment_id = 'lim-2';

-- a limit lowered below the running count: the running finish, nothing new
SELECT payflow.set_step_limit('PROCESS_PAYMENT', 1) ->> 'maxRunning' AS max_running;
SELECT payflow.submit('lim-5', '{"amount": 1}') IS NOT NULL AS submitted;
SELECT (payflow.claim_step(id, 'PROCESS_PAYMENT', 'w-lim')) ->> 'reason' AS reason
  FROM payflow.operations WHERE payment_id = 'lim-5';
SELECT payment_id, (payflow.complete_step(id, 'PROCESS_PAYMENT', 'w-lim', '{"charge_id": "c"}')) ->> 'status' AS status
  FROM payflow.operations WHERE payment_id IN ('lim-2', 'lim-3') ORDER BY 1;
SELECT (payflow.claim_step(id, 'PROCESS_PAYMENT', 'w-lim')) ->> 'action' AS action
  FROM payflow.operations WHERE payment_id = 'lim-5';

-- per second: a bucket of one claim, refilled once a second
SELECT payflow.set_step_limit('PROCESS_PAYMENT', 100, NULL, 1) ->> 'perSecond' AS per_second;
UPDATE payflow.step_limits SET tokens = 1, refilled_at = now();
SELECT count(payflow.submit('lim-rate-' || n, '{"amount": 1}')) AS submitted FROM generate_series(1, 2) n;
SELECT c.item, c.answer ->> 'action' AS action, c.answer ->> 'reason' AS reason,
	   (c.answer ->> 'retryAfterSeconds')::int BETWEEN 1 AND 1 AS retry_after_one
  FROM payflow.claim_steps('PROCESS_PAYMENT', 'w-lim',
	   (SELECT array_agg(id ORDER BY payment_id) FROM payflow.operations WHERE payment_id LIKE 'lim-rate-%')) c
 ORDER BY 1;
-- a batch whose every item holds its slot takes the short way
-- (_gate_step_claims), and spends its tokens there too
SELECT payflow.set_step_limit('PROCESS_PAYMENT', 100, NULL, 0.001) ->> 'perSecond' AS per_second;
UPDATE payflow.step_limits SET tokens = 1, refilled_at = now();
SELECT payflow.submit('lim-rate-3', '{"amount": 1}') IS NOT NULL AS submitted;
SELECT c.answer ->> 'action' AS action, s.step_name IS NOT NULL AS held_a_slot
  FROM payflow.operations o
  LEFT JOIN payflow.step_slots s ON s.operation_id = o.id
 CROSS JOIN payflow.claim_steps('PROCESS_PAYMENT', 'w-lim', ARRAY[o.id]) c
 WHERE o.payment_id = 'lim-rate-3';
SELECT round(tokens, 1) AS tokens_left FROM payflow.step_limits;
SELECT c.answer ->> 'action' AS action, c.answer ->> 'reason' AS reason
  FROM payflow.claim_steps('PROCESS_PAYMENT', 'w-lim',
	   (SELECT array_agg(id) FROM payflow.operations WHERE payment_id = 'lim-rate-2')) c;

-- other steps are not limited; clear_step_limit
SELECT payflow.clear_step_limit('PROCESS_PAYMENT') AS cleared, payflow.clear_step_limit('PROCESS_PAYMENT') AS again;
SELECT count(*) AS limits, (SELECT count(*) FROM payflow.step_slots) AS slots FROM payflow.step_limits;
SELECT (payflow.claim_step(id, 'PROCESS_PAYMENT', 'w-lim')) ->> 'action' AS action
  FROM payflow.operations WHERE payment_id = 'lim-rate-2';
