-- payflow, C-free flavour: the trigger that records a step attempt ended
-- without success (step_attempts.sql).  Its WHEN clause, written out: the
-- C flavour has it as one C function (flavour-c/attempt_ended.sql), and
-- the two say the same.  A PL/pgSQL twin would be called for every row
-- updated, where the clause costs once a statement.
CREATE OR REPLACE TRIGGER operations_attempt_ended AFTER UPDATE ON payflow.operations
	FOR EACH ROW
	WHEN (NEW.current_step = OLD.current_step AND NEW.step_status <> 'SUCCEEDED'
		  AND ((OLD.step_status = 'RUNNING' AND (NEW.step_status <> 'RUNNING' OR NEW.step_attempt <> OLD.step_attempt))
			   OR (OLD.step_status <> 'RUNNING' AND OLD.step_status <> NEW.step_status AND NEW.step_status = 'FAILED'
				   AND NEW.step_attempt > 0)))
	EXECUTE FUNCTION payflow._record_step_attempt();
