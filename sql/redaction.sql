-- Card numbers in error texts are masked before they are stored: a legacy
-- DBMS error that echoes its input must not reach the step, the status
-- document, history, dead letters or OperationFailed.  Luhn-valid runs of
-- 13 to 19 digits (spaces or dashes allowed) keep their last four digits.
SELECT payflow._mask_card_numbers('invalid input syntax for type numeric: "4111111111111111x"') AS visa,
       payflow._mask_card_numbers('card 5500 0055 5555 5559 declined') AS mastercard_spaced,
       payflow._mask_card_numbers('pan 3782-822463-10005') AS amex_dashed,
       payflow._mask_card_numbers('order 4111111111111112 (not Luhn), ref 1234') AS not_a_card,
       payflow._mask_card_numbers('short 411111111111') AS too_short,
       payflow._mask_card_numbers('41111111111111111111') AS twenty_digits;
-- A UUID is no card, though its first groups may form a Luhn-valid run
-- (1767842442884): event ids in dead-lettered bodies stay as they were;
-- a card beside it is still masked.
SELECT payflow._mask_card_numbers('{"eventId":"17678424-4288-4eea-b643-769411a65bd3","card":"4111111111111111"}') AS uuid_kept,
       payflow._mask_card_numbers('93054072-5203-4e79-83fa-968e33398ecb 93054072-5203-4e79-83fa-968e33398ecb') AS uuid_twice,
       payflow._mask_card_numbers('1767842442884') AS same_digits_alone;
SELECT payflow._mask_card_numbers('{"message": "4111111111111111", "n": 4111111111111111, "a": ["5500005555555559"], "o": {"k": "x 4111 1111 1111 1111"}}'::jsonb) AS json;

SELECT payflow.submit('rd-pay-1', '{"amount": 1}') AS op \gset
SELECT payflow.claim_step(:'op', 'PROCESS_PAYMENT', 'rd-w') ->> 'action' AS claimed;
-- a retryable error first, then the permanent one
SELECT payflow.fail_step(:'op', 'PROCESS_PAYMENT', 'rd-w',
	'{"code": "22P02", "message": "invalid input syntax for type numeric: \"4111111111111111x\""}', true) ->> 'action' AS first;
SELECT last_error ->> 'message' AS step_error FROM payflow.steps WHERE operation_id = :'op';
UPDATE payflow.operations SET step_status = 'RUNNING', step_lease_owner = 'rd-w' WHERE id = :'op';
SELECT payflow.fail_step(:'op', 'PROCESS_PAYMENT', 'rd-w',
	'{"code": "P0001", "message": "card 5500005555555559 declined"}', false) ->> 'action' AS second;
SELECT payflow.status(:'op') -> 'error' ->> 'message' AS status_error;
SELECT reason FROM payflow.history(:'op') WHERE to_status = 'FAILED';
SELECT error ->> 'message' AS dead_letter FROM payflow.dead_letters WHERE operation_id = :'op';
SELECT body -> 'error' ->> 'message' AS event FROM payflow.outbox WHERE operation_id = :'op' AND event_type = 'OperationFailed';
SELECT count(*) AS unmasked_anywhere
  FROM (SELECT last_error::text AS t FROM payflow.steps WHERE operation_id = :'op'
		UNION ALL SELECT error::text FROM payflow.operations WHERE id = :'op'
		UNION ALL SELECT reason FROM payflow.operation_history WHERE operation_id = :'op'
		UNION ALL SELECT error::text FROM payflow.dead_letters WHERE operation_id = :'op'
		UNION ALL SELECT body::text FROM payflow.outbox WHERE operation_id = :'op') x
 WHERE t ~ '4111111111111111|5500005555555559';
-- message dead letters too, body and error
SELECT payflow.record_dead_letter('payment-requests', '{"card": "4111111111111111"}',
								  '{"message": "bad 4111111111111111"}') AS dl \gset
SELECT message_body, error ->> 'message' AS error FROM payflow.dead_letters WHERE id = :dl;
