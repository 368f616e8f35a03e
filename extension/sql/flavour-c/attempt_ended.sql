-- payflow, C flavour: the trigger that records a step attempt ended without
-- success (step_attempts.sql), and its WHEN clause as one C function
-- (attempt_ended.c): PostgreSQL builds a trigger's WHEN clause again in
-- every statement that updates the table, and the clause written out in
-- SQL cost each claim, heartbeat and completion some 10 us.  The C-free
-- flavour writes the same clause out (flavour-sql/attempt_ended.sql).

-- Whether an update of an operation's row ended its open step's attempt
-- without success: the step stays, and it leaves RUNNING or a new attempt
-- starts over it (a takeover), or a step not running fails.
CREATE OR REPLACE FUNCTION payflow._attempt_ended(old_step text, new_step text, old_status text, new_status text,
												  old_attempt integer, new_attempt integer)
	RETURNS boolean
	AS 'MODULE_PATHNAME', 'payflow_attempt_ended' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
REVOKE ALL ON FUNCTION payflow._attempt_ended(text, text, text, text, integer, integer) FROM PUBLIC;

CREATE OR REPLACE TRIGGER operations_attempt_ended AFTER UPDATE ON payflow.operations
	FOR EACH ROW
	WHEN (payflow._attempt_ended(OLD.current_step, NEW.current_step, OLD.step_status, NEW.step_status,
								 OLD.step_attempt, NEW.step_attempt))
	EXECUTE FUNCTION payflow._record_step_attempt();
