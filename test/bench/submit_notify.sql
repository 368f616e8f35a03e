BEGIN;
SELECT payflow.submit(gen_random_uuid()::text, '{"amount": 1250, "currency": "EUR", "customer": "C-1", "reference": "invoice 2026-0001"}');
NOTIFY payflow_bench;
COMMIT;
