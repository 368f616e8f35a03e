-- The pipeline as data: versions, add_step / remove_step / add_destination,
-- pipeline(), the transition check derived from the definition, operations
-- finishing on the version they started with.  One transaction, rolled
-- back at the end: the other files expect the default pipeline.
BEGIN;

-- the default pipeline, as workers read it
SELECT p ->> 'version' AS version, p ->> 'newest' AS newest, p ->> 'initialStatus' AS initial,
       p ->> 'completedStatus' AS completed, p ->> 'completedEvent' AS completed_event,
       p ->> 'failedEvent' AS failed_event
  FROM payflow.pipeline() p;
SELECT s ->> 'step' AS step, s ->> 'readyStatus' AS ready, s ->> 'runningStatus' AS running,
       s ->> 'doneStatus' AS done, s ->> 'requestEvent' AS event, s ->> 'destination' AS destination,
       s ->> 'inputField' AS input, s ->> 'resultName' AS result
  FROM jsonb_array_elements(payflow.pipeline(1) -> 'steps') s;
SELECT * FROM pf_try($$SELECT payflow.pipeline(99)$$);

-- destinations: the queues the database knows
SELECT payflow.add_destination('risk-requests', 'RiskCheckRequested') AS added;
SELECT payflow.add_destination('risk-requests') AS added_again;
SELECT payflow.add_destination('notify-requests') AS added;
SELECT * FROM pf_try($$SELECT payflow.add_destination('bad queue')$$);
SELECT * FROM pf_try($$SELECT payflow.add_destination(NULL)$$);

-- bad step definitions are refused, each with its own code, and change nothing
SELECT * FROM pf_try($$SELECT payflow.add_step('RISK_CHECK', 'RiskCheckRequested', 'no-such-queue',
	before_step => 'PROCESS_PAYMENT', running_status => 'RISK_CHECKING', done_status => 'RISK_CHECKED')$$);
SELECT * FROM pf_try($$SELECT payflow.add_step('RISK_CHECK', 'RiskCheckRequested', 'risk-requests',
	before_step => 'NO_SUCH_STEP', running_status => 'RISK_CHECKING', done_status => 'RISK_CHECKED')$$);
SELECT * FROM pf_try($$SELECT payflow.add_step('NOTIFY_CUSTOMER', 'NotifyCustomerRequested', 'notify-requests',
	after_step => 'CREATE_INVOICE', ready_status => 'PENDING', running_status => 'NOTIFYING')$$);
SELECT * FROM pf_try($$SELECT payflow.add_step('RISK_CHECK', 'RiskCheckRequested', 'risk-requests',
	before_step => 'PROCESS_PAYMENT', running_status => 'RISK_CHECKING', done_status => 'PENDING')$$);
SELECT * FROM pf_try($$SELECT payflow.add_step('RISK_CHECK', 'RiskCheckRequested', 'risk-requests',
	before_step => 'PROCESS_PAYMENT', running_status => 'RISK_CHECKING', done_status => 'RISK_CHECKING')$$);
SELECT * FROM pf_try($$SELECT payflow.add_step('RISK_CHECK', 'RiskCheckRequested', 'risk-requests',
	before_step => 'PROCESS_PAYMENT', running_status => 'RISK_CHECKING', done_status => 'INVOICE_PENDING')$$);
SELECT * FROM pf_try($$SELECT payflow.add_step('RISK_CHECK', 'RiskCheckRequested', 'risk-requests',
	before_step => 'PROCESS_PAYMENT', running_status => 'FAILED', done_status => 'RISK_CHECKED')$$);
SELECT * FROM pf_try($$SELECT payflow.add_step('POST_PROCESS', 'RiskCheckRequested', 'risk-requests',
	before_step => 'PROCESS_PAYMENT', running_status => 'RISK_CHECKING', done_status => 'RISK_CHECKED')$$);
