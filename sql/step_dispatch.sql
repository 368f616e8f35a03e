-- The backlog of a limited step waits in the database (issue 27,
-- step_dispatch.sql): a request is sent only with a free slot, and the
-- slots go by priority, then to the tenant holding the fewest, then to
-- the oldest.  Another tenant's first operation does not wait behind a
-- tenant's burst; a retry, a cancel and a cleared limit keep the count.

-- bad input: specific SQLSTATEs, nothing written
SELECT * FROM pf_try($$SELECT payflow.submit('d-bad', '{"amount": 1}', priority => 101)$$);
SELECT * FROM pf_try($$SELECT payflow.submit('d-bad', '{"amount": 1}', priority => -101)$$);
SELECT * FROM pf_try($$SELECT payflow.submit_ref('d-bad', 's3', 'k', 'sha256:' || repeat('0', 64), 1, priority => 1000)$$);
SELECT * FROM pf_try($$SELECT payflow.submit_many('[{"payment_id": "d-bad", "details": {}, "priority": "high"}]')$$);
SELECT * FROM pf_try($$SELECT payflow.submit_many('[{"payment_id": "d-ok", "details": {}}, {"payment_id": "d-bad", "details": {}, "priority": 1.5}]')$$);
SELECT * FROM pf_try($$SELECT payflow.submit_many('[{"payment_id": "d-bad", "details": {}, "priority": 500}]')$$);
SELECT count(*) AS written FROM payflow.operations WHERE payment_id IN ('d-bad', 'd-ok');

-- What each operation of this file shows: held (waiting in the database),
-- the requests sent for it, its step's status.
CREATE FUNCTION pf_dispatch_state() RETURNS TABLE (payment_id text, tenant text, priority smallint, held boolean,
												   requests bigint, step_status text)
	LANGUAGE sql AS $$
	SELECT o.payment_id, o.tenant, o.priority, o.held_step IS NOT NULL,
		   (SELECT count(*) FROM payflow.outbox e WHERE e.operation_id = o.id AND e.event_type = 'PaymentRequested'),
		   o.step_status
	  FROM payflow.operations o WHERE o.payment_id LIKE 'd-%' ORDER BY o.payment_id, o.tenant $$;
SELECT payflow.create_api_key('tenant-d', 'dispatch test') AS key_d \gset

-- Two slots, one per tenant.  Tenant '' submits first: one request goes,
-- the rest wait (its slot is taken), the priority 5 among them.
SELECT payflow.set_step_limit('PROCESS_PAYMENT', 2, 1) ->> 'maxRunning' AS max_running;
SELECT payflow.submit('d-a1', '{"amount": 1}') IS NOT NULL AS a1;
SELECT payflow.submit('d-a2', '{"amount": 1}') IS NOT NULL AS a2;
SELECT count(*) AS a3_a4 FROM payflow.submit_many('[{"payment_id": "d-a3", "details": {"amount": 1}, "priority": 5},
													 {"payment_id": "d-a4", "details": {"amount": 1}}]');
-- tenant-d's first takes the second slot at once; its second waits
SELECT payflow.submit('d-b1', '{"amount": 1}') IS NOT NULL AS b1 FROM payflow.authenticate(:'key_d');
SELECT payflow.submit('d-b2', '{"amount": 1}') IS NOT NULL AS b2 FROM payflow.authenticate(:'key_d');
SELECT * FROM pf_dispatch_state();
SELECT payflow.metrics() -> 'steps' -> 'PROCESS_PAYMENT' -> 'limit' ->> 'held' AS held,
	   payflow.metrics() -> 'steps' -> 'PROCESS_PAYMENT' -> 'limit' ->> 'slotsHeld' AS slots;

-- A worker claims what it was sent (the slot taken when it was sent is
-- the one the claim takes)
SELECT o.payment_id, (payflow.claim_step(o.id, 'PROCESS_PAYMENT', 'w-d')) ->> 'action' AS action
  FROM payflow.operations o WHERE o.payment_id IN ('d-a1', 'd-b1') ORDER BY 1;

