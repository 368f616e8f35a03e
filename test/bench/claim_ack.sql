SELECT quote_literal(coalesce(array_agg(event_id), '{}')::text) AS ids FROM payflow.outbox_claim(100, 'bench-relay-' || :client_id) \gset
SELECT payflow.outbox_ack(:ids::uuid[], NULL, 'bench-relay-' || :client_id);