SELECT * FROM pf_try($$SELECT payflow.add_step('RISK_CHECK', 'PaymentRequested', 'risk-requests',
	before_step => 'PROCESS_PAYMENT', running_status => 'RISK_CHECKING', done_status => 'RISK_CHECKED')$$);
SELECT * FROM pf_try($$SELECT payflow.add_step('RISK_CHECK', 'OperationCompleted', 'risk-requests',
	before_step => 'PROCESS_PAYMENT', running_status => 'RISK_CHECKING', done_status => 'RISK_CHECKED')$$);
SELECT * FROM pf_try($$SELECT payflow.add_step('RISK_CHECK', 'RiskCheckRequested', 'payment-requests',
	before_step => 'PROCESS_PAYMENT', running_status => 'RISK_CHECKING', done_status => 'RISK_CHECKED')$$);
SELECT * FROM pf_try($$SELECT payflow.add_step('RISK_CHECK', 'RiskCheckRequested', 'operation-events',
	before_step => 'PROCESS_PAYMENT', running_status => 'RISK_CHECKING', done_status => 'RISK_CHECKED')$$);
SELECT * FROM pf_try($$SELECT payflow.add_step('RISK_CHECK', 'RiskCheckRequested', 'risk-requests',
	before_step => 'PROCESS_PAYMENT', running_status => 'RISK_CHECKING', done_status => 'RISK_CHECKED',
	result_name => 'payment-result.json')$$);
SELECT * FROM pf_try($$SELECT payflow.add_step('RISK_CHECK', 'RiskCheckRequested', 'risk-requests',
	running_status => 'RISK_CHECKING', done_status => 'RISK_CHECKED')$$);
SELECT * FROM pf_try($$SELECT payflow.add_step('RISK_CHECK', 'RiskCheckRequested', 'risk-requests',
	after_step => 'PROCESS_PAYMENT', before_step => 'POST_PROCESS', running_status => 'RISK_CHECKING')$$);
SELECT * FROM pf_try($$SELECT payflow.add_step('risk check', 'RiskCheckRequested', 'risk-requests',
	before_step => 'PROCESS_PAYMENT', running_status => 'RISK_CHECKING', done_status => 'RISK_CHECKED')$$);
SELECT * FROM pf_try($$SELECT payflow.add_step('RISK_CHECK', 'RiskCheckRequested', 'risk-requests',
	before_step => 'PROCESS_PAYMENT', running_status => 'RISK_CHECKING', done_status => 'RISK_CHECKED',
	input_field => 'operationId')$$);
SELECT * FROM pf_try($$SELECT payflow.add_step('RISK_CHECK', 'RiskCheckRequested', 'risk-requests',
	before_step => 'PROCESS_PAYMENT', running_status => 'RISK_CHECKING', done_status => 'RISK_CHECKED',
	ready_status => 'ELSEWHERE')$$);
SELECT * FROM pf_try($$SELECT payflow.add_step('RISK_CHECK', 'RiskCheckRequested', 'risk-requests',
	before_step => 'PROCESS_PAYMENT', running_status => 'RISK_CHECKING', done_status => 'RISK_CHECKED',
	max_attempts => 0)$$);
SELECT count(*) AS versions FROM payflow.pipelines;
SELECT count(*) AS step_rows FROM payflow.step_definitions;

-- an operation in flight on version 1
SELECT payflow.submit('pipe-old', '{"amount": 5, "currency": "EUR"}') AS op_old \gset

-- RISK_CHECK before PROCESS_PAYMENT, NOTIFY_CUSTOMER after CREATE_INVOICE
SELECT payflow.add_step('RISK_CHECK', 'RiskCheckRequested', 'risk-requests',
	before_step => 'PROCESS_PAYMENT', running_status => 'RISK_CHECKING', done_status => 'RISK_CHECKED',
	input_field => 'payload', max_attempts => 2) AS version;
