-- Step leases: claim_step / heartbeat / complete_step / fail_step.
-- Time is simulated by moving lease and retry timestamps into the past.
SELECT payflow.submit('steps-1', '{"amount": 10}', NULL, 'corr-s1') AS op \gset

-- a new step: run, attempt 1, the idempotency key, the input reference
SELECT c ->> 'action' AS action, (c ->> 'attempt')::int AS attempt,
       c ->> 'idempotencyKey' = :'op' || ':process_payment' AS key_ok,
       c -> 'input' = (SELECT payflow._request_ref(id, request_ref, request_mac, request_size) FROM payflow.operations WHERE id = :'op') AS input_ok,
       (c ->> 'takeover')::boolean AS takeover, c ->> 'correlationId' AS corr
  FROM payflow.claim_step(:'op', 'PROCESS_PAYMENT', 'worker-a', 60) c;
SELECT status FROM payflow.operations WHERE id = :'op';

-- a second worker (or a duplicate message) while the lease is live: busy
SELECT c ->> 'action' AS action, c ->> 'reason' AS reason
  FROM payflow.claim_step(:'op', 'PROCESS_PAYMENT', 'worker-b') c;
SELECT c ->> 'action' AS action FROM payflow.claim_step(:'op', 'PROCESS_PAYMENT', 'worker-a') c;

-- heartbeat renews the holder's lease only
UPDATE payflow.operations SET step_lease_expires_at = now() + interval '5 seconds' WHERE id = :'op';
SELECT payflow.heartbeat(:'op', 'PROCESS_PAYMENT', 'worker-a', 600) AS renewed;
SELECT lease_expires_at > now() + interval '9 minutes' AS extended FROM payflow.steps WHERE operation_id = :'op';
SELECT payflow.heartbeat(:'op', 'PROCESS_PAYMENT', 'worker-b') AS not_holder;
SELECT * FROM pf_try($$SELECT payflow.heartbeat('pay_00000000000000000000000000', 'PROCESS_PAYMENT', 'w')$$);

-- only the holder may report
SELECT * FROM pf_try(format($$SELECT payflow.complete_step(%L, 'PROCESS_PAYMENT', 'worker-b', '{}')$$, :'op'));
SELECT * FROM pf_try(format($$SELECT payflow.fail_step(%L, 'PROCESS_PAYMENT', 'worker-b', '{"code":"x"}', true)$$, :'op'));

-- a retryable failure: RETRY_WAIT with backoff, the status stays
SET payflow.retry_jitter = 0;
SET payflow.retry_base_delay = '30s';
SELECT f ->> 'action' AS action, (f ->> 'attempt')::int AS attempt,
       (f ->> 'nextAttemptAt')::timestamptz BETWEEN now() + interval '29 seconds' AND now() + interval '31 seconds' AS base_delay
  FROM payflow.fail_step(:'op', 'PROCESS_PAYMENT', 'worker-a',
                         '{"code": "HYT00", "message": "legacy timed out"}', true) f;
-- the same report again is answered the same, nothing moves
SELECT f ->> 'action' AS action FROM payflow.fail_step(:'op', 'PROCESS_PAYMENT', 'worker-a',
                         '{"code": "HYT00", "message": "legacy timed out"}', true) f;
SELECT s.status, s.attempt, o.status AS op_status,
       (payflow.status(:'op') -> 'error' ->> 'code') AS error_in_status,
       payflow.status(:'op') ->> 'nextAttemptAt' IS NOT NULL AS next_attempt_shown
  FROM payflow.steps s JOIN payflow.operations o ON o.id = s.operation_id WHERE s.operation_id = :'op';
-- a message that arrives before the retry is due is skipped: the database owns the retry
SELECT c ->> 'action' AS action, c ->> 'reason' AS reason
  FROM payflow.claim_step(:'op', 'PROCESS_PAYMENT', 'worker-b') c;
