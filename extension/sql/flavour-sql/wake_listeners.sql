-- payflow, C-free flavour: what a scheduler pass does last.  Put where
-- payflow.sql and the update scripts say "--@@ flavour include
-- wake_listeners.sql @@" (extension/sql/assemble.sh).
--
-- After a scheduler pass (pg_cron, every second): NOTIFY payflow_outbox
-- while events wait for a relay, NOTIFY payflow_status when a status
-- changed since the last pass.  Relays and event streams also poll, so
-- a lost wake-up only costs latency.
-- The outbox probe walks outbox_seq_idx from where the live rows begin
-- (payflow._outbox_cursor), as the relay's claim does: a sequential scan
-- read every page of the heap once a second, and while a snapshot is held
-- open those are all the rows acked since.
CREATE OR REPLACE FUNCTION payflow._wake_listeners() RETURNS void
	LANGUAGE plpgsql VOLATILE
	SET enable_seqscan = off
	-- a disabled node costs 1e10, which would JIT-compile every call (200 ms)
	SET jit = off
	SET enable_bitmapscan = off
	AS $$
DECLARE
	v_last bigint;
BEGIN
	IF EXISTS (SELECT FROM payflow.outbox
				WHERE seq > 0	-- outbox_seq_idx's predicate (see outbox_claim)
				  AND seq >= coalesce((SELECT k.low_seq FROM payflow._outbox_cursor k), 0)
				  AND available_at <= now() AND (claim_expires_at IS NULL OR claim_expires_at < now())) THEN
		NOTIFY payflow_outbox;
	END IF;
	SELECT last_value INTO v_last FROM payflow._status_changes;	-- (status_changes.sql)
	UPDATE payflow._wakeup_marks SET history_last_value = v_last WHERE history_last_value <> v_last;
	IF FOUND THEN
		NOTIFY payflow_status;
	END IF;
END
$$;
