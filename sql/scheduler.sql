-- run_scheduler: expired leases, due retries, stuck steps.
SET payflow.retry_jitter = 0;
SELECT payflow.submit('sch-1', '{}') AS op1 \gset
SELECT payflow.submit('sch-2', '{}') AS op2 \gset
SELECT payflow.submit('sch-3', '{}') AS op3 \gset
TRUNCATE payflow.outbox;

-- nothing to do
SELECT payflow.run_scheduler() AS idle;

-- op1: a due retry is re-emitted once, with the next attempt number
SELECT c ->> 'action' AS action FROM payflow.claim_step(:'op1', 'PROCESS_PAYMENT', 'w') c;
SELECT f ->> 'action' AS action FROM payflow.fail_step(:'op1', 'PROCESS_PAYMENT', 'w', '{"code": "HYT00"}', true) f;
SELECT payflow.run_scheduler() AS not_due_yet;
-- in one transaction: the scheduler running beside the test must not act on it first
BEGIN;
UPDATE payflow.operations SET step_next_attempt_at = now() - interval '1 second' WHERE id = :'op1';
SELECT payflow.run_scheduler() AS retry_due;
COMMIT;
SELECT event_type, (body ->> 'attempt')::int AS attempt, body -> 'payload' = (SELECT payflow._request_ref(id, request_ref, request_mac, request_size) FROM payflow.operations WHERE id = :'op1') AS same_input
  FROM payflow.outbox WHERE operation_id = :'op1';
SELECT status, pending_since IS NOT NULL AS waiting_for_claim FROM payflow.steps WHERE operation_id = :'op1';
SELECT payflow.run_scheduler() AS not_twice;
SELECT c ->> 'action' AS action, (c ->> 'attempt')::int AS attempt FROM payflow.claim_step(:'op1', 'PROCESS_PAYMENT', 'w2') c;

-- op2: the worker died; its expired lease makes the step retryable at once
SELECT c ->> 'action' AS action FROM payflow.claim_step(:'op2', 'PROCESS_PAYMENT', 'dead-worker') c;
-- in one transaction: the scheduler running beside the test must not act on it first
BEGIN;
UPDATE payflow.operations SET step_lease_expires_at = now() - interval '1 second' WHERE id = :'op2';
SELECT payflow.run_scheduler() AS lease_expired;
COMMIT;
SELECT status, attempt, last_error ->> 'code' AS code FROM payflow.steps WHERE operation_id = :'op2';
SELECT count(*) AS request_reemitted FROM payflow.outbox WHERE operation_id = :'op2';
-- the dead worker, if it was only slow, may still report: nobody claimed since
SELECT c ->> 'status' AS status FROM payflow.complete_step(:'op2', 'PROCESS_PAYMENT', 'dead-worker', '{"tx": "late"}') c;

-- op3: its PaymentRequested was lost by the queue; after stuck_after the
-- scheduler emits it again, but not while an event of the payment is still
-- in the outbox (that one will be delivered)
SET payflow.stuck_after = '60s';
UPDATE payflow.operations SET step_pending_since = now() - interval '61 seconds' WHERE id = :'op3';
INSERT INTO payflow.outbox (event_id, operation_id, event_type, destination, message_group_id, body)
VALUES (gen_random_uuid(), :'op3', 'PaymentRequested', 'payment-requests', 'sch-3', '{}');
SELECT payflow.run_scheduler() AS still_in_outbox;
DELETE FROM payflow.outbox WHERE operation_id = :'op3';
SELECT payflow.run_scheduler() AS rearmed_not_yet;
UPDATE payflow.operations SET step_pending_since = now() - interval '61 seconds' WHERE id = :'op3';
SELECT payflow.run_scheduler() AS stuck_redriven;
SELECT event_type, (body ->> 'attempt')::int AS attempt FROM payflow.outbox WHERE operation_id = :'op3';
SELECT pending_since > now() - interval '1 second' AS rearmed FROM payflow.steps WHERE operation_id = :'op3';

-- a step of a running worker (live lease) is never touched
SELECT c ->> 'action' AS action FROM payflow.claim_step(:'op3', 'PROCESS_PAYMENT', 'w') c;
UPDATE payflow.operations SET step_claimed_at = now() - interval '1 day' WHERE id = :'op3';
SELECT payflow.run_scheduler() AS live_lease_untouched;

-- bounded: max_rows per kind
SELECT count(payflow.submit('sch-many-' || n, '{}')) AS submitted FROM generate_series(1, 5) n;
UPDATE payflow.operations SET step_pending_since = now() - interval '1 hour' WHERE step_status = 'PENDING';
TRUNCATE payflow.outbox;
SELECT (payflow.run_scheduler(2) ->> 'stuckRedriven')::int AS bounded;
SELECT * FROM pf_try($$SELECT payflow.run_scheduler(0)$$);

-- the sweep of the open steps: a call looks at 10 x max_rows of them from
-- where the last call stopped, so an expired lease behind many open steps
-- is found within (open steps / (10 x max_rows)) + 1 calls, not at once;
-- at the end the sweep starts over from the first
UPDATE payflow.operations SET step_pending_since = now() WHERE step_status = 'PENDING';
SELECT count(payflow.submit('sch-sweep-' || n, '{}')) AS submitted FROM generate_series(1, 30) n;
SELECT max(id) AS op_last FROM payflow.operations WHERE payment_id LIKE 'sch-sweep-%' \gset
SELECT c ->> 'action' AS action FROM payflow.claim_step(:'op_last', 'PROCESS_PAYMENT', 'w-sweep', 60) c;
UPDATE payflow.operations SET step_lease_expires_at = now() - interval '1 second' WHERE id = :'op_last';
SELECT count(*) AS open_steps FROM payflow.steps WHERE finished_at IS NULL \gset
UPDATE payflow.scheduler_sweep SET after_operation = '';
CREATE FUNCTION pg_temp.calls_to_expire(p_max integer) RETURNS integer
	LANGUAGE plpgsql AS $$
BEGIN
	FOR i IN 1 .. p_max LOOP
		IF (payflow.run_scheduler(1) ->> 'expiredLeases')::int > 0 THEN
			RETURN i;
		END IF;
	END LOOP;
	RETURN NULL;
END
$$;
SELECT pg_temp.calls_to_expire(1000) AS calls \gset
SELECT :open_steps > 10 AS more_open_steps_than_a_call_sees,
	   :calls > 1 AS not_found_by_the_first_call,
	   :calls <= :open_steps / 10 + 1 AS found_within_one_sweep;
SELECT status, last_error ->> 'code' AS code FROM payflow.steps WHERE operation_id = :'op_last';
-- nothing else expired; a call that sees to the end starts over next time
SELECT pg_temp.calls_to_expire(:open_steps / 10 + 2) IS NULL AS nothing_else_expired;
UPDATE payflow.scheduler_sweep SET after_operation = '';
SELECT payflow.run_scheduler(1) ->> 'expiredLeases' AS expired;
SELECT after_operation <> '' AS midway FROM payflow.scheduler_sweep;
SELECT payflow.run_scheduler() ->> 'expiredLeases' AS expired;
SELECT after_operation = '' AS started_over FROM payflow.scheduler_sweep;