SELECT payflow.add_step('NOTIFY_CUSTOMER', 'NotifyCustomerRequested', 'notify-requests',
	after_step => 'CREATE_INVOICE', ready_status => 'NOTIFY_PENDING', running_status => 'NOTIFYING',
	result_name => 'notification.json') AS version;
SELECT p ->> 'version' AS version, p ->> 'initialStatus' AS initial, p ->> 'completedStatus' AS completed
  FROM payflow.pipeline() p;
SELECT s ->> 'position' AS pos, s ->> 'step' AS step, s ->> 'readyStatus' AS ready,
       s ->> 'runningStatus' AS running, s ->> 'doneStatus' AS done, s ->> 'requestEvent' AS event,
       s ->> 'destination' AS destination, s ->> 'maxAttempts' AS max_attempts
  FROM jsonb_array_elements(payflow.pipeline() -> 'steps') s;
-- version 2 is the step between: versions stay as they were written
SELECT string_agg(step_name, ' ' ORDER BY position) AS v1 FROM payflow.step_definitions WHERE pipeline_version = 1;
SELECT string_agg(step_name, ' ' ORDER BY position) AS v2 FROM payflow.step_definitions WHERE pipeline_version = 2;
SELECT (payflow.pipeline(1) ->> 'newest')::boolean AS v1_newest;

-- the transition check follows each version's graph
SELECT payflow._check_transition('PENDING', 'PAYMENT_PROCESSING', false, 1) AS v1_claim;
SELECT * FROM pf_try($$SELECT payflow._check_transition('PENDING', 'PAYMENT_PROCESSING', false, 3)$$);
SELECT payflow._check_transition('PENDING', 'RISK_CHECKING', false, 3) AS v3_claim,
       payflow._check_transition('RISK_CHECKED', 'PAYMENT_PROCESSING', false, 3) AS v3_payment,
       payflow._check_transition('INVOICE_PENDING', 'NOTIFY_PENDING', false, 3) AS v3_invoiced,
       payflow._check_transition('FAILED', 'RISK_CHECKED', true, 3) AS v3_replay;
SELECT * FROM pf_try($$SELECT payflow._check_transition('INVOICE_PENDING', 'COMPLETED', false, 3)$$);
SELECT * FROM pf_try($$SELECT payflow._check_transition('RISK_CHECKING', 'PAYMENT_PROCESSING', false, 1)$$);
SELECT s, payflow._is_terminal(s) FROM unnest(ARRAY['RISK_CHECKING', 'NOTIFY_PENDING', 'COMPLETED']) s;

-- a new operation takes the newest version: RISK_CHECK first
SELECT payflow.submit('pipe-new', '{"amount": 7, "currency": "EUR"}', correlation_id => 'c-new') AS op_new \gset
SELECT pipeline_version, status, current_step FROM payflow.operations WHERE id = :'op_new';
SELECT event_type, destination, body -> 'payload' = payflow._request_ref(o.id, o.request_ref, o.request_mac, o.request_size) AS input_is_request
  FROM payflow.outbox x JOIN payflow.operations o ON o.id = x.operation_id WHERE x.operation_id = :'op_new';
-- the old one still starts with PROCESS_PAYMENT
SELECT pipeline_version, status, current_step FROM payflow.operations WHERE id = :'op_old';

-- a claim says what the worker needs
SELECT c ->> 'action' AS action, c ->> 'pipelineVersion' AS version, c ->> 'inputField' AS input_field,
       c ->> 'resultName' AS result_name
  FROM payflow.claim_step(:'op_new', 'RISK_CHECK', 'w-risk') c;
SELECT c ->> 'action' AS action, c ->> 'resultName' AS result_name, c ->> 'pipelineVersion' AS version
  FROM payflow.claim_step(:'op_old', 'PROCESS_PAYMENT', 'w-pay') c;
-- a step the operation's version does not have
SELECT c ->> 'action' AS action, c ->> 'reason' AS reason
  FROM payflow.claim_step(:'op_old', 'RISK_CHECK', 'w-risk') c;
