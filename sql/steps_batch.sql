-- The batch step functions: claim_steps / complete_steps / fail_steps.
-- One row per item, each with its own answer or its own error; the fast
-- path and the full logic give the same answers as the single-item calls.
SELECT count(payflow.submit('batch-' || g, jsonb_build_object('amount', g))) AS submitted FROM generate_series(1, 4) g;
SELECT array_agg(id ORDER BY payment_id) AS ops FROM payflow.operations WHERE payment_id LIKE 'batch-%' \gset
SELECT (:'ops'::text[])[1] AS op1, (:'ops'::text[])[2] AS op2, (:'ops'::text[])[3] AS op3,
	   (:'ops'::text[])[4] AS op4 \gset

-- four new steps, an unknown id, a malformed one and a repeat: one row per
-- item; the input payload comes inline, the same bytes payload_get reads
SELECT c.item, c.operation_id = (:'ops'::text[])[c.item] AS same_id, c.answer ->> 'action' AS action,
	   c.answer ->> 'reason' AS reason, (c.answer ->> 'attempt')::int AS attempt,
	   CASE WHEN c.answer ->> 'action' = 'run' THEN c.input = payflow.payload_get(c.answer -> 'input') END AS input_inline,
	   c.error ->> 'code' AS error_code, c.error ->> 'message' AS error_message
  FROM payflow.claim_steps('PROCESS_PAYMENT', 'bw-1',
						   :'ops'::text[] || ARRAY['pay_00000000000000000000000000', 'nope', :'op1'], 60) c
 ORDER BY c.item;
SELECT status, count(*) FROM payflow.operations WHERE id = ANY (:'ops'::text[]) GROUP BY status;
SELECT count(*) AS claimed_history FROM payflow.operation_history
 WHERE operation_id = ANY (:'ops'::text[]) AND to_status = 'PAYMENT_PROCESSING' AND actor = 'bw-1';

-- the arguments every item shares are checked once, for the whole call
SELECT * FROM pf_try($$SELECT * FROM payflow.claim_steps('REFUND', 'w', ARRAY['x'])$$);
SELECT * FROM pf_try($$SELECT * FROM payflow.claim_steps('PROCESS_PAYMENT', NULL, ARRAY['x'])$$);
SELECT * FROM pf_try($$SELECT * FROM payflow.claim_steps('PROCESS_PAYMENT', 'w', ARRAY['x'], 0)$$);
SELECT * FROM pf_try($$SELECT * FROM payflow.claim_steps('PROCESS_PAYMENT', 'w', NULL)$$);
SELECT * FROM pf_try($$SELECT * FROM payflow.claim_steps('PROCESS_PAYMENT', 'w',
	(SELECT array_agg('pay_00000000000000000000000000'::text) FROM generate_series(1, 101)))$$);

-- heartbeats in one update: the holder's two leases renewed (a repeat
-- too), an unknown and a malformed id answered alone (PF003, 22P02),
-- another worker's lease not renewed
SELECT h.item, h.operation_id = (ARRAY[:'op2', :'op1', 'pay_00000000000000000000000000', 'nope', :'op1'])[h.item] AS same_id,
	   h.held, h.error ->> 'code' AS error_code
  FROM payflow.heartbeat_steps('PROCESS_PAYMENT', 'bw-1',
							   ARRAY[:'op2', :'op1', 'pay_00000000000000000000000000', 'nope', :'op1'], 600) h
 ORDER BY h.item;
SELECT id = :'op1' OR id = :'op2' AS renewed_one, step_lease_expires_at > now() + interval '500 seconds' AS lease_600
  FROM payflow.operations WHERE id = ANY (:'ops'::text[]) ORDER BY id;
SELECT h.held AS other_worker FROM payflow.heartbeat_steps('PROCESS_PAYMENT', 'bw-9', ARRAY[:'op3']) h;
SELECT step_lease_owner, step_lease_expires_at < now() + interval '100 seconds' AS lease_unchanged
  FROM payflow.operations WHERE id = :'op3';
