-- s3_unretained_keys(): which keys of an S3 listing page no operation
-- keeps (payflow-s3-sweep deletes them).  Keys are shown by label.
SELECT payflow.submit('s3p-live', '{"amount": 1}') AS op_live \gset
SELECT payflow.submit_ref('s3p-ref', 's3', 'requests/sha256-' || repeat('a', 64) || '.json',
                          'sha256:' || repeat('a', 64), 10) AS op_ref \gset
SELECT payflow.submit('s3p-done', '{"amount": 2}') AS op_done \gset
UPDATE payflow.operations SET payloads_purged_at = now() WHERE id = :'op_done';
SELECT 'pay_01ZZZZZZZZZZZZZZZZZZZZZZZZ' AS op_gone \gset

SELECT replace(replace(replace(u.object_key, :'op_live', '<live>'), :'op_done', '<done>'), :'op_gone', '<gone>')
         AS object_key, u.reason
  FROM payflow.s3_unretained_keys(ARRAY[
         'payments/' || :'op_live' || '/payment-result.attempt-1.json',
         'payments/' || :'op_done' || '/payment-result.attempt-1.json',
         'payments/' || :'op_done' || '/payment-result.attempt-1.json',	-- twice: once in the answer
         'payments/' || :'op_gone' || '/request.json',
         'requests/sha256-' || repeat('a', 64) || '.json',			-- op_ref's request
         'requests/sha256-' || repeat('b', 64) || '.json',			-- an orphan upload
         'payments/not-an-id/x.json',								-- no shape payflow writes
         'payments/' || :'op_gone' || '/',
         'elsewhere/x.json']) u
 ORDER BY 1;

-- an operation past the payload retention is purged by the rule, marked or not
-- (purge marks only the operations whose request is in S3)
SELECT payflow.cancel(payflow.submit('s3p-old', '{"amount": 3}')) IS NOT NULL AS cancelled;
UPDATE payflow.operations SET terminal_at = now() - interval '2 days' WHERE payment_id = 's3p-old';
SELECT u.reason FROM payflow.operations o,
	   payflow.s3_unretained_keys(ARRAY['payments/' || o.id || '/payment-result.attempt-1.json']) u
 WHERE o.payment_id = 's3p-old';

-- once the referencing operation's payloads are purged, its request goes too
UPDATE payflow.operations SET payloads_purged_at = now() WHERE id = :'op_ref';
SELECT reason FROM payflow.s3_unretained_keys(ARRAY['requests/sha256-' || repeat('a', 64) || '.json']);
SELECT count(*) AS none FROM payflow.s3_unretained_keys('{}');

-- bad input: a specific SQLSTATE
SELECT * FROM pf_try($$SELECT * FROM payflow.s3_unretained_keys(NULL)$$);
SELECT * FROM pf_try($$SELECT * FROM payflow.s3_unretained_keys(ARRAY['requests/x', NULL])$$);
SELECT * FROM pf_try($$SELECT * FROM payflow.s3_unretained_keys(array_fill('requests/x'::text, ARRAY[1001]))$$);

-- only the sweeper's role (and payflow_worker, which holds it) may call it
SELECT has_function_privilege('payflow_s3_sweeper', 'payflow.s3_unretained_keys(text[])', 'EXECUTE') AS sweeper,
       has_function_privilege('payflow_worker', 'payflow.s3_unretained_keys(text[])', 'EXECUTE') AS worker,
       has_function_privilege('payflow_app', 'payflow.s3_unretained_keys(text[])', 'EXECUTE') AS app,
       has_function_privilege('public', 'payflow.s3_unretained_keys(text[])', 'EXECUTE') AS public;
