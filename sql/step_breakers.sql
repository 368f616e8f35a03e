-- A circuit breaker per step (issue 27): it opens when enough of the
-- step's attempts fail for the back end's health, answers "limited" while
-- it cools down (no attempt used, the operations wait), lets probes through,
-- closes when they succeed and opens again when one fails.

-- bad input: specific SQLSTATEs, nothing stored
SELECT * FROM pf_try($$SELECT payflow.set_step_breaker('NO_SUCH_STEP')$$);
SELECT * FROM pf_try($$SELECT payflow.set_step_breaker('PROCESS_PAYMENT', 0)$$);
SELECT * FROM pf_try($$SELECT payflow.set_step_breaker('PROCESS_PAYMENT', 1.5)$$);
SELECT * FROM pf_try($$SELECT payflow.set_step_breaker('PROCESS_PAYMENT', 0.5, 0)$$);
SELECT * FROM pf_try($$SELECT payflow.set_step_breaker('PROCESS_PAYMENT', 0.5, 4, 60, 0)$$);
SELECT * FROM pf_try($$SELECT payflow.set_step_breaker('PROCESS_PAYMENT', NULL)$$);
SELECT * FROM pf_try($$SELECT payflow.clear_step_breaker('NO_SUCH_STEP')$$);
SELECT count(*) AS breakers FROM payflow.step_breakers;

-- half of at least four claims failing opens it
SELECT payflow.set_step_breaker('PROCESS_PAYMENT', 0.5, 4, 60, 30, 1) AS breaker;
SELECT count(payflow.submit('brk-' || n, '{"amount": 1}')) AS submitted FROM generate_series(1, 8) n;
SELECT array_agg(id ORDER BY payment_id) AS ids FROM payflow.operations WHERE payment_id LIKE 'brk-%' \gset
SELECT string_agg(c.answer ->> 'action', ',' ORDER BY c.item) AS claims
  FROM payflow.claim_steps('PROCESS_PAYMENT', 'w-brk', (:'ids'::text[])[1:4]) c;
SELECT state, calls FROM payflow.step_breakers;
-- one retryable failure and one permanent one (a declined card says
-- nothing of the back end's health): still closed
SELECT payflow.fail_step(id, 'PROCESS_PAYMENT', 'w-brk', '{"code": "08S01"}', true) ->> 'action' AS action
  FROM payflow.operations WHERE payment_id = 'brk-1';
SELECT payflow.fail_step(id, 'PROCESS_PAYMENT', 'w-brk', '{"code": "declined"}', false) ->> 'action' AS action
  FROM payflow.operations WHERE payment_id = 'brk-2';
SELECT payflow.claim_step(id, 'PROCESS_PAYMENT', 'w-brk') ->> 'action' AS action
  FROM payflow.operations WHERE payment_id = 'brk-5';
SELECT state, calls FROM payflow.step_breakers;
-- two more retryable failures: 3 of 5
SELECT payflow.fail_step(id, 'PROCESS_PAYMENT', 'w-brk', '{"code": "HYT00"}', true) ->> 'action' AS action
  FROM payflow.operations WHERE payment_id IN ('brk-3', 'brk-4') ORDER BY payment_id;
-- the next claims: open, for the cool-down; nothing changed, no attempt used
SELECT c.item, c.answer ->> 'action' AS action, c.answer ->> 'reason' AS reason,
	   (c.answer ->> 'retryAfterSeconds')::int BETWEEN 25 AND 30 AS retry_after_cooldown
  FROM payflow.claim_steps('PROCESS_PAYMENT', 'w-brk', (:'ids'::text[])[6:7]) c ORDER BY 1;
SELECT payflow.claim_step(id, 'PROCESS_PAYMENT', 'w-brk') ->> 'reason' AS reason
  FROM payflow.operations WHERE payment_id = 'brk-8';
SELECT payment_id, status, step_status, step_attempt FROM payflow.operations
 WHERE payment_id IN ('brk-6', 'brk-7', 'brk-8') ORDER BY 1;
SELECT state, opened_total FROM payflow.step_breakers;

-- the cool-down over: one probe goes through, the others wait
UPDATE payflow.step_breakers SET changed_at = now() - interval '31 seconds';
SELECT c.item, c.answer ->> 'action' AS action, c.answer ->> 'reason' AS reason
  FROM payflow.claim_steps('PROCESS_PAYMENT', 'w-brk', (:'ids'::text[])[6:7]) c ORDER BY 1;
SELECT state, cardinality(probe_ops) AS probes_out FROM payflow.step_breakers;
-- the probe succeeds: the next claim closes it and runs
SELECT payflow.complete_step(id, 'PROCESS_PAYMENT', 'w-brk', '{"charge_id": "c6"}') ->> 'status' AS status
  FROM payflow.operations WHERE payment_id = 'brk-6';
SELECT payflow.claim_step(id, 'PROCESS_PAYMENT', 'w-brk') ->> 'action' AS action
  FROM payflow.operations WHERE payment_id = 'brk-7';
SELECT state, calls FROM payflow.step_breakers;

-- a probe that fails opens it again
UPDATE payflow.step_breakers SET state = 'OPEN', changed_at = now() - interval '31 seconds';
SELECT payflow.claim_step(id, 'PROCESS_PAYMENT', 'w-brk') ->> 'action' AS action
  FROM payflow.operations WHERE payment_id = 'brk-8';
SELECT payflow.fail_step(id, 'PROCESS_PAYMENT', 'w-brk', '{"code": "08S01"}', true) ->> 'action' AS action
  FROM payflow.operations WHERE payment_id = 'brk-8';
UPDATE payflow.operations SET step_next_attempt_at = now() - interval '1 second' WHERE payment_id = 'brk-8';
SELECT payflow.claim_step(id, 'PROCESS_PAYMENT', 'w-brk') ->> 'reason' AS reason
  FROM payflow.operations WHERE payment_id = 'brk-8';
SELECT state, opened_total FROM payflow.step_breakers;

-- metrics() shows it (and /metrics: payflow_steps_breaker_open{key="PROCESS_PAYMENT"} 1)
SELECT (payflow.metrics() #> '{steps,PROCESS_PAYMENT,breaker}') - 'changedAt' AS breaker;

-- every change of state, with its reason
SELECT state, regexp_replace(reason, 'since .*', 'since …') AS reason
  FROM payflow.step_breaker_events WHERE step_name = 'PROCESS_PAYMENT' ORDER BY id;

-- cleared: claims go through again
SELECT payflow.clear_step_breaker('PROCESS_PAYMENT') AS cleared, payflow.clear_step_breaker('PROCESS_PAYMENT') AS again;
SELECT payflow.claim_step(id, 'PROCESS_PAYMENT', 'w-brk') ->> 'action' AS action
  FROM payflow.operations WHERE payment_id = 'brk-8';
SELECT count(*) AS slots_left FROM payflow.step_slots;
