SELECT pgmq.send('bench', '{"amount": 1250, "currency": "EUR", "customer": "C-1", "reference": "invoice 2026-0001"}');
