-- payflow: the trigger that records each step attempt that ended without
-- success in payflow.step_attempts (the table: admin.sql).
--
-- The open step is part of the operations row (0.5.0), so an attempt ends
-- in an update of that row: its step stays the same (a completion moves
-- current_step on, or ends the operation with step_status SUCCEEDED, and
-- the success is the step_results row) and the step leaves RUNNING or a
-- new attempt starts over it (a takeover); or a step not running fails (a
-- dead-lettered request).  The trigger's WHEN clause tells such an update
-- (the flavour's attempt_ended.sql), false on the common path: no call of
-- this function, and no row of its.

CREATE OR REPLACE FUNCTION payflow._record_step_attempt() RETURNS trigger
	LANGUAGE plpgsql
	AS $$
BEGIN
	IF OLD.step_status = 'RUNNING' THEN
		-- with the history number of its claim, if that claim moved the
		-- status: the change is told by this row from now on (history.sql)
		INSERT INTO payflow.step_attempts (operation_id, step_name, attempt, worker, started_at, outcome, error,
										   claim_no)
		VALUES (NEW.id, NEW.current_step, OLD.step_attempt, OLD.step_lease_owner, OLD.step_claimed_at,
				-- still RUNNING with a new attempt: another worker took the step over
				CASE WHEN NEW.step_status = 'RUNNING' THEN 'lease_expired' ELSE NEW.step_status END,
				CASE WHEN NEW.step_status IN ('RETRY_WAIT', 'FAILED') THEN NEW.step_last_error END,
				OLD.step_claim_no);
	ELSE
		-- finished without a RUNNING row of its own (claim and outcome in one statement)
		INSERT INTO payflow.step_attempts (operation_id, step_name, attempt, worker, started_at, outcome, error)
		VALUES (NEW.id, NEW.current_step, NEW.step_attempt, NEW.step_lease_owner, NEW.step_claimed_at,
				NEW.step_status, CASE WHEN NEW.step_status = 'FAILED' THEN NEW.step_last_error END);
	END IF;
	RETURN NULL;
END
$$;

--@@ flavour include attempt_ended.sql @@

REVOKE ALL ON FUNCTION payflow._record_step_attempt() FROM PUBLIC;
