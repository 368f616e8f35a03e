-- test/soak/invariants.sql — the checks of a soak run, over schema soak
-- (ledger.sql, filled by the triggers and collect.bash) and what purge
-- left in schema payflow.  One row per check: name, violations, and up to
-- 20 of the operation ids (or markers) concerned.  A check whose count is
-- not 0 breaks an invariant; the runner fails.

-- The outcome of every submitted operation, from the ledger (purge may have
-- deleted the operation itself).
CREATE TABLE soak.final AS
SELECT s.n, s.payment_id, s.operation_id, s.submitted_at,
	   t.to_status AS status, t.reason, t.at AS terminal_at,
	   (SELECT count(*) FROM soak.transitions x
		 WHERE x.operation_id = s.operation_id AND x.to_status IN ('COMPLETED', 'FAILED', 'CANCELLED')) AS terminal_count,
	   EXISTS (SELECT FROM soak.transitions x
			   WHERE x.operation_id = s.operation_id AND x.to_status = 'PAYMENT_COMPLETED') AS paid
  FROM soak.submitted s
  LEFT JOIN LATERAL (
	SELECT x.to_status, x.reason, x.at FROM soak.transitions x
	 WHERE x.operation_id = s.operation_id AND x.to_status IN ('COMPLETED', 'FAILED', 'CANCELLED')
	 ORDER BY x.at DESC LIMIT 1) t ON true;
CREATE UNIQUE INDEX ON soak.final (operation_id);

CREATE TEMP VIEW checks AS
SELECT 'lost: submitted, never terminal' AS name, array_agg(operation_id ORDER BY n) AS ids
  FROM soak.final WHERE status IS NULL
UNION ALL
SELECT 'terminal more than once', array_agg(operation_id ORDER BY n)
  FROM soak.final WHERE terminal_count > 1
UNION ALL
SELECT 'FAILED without a reason and a step dead letter', array_agg(operation_id ORDER BY n)
  FROM soak.final f
 WHERE status = 'FAILED'
   AND (reason IS NULL OR NOT EXISTS (SELECT FROM soak.dead_letters d
									   WHERE d.source = 'step' AND d.operation_id = f.operation_id
										 AND d.error ->> 'code' IS NOT NULL))
UNION ALL
SELECT 'COMPLETED without exactly one legacy charge', array_agg(operation_id ORDER BY n)
  FROM soak.final f
 WHERE status = 'COMPLETED'
   AND (SELECT count(*) FROM soak.charges c WHERE c.idempotency_key = f.operation_id || ':process_payment') <> 1
UNION ALL
SELECT 'legacy charge without a payment step done', array_agg(coalesce(f.operation_id, c.payment_id))
  FROM soak.charges c LEFT JOIN soak.final f ON f.payment_id = c.payment_id
 WHERE f.operation_id IS NULL OR NOT f.paid
	OR c.idempotency_key <> f.operation_id || ':process_payment'
UNION ALL
SELECT 'duplicate legacy charges (key or payment charged twice)', array_agg(v)
  FROM (SELECT idempotency_key AS v FROM soak.charges GROUP BY 1 HAVING count(*) > 1
		UNION ALL
		SELECT payment_id FROM soak.charges GROUP BY 1 HAVING count(*) > 1) d
UNION ALL
SELECT 'COMPLETED without exactly one invoice', array_agg(operation_id ORDER BY n)
  FROM soak.final f
 WHERE status = 'COMPLETED'
   AND (SELECT count(*) FROM soak.invoices i WHERE i.operation_id = f.operation_id) <> 1
UNION ALL
SELECT 'invoice of an operation not COMPLETED', array_agg(i.operation_id)
  FROM soak.invoices i LEFT JOIN soak.final f USING (operation_id)
 WHERE f.status IS DISTINCT FROM 'COMPLETED'