SELECT * FROM pf_try(format($$SELECT payflow.complete_step(%L, 'NOTIFY_CUSTOMER', 'w', '{}')$$, :'op_old'));

-- RISK_CHECK keeps no result payload: PROCESS_PAYMENT gets the request
SELECT c ->> 'status' AS status, c ->> 'eventType' AS event
  FROM payflow.complete_step(:'op_new', 'RISK_CHECK', 'w-risk', '{"score": 3}') c;
SELECT s.input_ref = payflow._request_ref(o.id, o.request_ref, o.request_mac, o.request_size) AS payment_input_is_request
  FROM payflow.steps s JOIN payflow.operations o ON o.id = s.operation_id
 WHERE s.operation_id = :'op_new' AND s.step_name = 'PROCESS_PAYMENT';

-- both run to the end, each on its own version (batch fast path and full path)
SELECT payflow.complete_step(:'op_old', 'PROCESS_PAYMENT', 'w-pay', '{"charge_id": "ch-old"}') ->> 'status' AS old_status;
SELECT item, answer ->> 'action' AS action FROM payflow.claim_steps('PROCESS_PAYMENT', 'w-pay', ARRAY[:'op_new']);
SELECT item, answer ->> 'status' AS status FROM payflow.complete_steps('PROCESS_PAYMENT', 'w-pay',
	jsonb_build_array(jsonb_build_object('operationId', :'op_new', 'result', '{"charge_id": "ch-new"}'::jsonb)));
SELECT payflow.claim_step(op, 'POST_PROCESS', 'w-post') ->> 'action' AS action
  FROM unnest(ARRAY[:'op_old', :'op_new']) op ORDER BY op = :'op_new';
SELECT payflow.complete_step(op, 'POST_PROCESS', 'w-post', '{"amount": 5}') ->> 'status' AS status
  FROM unnest(ARRAY[:'op_old', :'op_new']) op ORDER BY op = :'op_new';
SELECT payflow.claim_step(op, 'CREATE_INVOICE', 'w-inv') ->> 'action' AS action
  FROM unnest(ARRAY[:'op_old', :'op_new']) op ORDER BY op = :'op_new';
SELECT c ->> 'status' AS status, c ->> 'eventType' AS event
  FROM unnest(ARRAY[:'op_old', :'op_new']) op,
       LATERAL payflow.complete_step(op, 'CREATE_INVOICE', 'w-inv', '{"invoiceId": "inv-1"}') c
 ORDER BY op = :'op_new';
-- NOTIFY_CUSTOMER gets CREATE_INVOICE's input (it keeps no result payload)
SELECT x.body ->> 'eventType' AS event, x.destination,
       x.body -> 'input' = (SELECT s.input_ref FROM payflow.steps s
                             WHERE s.operation_id = :'op_new' AND s.step_name = 'CREATE_INVOICE') AS input_ok
  FROM payflow.outbox x WHERE x.operation_id = :'op_new' AND x.event_type = 'NotifyCustomerRequested';
SELECT payflow.claim_step(:'op_new', 'NOTIFY_CUSTOMER', 'w-notify') ->> 'resultName' AS result_name;
SELECT c ->> 'status' AS status, c ->> 'eventType' AS event
  FROM payflow.complete_step(:'op_new', 'NOTIFY_CUSTOMER', 'w-notify', '{"sent": true}') c;
SELECT payflow.status(:'op_new') -> 'result' AS new_result, payflow.status(:'op_old') -> 'result' AS old_result;
SELECT to_status FROM payflow.history(:'op_new');
SELECT to_status FROM payflow.history(:'op_old');
SELECT event_type, destination FROM payflow.outbox WHERE operation_id = :'op_new' ORDER BY seq;
-- the log renders each of them as the relays got it, on either version (a
-- step with no result hands on its own input: RISK_CHECK, CREATE_INVOICE)
SELECT x.event_type, l.rendered, payflow._outbox_event_body(l) = x.body AS rendered_same
  FROM payflow.outbox x JOIN payflow.outbox_events l ON l.seq = x.seq
 WHERE x.operation_id IN (:'op_new', :'op_old') ORDER BY x.operation_id = :'op_new', x.seq;