-- once due: run again, attempt 2
-- in one transaction: the scheduler running beside the test must not act on it first
BEGIN;
UPDATE payflow.operations SET step_next_attempt_at = now() - interval '1 second' WHERE id = :'op';
SELECT c ->> 'action' AS action, (c ->> 'attempt')::int AS attempt
  FROM payflow.claim_step(:'op', 'PROCESS_PAYMENT', 'worker-b') c;
COMMIT;
-- the backoff doubles: attempt 2 fails -> 60 s
SELECT (f ->> 'nextAttemptAt')::timestamptz BETWEEN now() + interval '59 seconds' AND now() + interval '61 seconds' AS doubled
  FROM payflow.fail_step(:'op', 'PROCESS_PAYMENT', 'worker-b', '{"code": "08S01"}', true) f;
-- Retry-After from the far side lengthens the delay (capped by retry_max_delay)
-- in one transaction: the scheduler running beside the test must not act on it first
BEGIN;
UPDATE payflow.operations SET step_next_attempt_at = now() - interval '1 second' WHERE id = :'op';
SELECT c ->> 'action' AS action, (c ->> 'attempt')::int AS attempt
  FROM payflow.claim_step(:'op', 'PROCESS_PAYMENT', 'worker-c') c;
COMMIT;
SELECT (f ->> 'nextAttemptAt')::timestamptz BETWEEN now() + interval '299 seconds' AND now() + interval '301 seconds' AS retry_after_honoured
  FROM payflow.fail_step(:'op', 'PROCESS_PAYMENT', 'worker-c', '{"code": "429", "retryAfterSeconds": 300}', true) f;

-- an expired lease: another worker takes over, attempt + 1; the old
-- holder's late report is refused (PF004) once the step was taken over
-- in one transaction: the scheduler running beside the test must not act on it first
BEGIN;
UPDATE payflow.operations SET step_next_attempt_at = now() - interval '1 second' WHERE id = :'op';
SELECT c ->> 'action' AS action FROM payflow.claim_step(:'op', 'PROCESS_PAYMENT', 'worker-c') c;
COMMIT;
-- in one transaction: the scheduler running beside the test must not act on it first
BEGIN;
UPDATE payflow.operations SET step_lease_expires_at = now() - interval '1 second' WHERE id = :'op';
SELECT payflow.heartbeat(:'op', 'PROCESS_PAYMENT', 'worker-c') AS expired_but_unclaimed_still_renews;
COMMIT;
-- in one transaction: the scheduler running beside the test must not act on it first
BEGIN;
UPDATE payflow.operations SET step_lease_expires_at = now() - interval '1 second' WHERE id = :'op';
SELECT c ->> 'action' AS action, (c ->> 'attempt')::int AS attempt, (c ->> 'takeover')::boolean AS takeover
  FROM payflow.claim_step(:'op', 'PROCESS_PAYMENT', 'worker-d') c;
COMMIT;
SELECT * FROM pf_try(format($$SELECT payflow.complete_step(%L, 'PROCESS_PAYMENT', 'worker-c', '{"tx": 1}')$$, :'op'));
SELECT payflow.heartbeat(:'op', 'PROCESS_PAYMENT', 'worker-c') AS lost;

-- success: one transaction moves the status, stores the result and emits PaymentCompleted
SELECT payflow.complete_step(:'op', 'PROCESS_PAYMENT', 'worker-d', '{"transactionId": "T-1"}') AS first \gset
SELECT c ->> 'action' AS action, c ->> 'status' AS status, c ->> 'eventType' AS event,
	   c ->> 'eventId' = (SELECT event_id::text FROM payflow.outbox
						   WHERE operation_id = :'op' AND event_type = 'PaymentCompleted') AS its_event
  FROM (SELECT :'first'::jsonb AS c) f;