-- d-a1 ends: tenant '' has a free slot, and its priority 5 goes first
SELECT (payflow.complete_step(id, 'PROCESS_PAYMENT', 'w-d', '{"charge_id": "c"}')) ->> 'action' AS a1_done
  FROM payflow.operations WHERE payment_id = 'd-a1';
SELECT payment_id, held, requests FROM pf_dispatch_state() WHERE payment_id IN ('d-a2', 'd-a3', 'd-a4', 'd-b2');

-- No cap per tenant: d-b1 ends, and the slot goes to tenant-d, which
-- holds none, rather than to tenant '', which holds one (d-a3)
SELECT payflow.set_step_limit('PROCESS_PAYMENT', 2) ->> 'maxRunning' AS max_running;
SELECT (payflow.complete_step(id, 'PROCESS_PAYMENT', 'w-d', '{"charge_id": "c"}')) ->> 'action' AS b1_done
  FROM payflow.operations WHERE payment_id = 'd-b1';
SELECT payment_id, held, requests FROM pf_dispatch_state() WHERE payment_id IN ('d-a2', 'd-a4', 'd-b2');

-- A priority 9 submitted last goes before the older ones when a slot
-- frees: here by a retryable failure of d-a3, whose retry then waits too
SELECT payflow.submit('d-a5', '{"amount": 1}', priority => 9) IS NOT NULL AS a5;
SELECT o.payment_id, (payflow.claim_step(o.id, 'PROCESS_PAYMENT', 'w-d')) ->> 'action' AS action
  FROM payflow.operations o WHERE o.payment_id IN ('d-a3', 'd-b2') ORDER BY 1;
SELECT (payflow.fail_step(id, 'PROCESS_PAYMENT', 'w-d', '{"code": "busy"}', true)) ->> 'action' AS a3_failed
  FROM payflow.operations WHERE payment_id = 'd-a3';
SELECT payment_id, held, requests, step_status FROM pf_dispatch_state()
 WHERE payment_id IN ('d-a2', 'd-a3', 'd-a4', 'd-a5');
-- the retry falls due: the scheduler holds it (no request: no free slot)
UPDATE payflow.operations SET step_next_attempt_at = now() - interval '1 second' WHERE payment_id = 'd-a3';
SELECT payflow.run_scheduler() ->> 'retriesDue' AS retries_due;
SELECT payment_id, held, requests, step_status FROM pf_dispatch_state() WHERE payment_id = 'd-a3';

-- Held is not stuck: run_scheduler does not re-drive it, the console does not list it
UPDATE payflow.operations SET step_pending_since = now() - interval '1 day' WHERE payment_id = 'd-a4';
SELECT payflow.run_scheduler() ->> 'stuckRedriven' AS stuck_redriven;
SELECT payflow.create_admin_key('ops-dispatch') AS akey \gset
SELECT count(*) AS listed_as_stuck
  FROM payflow.admin_stuck(:'akey') s, jsonb_array_elements(s -> 'items') i
 WHERE i ->> 'operationId' = (SELECT id FROM payflow.operations WHERE payment_id = 'd-a4');

-- A cancelled one no longer waits
SELECT payflow.cancel(id, 'not needed') AS cancelled FROM payflow.operations WHERE payment_id = 'd-a2';
SELECT payment_id, held, step_status FROM pf_dispatch_state() WHERE payment_id = 'd-a2';

-- A slot freed by an expired lease goes out at the scheduler's next pass
UPDATE payflow.operations SET step_lease_expires_at = now() - interval '1 second' WHERE payment_id = 'd-b2';
SELECT payflow.run_scheduler() ->> 'expiredLeases' AS expired;
SELECT payment_id, held, requests, step_status FROM pf_dispatch_state() WHERE payment_id IN ('d-a3', 'd-a4', 'd-b2');

