-- outbox_dead_letter: an event SQS refuses for good leaves the outbox as a
-- dead letter instead of being nacked for ever, and the step it asked for
-- fails (its operation then ends FAILED, with OperationFailed for the app).
TRUNCATE payflow.outbox;
SELECT payflow.submit('odl-1', '{"amount": 1}') AS op \gset
SELECT count(*) AS claimed FROM payflow.outbox_claim(10, 'relay-dl');
SELECT event_id AS request_id FROM payflow.outbox WHERE operation_id = :'op' \gset

-- only the relay holding the claim may, as with ack and nack
SELECT payflow.outbox_dead_letter(:'request_id', 'InvalidMessageContents: bad', 'relay-other') AS by_another_relay;
SELECT count(*) AS still_in_outbox FROM payflow.outbox WHERE event_id = :'request_id';

SELECT payflow.outbox_dead_letter(:'request_id',
		'SQS refused the message: InvalidMessageContents: Invalid characters found', 'relay-dl') AS dead_lettered;
SELECT count(*) AS request_left_in_outbox FROM payflow.outbox WHERE event_id = :'request_id';
-- the event is kept, with its body and why
SELECT source, queue, operation_id = :'op' AS of_op, error ->> 'code' AS code,
       error ->> 'eventId' = :'request_id' AS names_event,
       error ->> 'message' LIKE 'SQS refused the PaymentRequested event for good: %InvalidMessageContents%' AS says_why,
       message_body::jsonb ->> 'eventType' AS body_event, attempts
  FROM payflow.dead_letters WHERE source = 'event' AND operation_id = :'op';
-- the operation could never run: it failed at its step, and the app hears of it
SELECT status, error ->> 'code' AS code, error ->> 'step' AS step FROM payflow.operations WHERE id = :'op';
SELECT status, last_error ->> 'code' AS code FROM payflow.steps WHERE operation_id = :'op';
SELECT from_status, to_status, actor, reason LIKE 'SQS refused%' AS reason_says FROM payflow.history(:'op') WHERE to_status = 'FAILED';
SELECT event_type, destination FROM payflow.outbox WHERE operation_id = :'op';
SELECT source, step_name FROM payflow.dead_letters WHERE operation_id = :'op' ORDER BY id;

-- a terminal event refused for good: a dead letter, the operation as it was
SELECT count(*) AS claimed FROM payflow.outbox_claim(10, 'relay-dl');
SELECT payflow.outbox_dead_letter(event_id, 'MessageTooLong: too long', 'relay-dl') AS terminal_dead_lettered
  FROM payflow.outbox WHERE operation_id = :'op';
SELECT status FROM payflow.operations WHERE id = :'op';
SELECT count(*) AS outbox_of_op FROM payflow.outbox WHERE operation_id = :'op';
SELECT count(*) FILTER (WHERE source = 'event') AS event_dead_letters FROM payflow.dead_letters WHERE operation_id = :'op';

-- the operation can be replayed from its failed step (once its event can be sent)
SELECT payflow.replay(:'op') AS replayed;
SELECT status FROM payflow.operations WHERE id = :'op';
SELECT event_type FROM payflow.outbox WHERE operation_id = :'op';

-- a request for a step a worker runs already (a re-drive's second request)
-- leaves that worker alone
SELECT count(*) AS claimed FROM payflow.outbox_claim(10, 'relay-dl');
SELECT event_id AS again_id FROM payflow.outbox WHERE operation_id = :'op' \gset
SELECT payflow.claim_step(:'op', 'PROCESS_PAYMENT', 'worker-dl') ->> 'action' AS worker_claims;
SELECT payflow.outbox_dead_letter(:'again_id', 'InvalidMessageContents: bad', 'relay-dl') AS dead_lettered;
SELECT status FROM payflow.operations WHERE id = :'op';
SELECT status FROM payflow.steps WHERE operation_id = :'op';

-- bad input
SELECT * FROM pf_try($$SELECT payflow.outbox_dead_letter(NULL, 'x', 'r')$$);
SELECT * FROM pf_try($$SELECT payflow.outbox_dead_letter(gen_random_uuid(), 'x')$$);
SELECT payflow.outbox_dead_letter(gen_random_uuid(), 'x', 'r') AS unknown_event;
-- only relays may
SET ROLE payflow_app;
SELECT * FROM pf_try($$SELECT payflow.outbox_dead_letter(gen_random_uuid(), 'x', 'r')$$);
RESET ROLE;
SET ROLE payflow_relay;
SELECT payflow.outbox_dead_letter(gen_random_uuid(), 'x', 'r') AS relay_may_call;
RESET ROLE;