SELECT payflow.complete_step(:'op', 'PROCESS_PAYMENT', 'worker-d', '{"transactionId": "T-1"}') AS again \gset
SELECT (:'again'::jsonb) = (:'first'::jsonb) AS same_answer;
-- even another worker's late duplicate gets the same answer, and nothing is written twice
SELECT payflow.complete_step(:'op', 'PROCESS_PAYMENT', 'worker-c', '{"transactionId": "T-1"}') = :'again'::jsonb AS same_for_late_worker;
SELECT count(*) AS payment_completed_events FROM payflow.outbox WHERE operation_id = :'op' AND event_type = 'PaymentCompleted';
SELECT body -> 'result' = (SELECT result_ref FROM payflow.steps WHERE operation_id = :'op' AND step_name = 'PROCESS_PAYMENT') AS event_carries_result_ref,
       body -> 'result' ->> 'key' = 'payments/' || :'op' || '/payment-result.json' AS result_key,
       body ->> 'correlationId' AS corr
  FROM payflow.outbox WHERE operation_id = :'op' AND event_type = 'PaymentCompleted';
SELECT convert_from(payflow.payload_get(body -> 'result'), 'UTF8')::jsonb AS stored_result
  FROM payflow.outbox WHERE operation_id = :'op' AND event_type = 'PaymentCompleted';
SELECT c ->> 'action' AS action, c ->> 'reason' AS reason FROM payflow.claim_step(:'op', 'PROCESS_PAYMENT', 'worker-e') c;
SELECT f ->> 'action' AS late_failure FROM payflow.fail_step(:'op', 'PROCESS_PAYMENT', 'worker-d', '{"code": "x"}', true) f;

-- the next steps
SELECT c ->> 'action' AS action, c -> 'input' ->> 'key' LIKE '%/payment-result.json' AS input_is_payment_result
  FROM payflow.claim_step(:'op', 'POST_PROCESS', 'pp-1') c;
SELECT c ->> 'status' AS status, c ->> 'eventType' AS event
  FROM payflow.complete_step(:'op', 'POST_PROCESS', 'pp-1', '{"amount": 10, "customer": "C-1"}') c;
SELECT c ->> 'action' AS action FROM payflow.claim_step(:'op', 'CREATE_INVOICE', 'inv-1') c;
SELECT status FROM payflow.operations WHERE id = :'op';
SELECT c ->> 'status' AS status, c ->> 'eventType' AS event
  FROM payflow.complete_step(:'op', 'CREATE_INVOICE', 'inv-1', '{"invoiceId": "INV-9"}') c;
SELECT d ->> 'status' AS status, d -> 'result' AS result, (d ->> 'terminal')::boolean AS terminal,
       d ->> 'completedAt' IS NOT NULL AS completed_at
  FROM payflow.status(:'op') d;
SELECT body ->> 'status' AS status, body -> 'result' AS result
  FROM payflow.outbox WHERE operation_id = :'op' AND event_type = 'OperationCompleted';
SELECT from_status, to_status, reason, actor FROM payflow.history(:'op');
SELECT c ->> 'action' AS action, c ->> 'reason' AS reason FROM payflow.claim_step(:'op', 'CREATE_INVOICE', 'inv-2') c;
-- the final step repeated after COMPLETED still answers the same
SELECT c ->> 'status' AS status FROM payflow.complete_step(:'op', 'CREATE_INVOICE', 'inv-1', '{"invoiceId": "INV-9"}') c;

-- a permanent failure: FAILED, a dead letter, OperationFailed, no retry
SELECT payflow.submit('steps-2', '{"amount": 20}') AS op2 \gset
SELECT c ->> 'action' AS action FROM payflow.claim_step(:'op2', 'PROCESS_PAYMENT', 'worker-a') c;
SELECT f ->> 'action' AS action
  FROM payflow.fail_step(:'op2', 'PROCESS_PAYMENT', 'worker-a', '{"code": "CARD_DECLINED", "message": "card declined"}', false) f;
SELECT o.status, o.error, s.status AS step_status
  FROM payflow.operations o JOIN payflow.steps s ON s.operation_id = o.id WHERE o.id = :'op2';
SELECT source, step_name, error ->> 'code' AS code, attempts FROM payflow.dead_letters WHERE operation_id = :'op2';
SELECT body ->> 'status' AS status, body ->> 'failedStep' AS step, body -> 'error' AS error
  FROM payflow.outbox WHERE operation_id = :'op2' AND event_type = 'OperationFailed';