-- the arguments every item shares are checked once, for the whole call
SELECT * FROM pf_try($$SELECT * FROM payflow.heartbeat_steps('REFUND', 'w', ARRAY['pay_00000000000000000000000000'])$$);
SELECT * FROM pf_try($$SELECT * FROM payflow.heartbeat_steps('PROCESS_PAYMENT', NULL, ARRAY['x'])$$);
SELECT * FROM pf_try($$SELECT * FROM payflow.heartbeat_steps('PROCESS_PAYMENT', 'w', ARRAY['x'], 0)$$);
SELECT * FROM pf_try($$SELECT * FROM payflow.heartbeat_steps('PROCESS_PAYMENT', 'w', NULL)$$);
SELECT * FROM pf_try($$SELECT * FROM payflow.heartbeat_steps('PROCESS_PAYMENT', 'w', ARRAY['x', 'y'], 60, ARRAY['t'])$$);
SELECT * FROM pf_try($$SELECT * FROM payflow.heartbeat_steps('PROCESS_PAYMENT', 'w',
	(SELECT array_agg('pay_00000000000000000000000000'::text) FROM generate_series(1, 101)))$$);

-- completions: two by the holder (fast path), one result that is not an
-- object (22023, alone), one unknown operation (PF003, alone); then one by
-- another worker (PF004, as an answer, not an exception)
SELECT c.item, c.answer ->> 'action' AS action, c.answer ->> 'status' AS status,
	   c.answer ->> 'eventType' AS event_type, c.error ->> 'code' AS error_code
  FROM payflow.complete_steps('PROCESS_PAYMENT', 'bw-1', jsonb_build_array(
	jsonb_build_object('operationId', :'op1', 'result', jsonb_build_object('charge', 'c1')),
	jsonb_build_object('operationId', :'op2', 'result', jsonb_build_object('charge', 'c2')),
	jsonb_build_object('operationId', :'op3', 'result', '[1]'::jsonb),
	jsonb_build_object('operationId', 'pay_00000000000000000000000000', 'result', '{}'::jsonb))) c
 ORDER BY c.item;
SELECT * FROM pf_try(format($$SELECT * FROM payflow.complete_steps('PROCESS_PAYMENT', 'bw-2', '[{"operationId": %s, "result": {}}]')$$,
							to_jsonb(:'op4'::text)));
SELECT c.error ->> 'code' AS not_holder FROM payflow.complete_steps('PROCESS_PAYMENT', 'bw-2',
	jsonb_build_array(jsonb_build_object('operationId', :'op4', 'result', '{}'::jsonb))) c;
-- what the fast path wrote is what complete_step writes
SELECT o.payment_id, o.status, o.current_step, s.status AS step_status, s.result ->> 'charge' AS charge,
	   s.result_ref ->> 'key' = 'payments/' || o.id || '/payment-result.json' AS ref_ok,
	   payflow.payload_get(s.result_ref) = convert_to(s.result::text, 'UTF8') AS payload_ok,
	   s.completed_event_id = (SELECT e.event_id FROM payflow.outbox e
									  WHERE e.operation_id = o.id AND e.event_type = 'PaymentCompleted') AS event_ok,
	   (SELECT e.body -> 'result' = s.result_ref FROM payflow.outbox e
		 WHERE e.operation_id = o.id AND e.event_type = 'PaymentCompleted') AS body_ok,
	   (SELECT count(*) FROM payflow.steps n WHERE n.operation_id = o.id AND n.step_name = 'POST_PROCESS'
		   AND n.status = 'PENDING' AND n.input_ref = s.result_ref) AS next_step,
	   (SELECT count(*) FROM payflow.operation_history h WHERE h.operation_id = o.id
		   AND h.from_status = 'PAYMENT_PROCESSING' AND h.to_status = 'PAYMENT_COMPLETED') AS history
  FROM payflow.operations o JOIN payflow.steps s ON s.operation_id = o.id AND s.step_name = 'PROCESS_PAYMENT'
 WHERE o.id IN (:'op1', :'op2') ORDER BY o.payment_id;