UNION ALL
SELECT 'duplicate invoices (operation or key invoiced twice)', array_agg(v)
  FROM (SELECT operation_id AS v FROM soak.invoices GROUP BY 1 HAVING count(*) > 1
		UNION ALL
		SELECT idempotency_key FROM soak.invoices GROUP BY 1 HAVING count(*) > 1) d
UNION ALL
SELECT 'invoice not keyed <operation>:create_invoice', array_agg(operation_id)
  FROM soak.invoices WHERE idempotency_key IS DISTINCT FROM operation_id || ':create_invoice'
UNION ALL
-- (purge deletes payloads row by row in the default partition; a day's
-- partition goes whole once retention_payloads passed the day's end,
-- extension/sql/partitions.sql, and its rows show nowhere meanwhile)
SELECT 'payload left behind by purge (completed or cancelled operation)', array_agg(DISTINCT payflow._payload_operation(p.key))
  FROM payflow.payloads_default p JOIN payflow.operations o ON o.id = payflow._payload_operation(p.key)
 WHERE o.status IN ('COMPLETED', 'CANCELLED')
   AND o.terminal_at < now() - current_setting('payflow.retention_payloads')::interval
UNION ALL
SELECT 'payload past its retention still readable', array_agg(DISTINCT payflow._payload_operation(p.key))
  FROM payflow.payloads p JOIN payflow.operations o ON o.id = payflow._payload_operation(p.key)
 WHERE o.status IN ('COMPLETED', 'CANCELLED')
   AND o.terminal_at < now() - current_setting('payflow.retention_payloads')::interval
   AND EXISTS (SELECT FROM payflow.operations k
				WHERE k.id = o.id AND NOT payflow._payloads_past_retention(k.status, k.terminal_at))
UNION ALL
SELECT 'payload of no operation (orphan)', array_agg(DISTINCT payflow._payload_operation(p.key))
  FROM payflow.payloads_default p WHERE NOT EXISTS (SELECT FROM payflow.operations o WHERE o.id = payflow._payload_operation(p.key))
UNION ALL
SELECT 'day partition of payloads purge should have dropped', array_agg(d.name)
  FROM payflow._day_partitions() d
 WHERE d.parent = 'payloads'
   AND (d.day + 1)::timestamp AT TIME ZONE 'UTC' < now() - current_setting('payflow.retention_payloads')::interval
					- interval '1 day'
UNION ALL
SELECT 'event left in the outbox', array_agg(operation_id) FROM payflow.outbox
UNION ALL
SELECT 'DLQ message not accounted for (neither a poison message sent nor a copy of a settled operation''s event)',
	   array_agg(left(q.body, 120))
  FROM soak.dlq q
 WHERE NOT EXISTS (SELECT FROM soak.poison p WHERE position(p.marker IN q.body) > 0)
   AND NOT EXISTS (SELECT FROM soak.final f WHERE f.status IS NOT NULL
											  AND position(f.operation_id IN q.body) > 0)
UNION ALL
SELECT 'poison message neither dead-lettered nor in a DLQ (nor lost in an emulator restart)', array_agg(p.marker)
  FROM soak.poison p
 WHERE NOT EXISTS (SELECT FROM soak.dead_letters d WHERE position(p.marker IN d.message_body) > 0)
   AND NOT EXISTS (SELECT FROM soak.dlq q WHERE position(p.marker IN q.body) > 0)
   AND NOT EXISTS (SELECT FROM soak.faults e WHERE e.kind = 'emulator-restart' AND e.started_at > p.sent_at)
UNION ALL
SELECT 'message dead letter not accounted for (neither poison nor about a submitted operation)', array_agg(d.id::text)
  FROM soak.dead_letters d
 WHERE d.source = 'message'
   AND NOT EXISTS (SELECT FROM soak.poison p WHERE position(p.marker IN d.message_body) > 0)
   AND NOT EXISTS (SELECT FROM soak.submitted s WHERE s.operation_id = d.operation_id);

SELECT name, coalesce(cardinality(ids), 0) AS violations,
	   coalesce(array_to_string(ids[1:20], ' '), '') AS concerned
  FROM checks;