-- no SQL path writes an illegal move, however it updates the table
SELECT payflow.submit('pipe-guard', '{"amount": 1}') AS op_guard \gset
SELECT * FROM pf_try(format($$UPDATE payflow.operations SET status = 'PAYMENT_PROCESSING' WHERE id = %L$$, :'op_guard'));
SELECT * FROM pf_try(format($$UPDATE payflow.operations SET status = 'COMPLETED' WHERE id = %L$$, :'op_guard'));
SELECT * FROM pf_try(format($$UPDATE payflow.operations SET pipeline_version = 1 WHERE id = %L$$, :'op_guard'));
SELECT * FROM pf_try(format($$UPDATE payflow.operations SET status = 'BOGUS' WHERE id = %L$$, :'op_guard'));
UPDATE payflow.operations SET status = 'RISK_CHECKING' WHERE id = :'op_guard';
UPDATE payflow.operations SET status = 'FAILED' WHERE id = :'op_guard';
-- FAILED -> a ready status: replay only
SELECT * FROM pf_try(format($$UPDATE payflow.operations SET status = 'PENDING' WHERE id = %L$$, :'op_guard'));
UPDATE payflow.operations SET step_status = 'FAILED' WHERE id = :'op_guard';
SELECT payflow.replay(:'op_guard') AS replayed;
SELECT status, current_step FROM payflow.operations WHERE id = :'op_guard';
-- the permission was for that one move
UPDATE payflow.operations SET status = 'FAILED' WHERE id = :'op_guard';
SELECT * FROM pf_try(format($$UPDATE payflow.operations SET status = 'PENDING' WHERE id = %L$$, :'op_guard'));

-- removing a step is refused while operations in flight have it
SELECT * FROM pf_try($$SELECT payflow.remove_step('RISK_CHECK')$$);
SELECT * FROM pf_try($$SELECT payflow.remove_step('NO_SUCH_STEP')$$);
-- (a FAILED operation is settled once its end is recorded)
UPDATE payflow.operations SET terminal_at = now() WHERE id = :'op_guard';
SELECT payflow.remove_step('RISK_CHECK') AS version;
SELECT string_agg(s ->> 'step' || ':' || (s ->> 'readyStatus') || '>' || (s ->> 'doneStatus'), ' ') AS v4
  FROM jsonb_array_elements(payflow.pipeline() -> 'steps') s;
SELECT payflow.remove_step('NOTIFY_CUSTOMER') AS version;
SELECT string_agg(s ->> 'step' || ':' || (s ->> 'readyStatus') || '>' || (s ->> 'doneStatus'), ' ') AS v5
  FROM jsonb_array_elements(payflow.pipeline() -> 'steps') s;
ROLLBACK;

SELECT count(*) AS versions FROM payflow.pipelines;
SELECT count(*) AS destinations FROM payflow.destinations;

-- a version number written again after a rollback means the new steps
-- (no backend keeps the graph of a version that was not committed)
BEGIN;
SELECT payflow.add_destination('notify-requests') AS added;
SELECT payflow.add_step('NOTIFY_CUSTOMER', 'NotifyCustomerRequested', 'notify-requests',
	after_step => 'CREATE_INVOICE', ready_status => 'NOTIFY_PENDING', running_status => 'NOTIFYING') AS version;
SELECT payflow._check_transition('INVOICE_PENDING', 'NOTIFY_PENDING', false, 2) AS v2_invoiced;
ROLLBACK;
SELECT * FROM pf_try($$SELECT payflow._check_transition('INVOICE_PENDING', 'NOTIFY_PENDING', false, 2)$$);
