-- Back-pressure per tenant (issue 27): past its quota of open operations a
-- tenant's new submits are refused with PF011, naming a wait; a request
-- whose operation exists already is still answered with it; the count is
-- refreshed by each scheduler pass.
SELECT payflow.create_api_key('quota-t', 'q') AS key_q \gset

-- bad input
SELECT * FROM pf_try($$SELECT payflow.set_tenant_quota('quota-t', 0)$$);
SELECT * FROM pf_try($$SELECT payflow.set_tenant_quota('quota-t', NULL)$$);
SELECT * FROM pf_try($$SELECT payflow.set_tenant_quota(NULL, 1)$$);
SELECT count(*) AS quotas FROM payflow.tenant_quotas;

SELECT payflow.set_tenant_quota('quota-t', 2) AS quota;
SELECT payflow.submit('q-1', '{"amount": 1}') AS op1 FROM payflow.authenticate(:'key_q') \gset
SELECT payflow.submit('q-2', '{"amount": 2}') AS op2 FROM payflow.authenticate(:'key_q') \gset
-- counted at the next scheduler pass: two open, the quota is two
SELECT payflow.run_scheduler() IS NOT NULL AS scheduler_ran;
SELECT open_now, max_open, open_avg_age_seconds >= 0 AS has_age FROM payflow.tenant_quotas WHERE tenant = 'quota-t';
SELECT sqlstate, regexp_replace(message, 'after [0-9]+ s', 'after N s') AS message
  FROM pf_try(format($$SELECT payflow.submit('q-3', '{"amount": 3}') FROM payflow.authenticate(%L)$$, :'key_q'));
SELECT count(*) AS q3_written FROM payflow.operations WHERE payment_id = 'q-3';
-- a request already accepted is answered with its operation, quota or not
SELECT payflow.submit('q-1', '{"amount": 1}') = :'op1' AS same_op FROM payflow.authenticate(:'key_q');
-- submit_many: all or nothing, the same error
BEGIN;
SELECT payflow.authenticate(:'key_q') AS tenant;
SELECT sqlstate, regexp_replace(message, 'after [0-9]+ s', 'after N s') AS message
  FROM pf_try($$SELECT * FROM payflow.submit_many('[{"payment_id": "q-4", "details": {}}]')$$);
COMMIT;
-- other tenants are not limited
SELECT payflow.submit('q-other', '{"amount": 1}') IS NOT NULL AS plain_sql_tenant_submits;
-- one ends: the next pass counts it, and the tenant may submit again
SELECT payflow.cancel(:'op2') AS cancelled FROM payflow.authenticate(:'key_q');
SELECT payflow.run_scheduler() IS NOT NULL AS scheduler_ran;
SELECT open_now FROM payflow.tenant_quotas WHERE tenant = 'quota-t';
SELECT payflow.submit('q-3', '{"amount": 3}') IS NOT NULL AS accepted FROM payflow.authenticate(:'key_q');
-- metrics() lists the quotas
SELECT q - 'countedAt' AS quota FROM jsonb_array_elements(payflow.metrics() -> 'tenantQuotas') q;

SELECT payflow.clear_tenant_quota('quota-t') AS cleared, payflow.clear_tenant_quota('quota-t') AS again;