SELECT c ->> 'action' AS action, c ->> 'reason' AS reason FROM payflow.claim_step(:'op2', 'PROCESS_PAYMENT', 'worker-b') c;
SELECT f ->> 'action' AS action FROM payflow.fail_step(:'op2', 'PROCESS_PAYMENT', 'worker-a', '{"code": "CARD_DECLINED"}', false) f;
SELECT * FROM pf_try(format($$SELECT payflow.complete_step(%L, 'PROCESS_PAYMENT', 'worker-a', '{}')$$, :'op2'));

-- retries exhausted: max_attempts (per step override) fails the operation
UPDATE payflow.step_definitions SET max_attempts = 2 WHERE step_name = 'PROCESS_PAYMENT';
SELECT payflow.submit('steps-3', '{"amount": 30}') AS op3 \gset
SELECT c ->> 'action' AS action FROM payflow.claim_step(:'op3', 'PROCESS_PAYMENT', 'w') c;
SELECT f ->> 'action' AS action FROM payflow.fail_step(:'op3', 'PROCESS_PAYMENT', 'w', '{"code": "HYT00"}', true) f;
-- in one transaction: the scheduler running beside the test must not act on it first
BEGIN;
UPDATE payflow.operations SET step_next_attempt_at = now() - interval '1 second' WHERE id = :'op3';
SELECT c ->> 'action' AS action FROM payflow.claim_step(:'op3', 'PROCESS_PAYMENT', 'w') c;
COMMIT;
SELECT f ->> 'action' AS action FROM payflow.fail_step(:'op3', 'PROCESS_PAYMENT', 'w', '{"code": "HYT00"}', true) f;
SELECT status, error ->> 'code' AS code FROM payflow.operations WHERE id = :'op3';
SELECT (error ->> 'attemptsExhausted')::boolean AS exhausted FROM payflow.dead_letters WHERE operation_id = :'op3';
-- ... but an attempt that may have charged (a call cut off, no look-up to
-- ask) is retried, and the last one ends as outcome_unknown, not as HYT00
SELECT payflow.submit('steps-3u', '{"amount": 31}') AS op3u \gset
SELECT c ->> 'action' AS action FROM payflow.claim_step(:'op3u', 'PROCESS_PAYMENT', 'w') c;
SELECT f ->> 'action' AS action FROM payflow.fail_step(:'op3u', 'PROCESS_PAYMENT', 'w',
	'{"code": "HYT00", "message": "cut off", "outcomeUnknown": true}', true) f;
-- in one transaction: the scheduler running beside the test must not act on it first
BEGIN;
UPDATE payflow.operations SET step_next_attempt_at = now() - interval '1 second' WHERE id = :'op3u';
SELECT c ->> 'action' AS action FROM payflow.claim_step(:'op3u', 'PROCESS_PAYMENT', 'w') c;
COMMIT;
SELECT f ->> 'action' AS action FROM payflow.fail_step(:'op3u', 'PROCESS_PAYMENT', 'w',
	'{"code": "HYT00", "message": "cut off", "outcomeUnknown": true}', true) f;
SELECT status, error ->> 'code' AS code, error ->> 'message' LIKE '%do not resubmit%' AS says_so
  FROM payflow.operations WHERE id = :'op3u';
SELECT error ->> 'code' AS code, error -> 'cause' ->> 'code' AS cause, error ? 'outcomeUnknown' AS marked,
	   (error ->> 'attemptsExhausted')::boolean AS exhausted
  FROM payflow.dead_letters WHERE operation_id = :'op3u';