-- a repeat is answered with the first answer, no second event
SELECT c.answer = jsonb_build_object('action', 'completed', 'status', 'PAYMENT_COMPLETED', 'eventType', 'PaymentCompleted',
									'eventId', (SELECT e.event_id FROM payflow.outbox e
												 WHERE e.operation_id = :'op1' AND e.event_type = 'PaymentCompleted'))
	   AS same_answer
  FROM payflow.complete_steps('PROCESS_PAYMENT', 'bw-1',
	jsonb_build_array(jsonb_build_object('operationId', :'op1', 'result', jsonb_build_object('charge', 'c1')))) c;
SELECT count(*) AS completed_events FROM payflow.outbox WHERE operation_id = :'op1' AND event_type = 'PaymentCompleted';
SELECT * FROM pf_try($$SELECT * FROM payflow.complete_steps('PROCESS_PAYMENT', 'w', '{}')$$);
SELECT * FROM pf_try($$SELECT * FROM payflow.complete_steps('PROCESS_PAYMENT', 'w', '[1]')$$);

-- the last step through the fast path: COMPLETED, the result inline in
-- OperationCompleted, published for the webhook worker
SELECT c.answer ->> 'action' FROM payflow.claim_steps('POST_PROCESS', 'bw-p', ARRAY[:'op1']) c;
SELECT c.answer ->> 'status' FROM payflow.complete_steps('POST_PROCESS', 'bw-p',
	jsonb_build_array(jsonb_build_object('operationId', :'op1', 'result', jsonb_build_object('invoice', 'in')))) c;
SELECT c.answer ->> 'action', c.input IS NOT NULL AS inline FROM payflow.claim_steps('CREATE_INVOICE', 'bw-i', ARRAY[:'op1']) c;
SELECT c.answer ->> 'status' AS status, c.answer ->> 'eventType' AS event_type
  FROM payflow.complete_steps('CREATE_INVOICE', 'bw-i',
	jsonb_build_array(jsonb_build_object('operationId', :'op1', 'result', jsonb_build_object('invoiceId', 'inv-1')))) c;
SELECT o.status, o.result ->> 'invoiceId' AS invoice, o.terminal_at IS NOT NULL AS terminal,
	   e.body ->> 'status' AS event_status, e.body -> 'result' ->> 'invoiceId' AS event_result,
	   (SELECT count(*) FROM payflow.outbox_events l WHERE l.operation_id = o.id
		   AND (payflow._outbox_event_route(l)).destination = 'operation-events'
		   AND payflow._outbox_event_body(l) = e.body) AS published
  FROM payflow.operations o JOIN payflow.outbox e ON e.operation_id = o.id AND e.event_type = 'OperationCompleted'
 WHERE o.id = :'op1';

-- failures: a retry, a permanent one, one already done, one malformed; each alone
SELECT c.item, c.answer ->> 'action' AS action, c.error ->> 'code' AS error_code
  FROM payflow.fail_steps('PROCESS_PAYMENT', 'bw-1', jsonb_build_array(
	jsonb_build_object('operationId', :'op3', 'error', jsonb_build_object('code', 'HYT00'), 'retryable', true),
	jsonb_build_object('operationId', :'op4', 'error', jsonb_build_object('code', 'DECLINED'), 'retryable', false),
	jsonb_build_object('operationId', :'op2', 'error', jsonb_build_object('code', 'X'), 'retryable', true),
	jsonb_build_object('operationId', :'op3', 'error', jsonb_build_object('code', 'X')))) c
 ORDER BY c.item;
SELECT payment_id, status FROM payflow.operations WHERE id IN (:'op3', :'op4') ORDER BY payment_id;

-- a due retry is claimed by the fast path again (attempt 2)
-- in one transaction: the scheduler running beside the test must not act on it first
BEGIN;
UPDATE payflow.operations SET step_next_attempt_at = now() - interval '1 second' WHERE id = :'op3';
SELECT c.answer ->> 'action' AS action, (c.answer ->> 'attempt')::int AS attempt
  FROM payflow.claim_steps('PROCESS_PAYMENT', 'bw-3', ARRAY[:'op3']) c;
COMMIT;
