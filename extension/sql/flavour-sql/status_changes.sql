-- payflow, C-free flavour: how a status change is noticed.  Put where
-- payflow.sql and the update scripts say "--@@ flavour include
-- status_changes.sql @@" (extension/sql/assemble.sh).
--
-- Every status change calls _status_changed(); run_scheduler's
-- _wake_listeners (wake_listeners.sql) sends NOTIFY payflow_status when the
-- count moved since its last pass.  A sequence: most changes write no
-- history row since 0.5.0 (history.sql), whose id sequence 0.4 read, and
-- nextval writes WAL once every 32 calls; a rolled-back change costs one
-- extra NOTIFY.
CREATE SEQUENCE IF NOT EXISTS payflow._status_changes;

CREATE OR REPLACE FUNCTION payflow._status_changed() RETURNS void
	LANGUAGE plpgsql VOLATILE
	AS $$ BEGIN PERFORM nextval('payflow._status_changes'); END $$;
REVOKE ALL ON FUNCTION payflow._status_changed() FROM PUBLIC;
REVOKE ALL ON SEQUENCE payflow._status_changes FROM PUBLIC;