-- a worker that dies on every attempt: the lease expiry at the limit fails it
SELECT payflow.submit('steps-4', '{"amount": 40}') AS op4 \gset
SELECT c ->> 'action' AS action FROM payflow.claim_step(:'op4', 'PROCESS_PAYMENT', 'w1') c;
-- in one transaction: the scheduler running beside the test must not act on it first
BEGIN;
UPDATE payflow.operations SET step_lease_expires_at = now() - interval '1 second' WHERE id = :'op4';
SELECT c ->> 'action' AS action, (c ->> 'attempt')::int AS attempt FROM payflow.claim_step(:'op4', 'PROCESS_PAYMENT', 'w2') c;
COMMIT;
-- in one transaction: the scheduler running beside the test must not act on it first
BEGIN;
UPDATE payflow.operations SET step_lease_expires_at = now() - interval '1 second' WHERE id = :'op4';
SELECT c ->> 'action' AS action, c ->> 'reason' AS reason FROM payflow.claim_step(:'op4', 'PROCESS_PAYMENT', 'w3') c;
COMMIT;
SELECT status, error ->> 'code' AS code FROM payflow.operations WHERE id = :'op4';
UPDATE payflow.step_definitions SET max_attempts = NULL WHERE step_name = 'PROCESS_PAYMENT';

-- save_step_ref keeps an external job reference for a takeover
SELECT payflow.submit('steps-5', '{"amount": 50}') AS op5 \gset
SELECT c ->> 'action' AS action FROM payflow.claim_step(:'op5', 'PROCESS_PAYMENT', 'w1') c;
SELECT payflow.save_step_ref(:'op5', 'PROCESS_PAYMENT', 'w1', 'LEGACY-JOB-77') AS saved;
SELECT * FROM pf_try(format($$SELECT payflow.save_step_ref(%L, 'PROCESS_PAYMENT', 'w2', 'X')$$, :'op5'));
-- in one transaction: the scheduler running beside the test must not act on it first
BEGIN;
UPDATE payflow.operations SET step_lease_expires_at = now() - interval '1 second' WHERE id = :'op5';
SELECT c ->> 'externalRef' AS resumes, (c ->> 'takeover')::boolean AS takeover
  FROM payflow.claim_step(:'op5', 'PROCESS_PAYMENT', 'w2') c;
COMMIT;

-- a step whose triggering event does not exist yet
SELECT payflow.submit('steps-6', '{"amount": 60}') AS op6 \gset
SELECT c ->> 'action' AS action, c ->> 'reason' AS reason FROM payflow.claim_step(:'op6', 'CREATE_INVOICE', 'w') c;

-- bad input
SELECT * FROM pf_try($$SELECT payflow.claim_step('pay_00000000000000000000000000', 'PROCESS_PAYMENT', 'w')$$);
SELECT * FROM pf_try(format($$SELECT payflow.claim_step(%L, 'SHIP_GOODS', 'w')$$, :'op6'));
SELECT * FROM pf_try(format($$SELECT payflow.claim_step(%L, 'PROCESS_PAYMENT', '')$$, :'op6'));
SELECT * FROM pf_try(format($$SELECT payflow.claim_step(%L, 'PROCESS_PAYMENT', 'w', 0)$$, :'op6'));
SELECT * FROM pf_try(format($$SELECT payflow.claim_step(%L, 'PROCESS_PAYMENT', 'w', 100000)$$, :'op6'));
SELECT * FROM pf_try(format($$SELECT payflow.complete_step(%L, 'PROCESS_PAYMENT', 'w', '[1]')$$, :'op6'));
SELECT * FROM pf_try(format($$SELECT payflow.complete_step(%L, 'PROCESS_PAYMENT', 'w', NULL)$$, :'op6'));
SELECT * FROM pf_try(format($$SELECT payflow.fail_step(%L, 'PROCESS_PAYMENT', 'w', '{}', NULL)$$, :'op6'));
SELECT * FROM pf_try(format($$SELECT payflow.fail_step(%L, 'PROCESS_PAYMENT', 'w', '"boom"', true)$$, :'op6'));
SELECT * FROM pf_try(format($$SELECT payflow.complete_step(%L, 'PROCESS_PAYMENT', 'never-claimed', '{}')$$, :'op6'));
SELECT status, attempt FROM payflow.steps WHERE operation_id = :'op6';
