-- The transition table is enforced in C: every (from, to) pair.
WITH s(name) AS (VALUES ('PENDING'), ('PAYMENT_PROCESSING'), ('PAYMENT_COMPLETED'),
                        ('POST_PROCESSING'), ('INVOICE_PENDING'), ('COMPLETED'),
                        ('FAILED'), ('CANCELLED'))
SELECT f.name AS from_status, string_agg(t.name, ', ' ORDER BY t.name) AS allowed
  FROM s f CROSS JOIN s t
 WHERE (SELECT sqlstate FROM pf_try(format('SELECT payflow._check_transition(%L, %L)', f.name, t.name))) = '00000'
 GROUP BY f.name ORDER BY f.name;

-- replay may leave FAILED for the status a failed step starts from, only
WITH s(name) AS (VALUES ('PENDING'), ('PAYMENT_PROCESSING'), ('PAYMENT_COMPLETED'),
                        ('POST_PROCESSING'), ('INVOICE_PENDING'), ('COMPLETED'),
                        ('FAILED'), ('CANCELLED'))
SELECT f.name AS from_status, string_agg(t.name, ', ' ORDER BY t.name) AS replay_allowed
  FROM s f CROSS JOIN s t
 WHERE (SELECT sqlstate FROM pf_try(format('SELECT payflow._check_transition(%L, %L, true)', f.name, t.name))) = '00000'
 GROUP BY f.name ORDER BY f.name;

SELECT * FROM pf_try($$SELECT payflow._check_transition('COMPLETED', 'PENDING')$$);
SELECT * FROM pf_try($$SELECT payflow._check_transition('PENDING', 'COMPLETED')$$);
SELECT * FROM pf_try($$SELECT payflow._check_transition('PENDING', 'BOGUS')$$);

SELECT s, payflow._is_terminal(s) FROM unnest(ARRAY['PENDING', 'INVOICE_PENDING', 'COMPLETED', 'FAILED', 'CANCELLED']) s;

-- the pipeline definition agrees with the transition table
SELECT step_name,
       (ready_status = running_status
        OR payflow._check_transition(ready_status, running_status) = running_status) AS claim_ok,
       payflow._check_transition(running_status, done_status) = done_status AS done_ok,
       payflow._check_transition('FAILED', ready_status, true) = ready_status AS replay_ok
  FROM payflow.step_definitions ORDER BY position;

-- an illegal move cannot be written even by a buggy caller
SELECT payflow.submit('sm-1', '{}') AS op \gset
SELECT * FROM pf_try(format($$UPDATE payflow.operations SET status = 'COMPLETED' WHERE id = %L$$, :'op'));
SELECT status FROM payflow.operations WHERE id = :'op';
