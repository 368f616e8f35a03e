-- reconcile(): what the legacy DBMS charged and what callers were given
-- that payflow does not account for (after a failover, a restore, an
-- incident).  Ids are shown by the label of their payment.
SELECT payflow.submit('rec-done', '{"amount": 1}') AS op_done \gset
SELECT payflow.submit('rec-failed', '{"amount": 2}') AS op_failed \gset
SELECT payflow.submit('rec-running', '{"amount": 3}') AS op_running \gset
SELECT c ->> 'action' AS claimed FROM payflow.claim_step(:'op_done', 'PROCESS_PAYMENT', 'rec-worker', 60) c;
SELECT c ->> 'action' AS completed
  FROM payflow.complete_step(:'op_done', 'PROCESS_PAYMENT', 'rec-worker', '{"charge_id": "ch_1"}') c;
SELECT c ->> 'action' AS claimed FROM payflow.claim_step(:'op_failed', 'PROCESS_PAYMENT', 'rec-worker', 60) c;
SELECT c ->> 'action' AS failed
  FROM payflow.fail_step(:'op_failed', 'PROCESS_PAYMENT', 'rec-worker', '{"code": "outcome_unknown"}', false) c;
SELECT c ->> 'action' AS claimed FROM payflow.claim_step(:'op_running', 'PROCESS_PAYMENT', 'rec-worker', 60) c;
-- an operation id of the right shape that payflow never had (lost with the old primary)
SELECT 'pay_01ZZZZZZZZZZZZZZZZZZZZZZZZ' AS op_lost \gset

SELECT r.finding,
       coalesce(o.payment_id, CASE r.operation_id WHEN :'op_lost' THEN 'lost' END) AS operation,
       r.payment_id, r.detail - 'charge' AS detail, r.detail -> 'charge' ->> 'charge_id' AS charge
  FROM payflow.reconcile(
         jsonb_build_array(
           jsonb_build_object('idempotency_key', :'op_done' || ':process_payment', 'payment_id', 'rec-done', 'charge_id', 'ch_1'),
           jsonb_build_object('idempotency_key', :'op_failed' || ':process_payment', 'payment_id', 'rec-failed', 'charge_id', 'ch_2'),
           jsonb_build_object('idempotency_key', :'op_running' || ':process_payment', 'payment_id', 'rec-running', 'charge_id', 'ch_3'),
           jsonb_build_object('idempotency_key', :'op_lost' || ':process_payment', 'payment_id', 'rec-lost', 'charge_id', 'ch_4'),
           jsonb_build_object('idempotency_key', 'not-payflow-42', 'charge_id', 'ch_5')),
         ARRAY[:'op_done', :'op_failed', :'op_lost', :'op_lost']) r
  LEFT JOIN payflow.operations o ON o.id = r.operation_id
 ORDER BY 1, 2;

-- nothing to say when everything is accounted for
SELECT count(*) AS findings
  FROM payflow.reconcile(jsonb_build_array(jsonb_build_object('idempotency_key', :'op_done' || ':process_payment')),
                         ARRAY[:'op_done']);
SELECT count(*) AS findings FROM payflow.reconcile();

-- bad input: a specific SQLSTATE, nothing else happens
SELECT * FROM pf_try($$SELECT * FROM payflow.reconcile(NULL)$$);
SELECT * FROM pf_try($$SELECT * FROM payflow.reconcile('{"idempotency_key": "x"}')$$);
SELECT * FROM pf_try($$SELECT * FROM payflow.reconcile('[{"idempotency_key": "x"}, {"charge_id": "ch_9"}]')$$);
SELECT * FROM pf_try($$SELECT * FROM payflow.reconcile('[]', NULL)$$);
SELECT * FROM pf_try($$SELECT * FROM payflow.reconcile('[]', ARRAY['pay_x', NULL])$$);

-- the admin's only
SET ROLE payflow_app;
SELECT * FROM pf_try($$SELECT * FROM payflow.reconcile()$$);
RESET ROLE;
SET ROLE payflow_admin;
SELECT count(*) AS findings_for_the_admin FROM payflow.reconcile('[]', ARRAY['pay_01ZZZZZZZZZZZZZZZZZZZZZZZZ']);
RESET ROLE;