-- The limit cleared: everything still waiting gets its request
SELECT payflow.clear_step_limit('PROCESS_PAYMENT') AS cleared;
SELECT count(*) FILTER (WHERE held) AS still_held,
	   count(*) FILTER (WHERE step_status = 'PENDING' AND requests = 0) AS pending_without_request
  FROM pf_dispatch_state();

-- A limit on a later step: the completion before it holds the next step
-- (complete_steps takes the full path), and the request sent with the
-- slot carries the step's input, the result before it
SELECT payflow.set_step_limit('POST_PROCESS', 1) ->> 'maxRunning' AS max_running;
SELECT count(payflow.submit(p, '{"amount": 1}')) AS submitted FROM unnest(ARRAY['d-p1', 'd-p2']) p;
SELECT count(*) FILTER (WHERE c.answer ->> 'action' = 'run') AS claimed
  FROM payflow.claim_steps('PROCESS_PAYMENT', 'w-d',
	   (SELECT array_agg(id ORDER BY payment_id) FROM payflow.operations WHERE payment_id IN ('d-p1', 'd-p2'))) c;
SELECT c.item, c.answer ->> 'action' AS action, c.answer ? 'eventId' AS has_event
  FROM payflow.complete_steps('PROCESS_PAYMENT', 'w-d',
	   (SELECT jsonb_agg(jsonb_build_object('operationId', id, 'result', jsonb_build_object('charge', payment_id))
						 ORDER BY payment_id)
		  FROM payflow.operations WHERE payment_id IN ('d-p1', 'd-p2'))) c ORDER BY 1;
SELECT o.payment_id, o.current_step, o.held_step IS NOT NULL AS held,
	   (SELECT e.body -> 'result' = (SELECT r.result_ref FROM payflow.step_results r
									  WHERE r.operation_id = o.id AND r.step_name = 'PROCESS_PAYMENT')
		  FROM payflow.outbox e WHERE e.operation_id = o.id AND e.event_type = 'PaymentCompleted') AS request_carries_result
  FROM payflow.operations o WHERE o.payment_id IN ('d-p1', 'd-p2') ORDER BY 1;
SELECT payflow.clear_step_limit('POST_PROCESS') AS cleared;

-- A limit lowered: a request sent under the old one and not claimed yet
-- loses its slot, so its claim counts against the new limit (refused while
-- the running one finishes)
SELECT payflow.set_step_limit('PROCESS_PAYMENT', 2) ->> 'maxRunning' AS max_running;
SELECT count(payflow.submit(p, '{"amount": 1}')) AS submitted FROM unnest(ARRAY['d-l1', 'd-l2']) p;
SELECT payment_id, held, requests FROM pf_dispatch_state() WHERE payment_id IN ('d-l1', 'd-l2');
SELECT (payflow.claim_step(id, 'PROCESS_PAYMENT', 'w-d')) ->> 'action' AS l1
  FROM payflow.operations WHERE payment_id = 'd-l1';
SELECT payflow.set_step_limit('PROCESS_PAYMENT', 1) ->> 'maxRunning' AS max_running;
SELECT (payflow.claim_step(id, 'PROCESS_PAYMENT', 'w-d')) ->> 'reason' AS l2_refused
  FROM payflow.operations WHERE payment_id = 'd-l2';
SELECT (payflow.complete_step(id, 'PROCESS_PAYMENT', 'w-d', '{"charge_id": "c"}')) ->> 'action' AS l1_done
  FROM payflow.operations WHERE payment_id = 'd-l1';
SELECT (payflow.claim_step(id, 'PROCESS_PAYMENT', 'w-d')) ->> 'action' AS l2
  FROM payflow.operations WHERE payment_id = 'd-l2';
SELECT payflow.clear_step_limit('PROCESS_PAYMENT') AS cleared;

-- An operation's own history is untouched by the wait
SELECT to_status FROM payflow.history((SELECT id FROM payflow.operations WHERE payment_id = 'd-a4'));
DROP FUNCTION pf_dispatch_state();
