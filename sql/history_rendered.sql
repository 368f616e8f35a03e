-- The history of the common path is rendered, not written (history.sql):
-- a submit, a claim that moves the status and a completion leave no row in
-- history_events, yet history() and changes() show them as 0.4 did, with
-- the same actors and ids strictly increasing per operation; retries,
-- takeovers, failures, replays and cancels keep every change in its place.
CREATE FUNCTION pf_history(p_op text)
	RETURNS TABLE (n bigint, from_status text, to_status text, reason text, actor text)
	LANGUAGE sql
	AS $$ SELECT h.id - 1000000000000000, h.from_status, h.to_status, h.reason, h.actor
			FROM payflow.operation_history h WHERE h.operation_id = p_op ORDER BY h.id $$;
-- history() gives the same rows, in the same order, with the same times
CREATE FUNCTION pf_history_agrees(p_op text) RETURNS boolean
	LANGUAGE sql
	AS $$ SELECT array_agg(ROW(h.at, h.from_status, h.to_status, h.reason, h.actor)::text ORDER BY h.id)
			   = (SELECT array_agg(ROW(x.at, x.from_status, x.to_status, x.reason, x.actor)::text)
					FROM payflow.history(p_op) x)
			FROM payflow.operation_history h WHERE h.operation_id = p_op $$;

-- the common path, by the batch functions: seven changes, none stored
SELECT payflow.submit('hr-a', '{"amount": 1}') AS op_a \gset
SELECT count(*) AS claimed FROM payflow.claim_steps('PROCESS_PAYMENT', 'w-a', ARRAY[:'op_a']);
-- while the attempt runs, its claim is told by the operation's row
SELECT * FROM pf_history(:'op_a');
SELECT count(*) AS completed FROM payflow.complete_steps('PROCESS_PAYMENT', 'w-a',
	jsonb_build_array(jsonb_build_object('operationId', :'op_a', 'result', '{"tx": 1}'::jsonb)));
SELECT count(*) AS claimed FROM payflow.claim_steps('POST_PROCESS', 'w-p', ARRAY[:'op_a']);
SELECT count(*) AS completed FROM payflow.complete_steps('POST_PROCESS', 'w-p',
	jsonb_build_array(jsonb_build_object('operationId', :'op_a', 'result', '{"pp": 1}'::jsonb)));
SELECT count(*) AS claimed FROM payflow.claim_steps('CREATE_INVOICE', 'w-i', ARRAY[:'op_a']);
SELECT count(*) AS completed FROM payflow.complete_steps('CREATE_INVOICE', 'w-i',
	jsonb_build_array(jsonb_build_object('operationId', :'op_a', 'result', '{"invoice": 1}'::jsonb)));
SELECT * FROM pf_history(:'op_a');
SELECT pf_history_agrees(:'op_a') AS agrees;
SELECT count(*) AS rows_stored FROM payflow.history_events WHERE operation_id = :'op_a';
-- changes() resumes after an id: the ones after it, nothing twice
SELECT id - 1000000000000000 AS n, to_status, terminal
  FROM payflow.changes(ARRAY[:'op_a'], 1000000000000004) ORDER BY id;

-- a retry, by the single-item functions: the claim is the first attempt's
-- (its worker), the completion the second's
SELECT payflow.submit('hr-b', '{"amount": 1}') AS op_b \gset
SELECT payflow.claim_step(:'op_b', 'PROCESS_PAYMENT', 'w-1') ->> 'action' AS action;
SELECT payflow.fail_step(:'op_b', 'PROCESS_PAYMENT', 'w-1', '{"code": "08S01"}', true) ->> 'action' AS action;
SELECT * FROM pf_history(:'op_b');
UPDATE payflow.operations SET step_next_attempt_at = now() - interval '1 second' WHERE id = :'op_b';
SELECT payflow.claim_step(:'op_b', 'PROCESS_PAYMENT', 'w-2') ->> 'attempt' AS attempt;
SELECT payflow.complete_step(:'op_b', 'PROCESS_PAYMENT', 'w-2', '{"tx": 2}') ->> 'action' AS action;
SELECT * FROM pf_history(:'op_b');
SELECT pf_history_agrees(:'op_b') AS agrees;
SELECT count(*) AS rows_stored FROM payflow.history_events WHERE operation_id = :'op_b';

-- a takeover after the lease expired: the same
SELECT payflow.submit('hr-c', '{"amount": 1}') AS op_c \gset
SELECT payflow.claim_step(:'op_c', 'PROCESS_PAYMENT', 'w-1') ->> 'action' AS action;
UPDATE payflow.operations SET step_lease_expires_at = now() - interval '1 second' WHERE id = :'op_c';
SELECT payflow.claim_step(:'op_c', 'PROCESS_PAYMENT', 'w-2') ->> 'takeover' AS takeover;
SELECT * FROM pf_history(:'op_c');
SELECT payflow.complete_step(:'op_c', 'PROCESS_PAYMENT', 'w-2', '{"tx": 3}') ->> 'action' AS action;
SELECT * FROM pf_history(:'op_c');

-- a failure and a replay are stored; the claims and the completion around
-- them are rendered, each in its place
SELECT payflow.submit('hr-d', '{"amount": 1}') AS op_d \gset
SELECT payflow.claim_step(:'op_d', 'PROCESS_PAYMENT', 'w-1') ->> 'action' AS action;
SELECT payflow.fail_step(:'op_d', 'PROCESS_PAYMENT', 'w-1', '{"code": "declined", "message": "card declined"}', false)
	   ->> 'action' AS action;
SELECT payflow.replay(:'op_d') AS replayed;
SELECT count(*) AS claimed FROM payflow.claim_steps('PROCESS_PAYMENT', 'w-2', ARRAY[:'op_d']);
SELECT count(*) AS completed FROM payflow.complete_steps('PROCESS_PAYMENT', 'w-2',
	jsonb_build_array(jsonb_build_object('operationId', :'op_d', 'result', '{"tx": 4}'::jsonb)));
SELECT * FROM pf_history(:'op_d');
SELECT pf_history_agrees(:'op_d') AS agrees;
SELECT n, reason FROM pf_history(:'op_d') h
  JOIN (SELECT id - 1000000000000000 AS n FROM payflow.history_events WHERE operation_id = :'op_d') s USING (n);

-- a cancel
SELECT payflow.submit('hr-e', '{"amount": 1}') AS op_e \gset
SELECT payflow.cancel(:'op_e', 'changed my mind') AS cancelled;
SELECT * FROM pf_history(:'op_e');

-- ids grow with the changes, per operation, for all of the above
SELECT bool_and(ok) AS ids_follow_times FROM (
	SELECT h.id > lag(h.id) OVER w AND h.at >= lag(h.at) OVER w AS ok
	  FROM payflow.operation_history h
	 WHERE h.operation_id IN (:'op_a', :'op_b', :'op_c', :'op_d', :'op_e')
	WINDOW w AS (PARTITION BY h.operation_id ORDER BY h.id)) x
 WHERE ok IS NOT NULL;

DROP FUNCTION pf_history(text), pf_history_agrees(text);
