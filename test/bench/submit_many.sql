-- 100 operations in one statement and one commit (payflow.submit_many);
-- the same details as submit.sql's, so the ratio is the batching alone.
SELECT count(*) FROM payflow.submit_many((
	SELECT jsonb_agg(jsonb_build_object('payment_id', gen_random_uuid()::text,
										'details', '{"amount": 1250, "currency": "EUR", "customer": "C-1", "reference": "invoice 2026-0001"}'::jsonb))
	  FROM generate_series(1, 100)));
