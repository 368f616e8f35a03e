-- payflow, C-free flavour: the PL/pgSQL twin of the C flavour's
-- transition check (flavour-c/transitions.sql, extension/src/transitions.c),
-- derived from the same pipeline definition, with the same names,
-- arguments and error codes.  Without a C library there is no backend
-- cache: each check reads the version's steps (a few index probes).

-- Raises PF001 unless an operation of pipeline_version (NULL: the newest)
-- may move from -> to (replay: the moves payflow.replay() makes); returns
-- "to".  22023 for a status the version does not have.
CREATE OR REPLACE FUNCTION payflow._check_transition(from_status text, to_status text, replay boolean DEFAULT false,
													 pipeline_version integer DEFAULT NULL)
	RETURNS text
	LANGUAGE plpgsql STABLE PARALLEL SAFE
	AS $$
DECLARE
	v_version integer := coalesce(pipeline_version, (SELECT max(p.version) FROM payflow.pipelines p));
	v_initial text;
	v_terminal text;
	v_legal boolean;
BEGIN
	IF from_status IS NULL OR to_status IS NULL OR replay IS NULL THEN
		RETURN NULL;
	END IF;
	SELECT f.ready_status, l.done_status INTO v_initial, v_terminal
	  FROM payflow.step_definitions f, payflow.step_definitions l
	 WHERE f.pipeline_version = v_version AND f.position = 1
	   AND l.pipeline_version = v_version
	   AND l.position = (SELECT max(m.position) FROM payflow.step_definitions m WHERE m.pipeline_version = v_version);
	IF NOT FOUND THEN
		RAISE EXCEPTION 'pipeline version % does not exist', v_version USING ERRCODE = 'invalid_parameter_value';
	END IF;
	IF NOT payflow._has_status(v_version, from_status) THEN
		RAISE EXCEPTION 'unknown operation status "%"', from_status
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = format('Pipeline version %s has no such status.', v_version);
	ELSIF NOT payflow._has_status(v_version, to_status) THEN
		RAISE EXCEPTION 'unknown operation status "%"', to_status
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = format('Pipeline version %s has no such status.', v_version);
	END IF;
	IF replay THEN
		v_legal := from_status = 'FAILED' AND EXISTS (
			SELECT FROM payflow.step_definitions d WHERE d.pipeline_version = v_version AND d.ready_status = to_status);
	ELSIF from_status IN (v_terminal, 'FAILED', 'CANCELLED') THEN
		v_legal := false;
	ELSE
		v_legal := to_status = 'FAILED'
			OR (to_status = 'CANCELLED' AND from_status = v_initial)
			OR EXISTS (SELECT FROM payflow.step_definitions d
						WHERE d.pipeline_version = v_version
						  AND ((d.ready_status = from_status AND d.running_status = to_status
								AND d.running_status <> d.ready_status)
							   OR (d.running_status = from_status AND d.done_status = to_status)));
	END IF;
	IF v_legal THEN
		RETURN to_status;
	END IF;
	IF from_status IN (v_terminal, 'FAILED', 'CANCELLED') THEN
		RAISE EXCEPTION 'illegal status transition from % to %', from_status, to_status
			USING ERRCODE = 'PF001', DETAIL = format('%s is a terminal status.', from_status);
	END IF;
	RAISE EXCEPTION 'illegal status transition from % to %', from_status, to_status USING ERRCODE = 'PF001';
END
$$;

-- Whether a version has a status (FAILED and CANCELLED belong to all).
CREATE OR REPLACE FUNCTION payflow._has_status(p_version integer, p_status text) RETURNS boolean
	LANGUAGE sql STABLE PARALLEL SAFE
	AS $$
	SELECT p_status IN ('FAILED', 'CANCELLED')
		   OR EXISTS (SELECT FROM payflow.step_definitions d
					   WHERE d.pipeline_version = p_version
						 AND p_status IN (d.ready_status, d.running_status, d.done_status))
$$;

-- 22023 for a status no version has.
CREATE OR REPLACE FUNCTION payflow._unknown_status(status text) RETURNS boolean
	LANGUAGE plpgsql IMMUTABLE
	AS $$
BEGIN
	RAISE EXCEPTION 'unknown operation status "%"', status USING ERRCODE = 'invalid_parameter_value';
END
$$;

-- The last step's done status (COMPLETED), FAILED and CANCELLED; 22023
-- for a status no version has.  add_step and remove_step keep the last
-- done status, so the answer does not depend on the version.
CREATE OR REPLACE FUNCTION payflow._is_terminal(status text) RETURNS boolean
	LANGUAGE sql STABLE STRICT PARALLEL SAFE
	AS $$
	SELECT CASE
		WHEN status IN ('FAILED', 'CANCELLED') THEN true
		WHEN EXISTS (SELECT FROM payflow.step_definitions d
					  WHERE d.done_status = status
						AND NOT EXISTS (SELECT FROM payflow.step_definitions n
										 WHERE n.pipeline_version = d.pipeline_version
										   AND n.position = d.position + 1)) THEN true
		WHEN EXISTS (SELECT FROM payflow.step_definitions d
					  WHERE status IN (d.ready_status, d.running_status, d.done_status)) THEN false
		ELSE payflow._unknown_status(status)
	END
$$;

-- Lets the next status change of this operation be a replay move.  Only
-- payflow.replay() calls it; the setting is transaction-local and, set
-- inside replay (a function with a SET clause), undone when replay returns.
CREATE OR REPLACE FUNCTION payflow._allow_replay(operation_id text) RETURNS void
	LANGUAGE sql VOLATILE STRICT
	AS $$ SELECT set_config('payflow.replay_operation', operation_id, true) $$;

-- The trigger of payflow.operations behind every status change: it follows
-- the graph of the operation's version (replay moves only after
-- _allow_replay); the version never changes.
CREATE OR REPLACE FUNCTION payflow._guard_transition() RETURNS trigger
	LANGUAGE plpgsql
	AS $$
BEGIN
	IF NEW.pipeline_version IS NULL THEN
		RAISE EXCEPTION 'an operation needs a pipeline version' USING ERRCODE = 'not_null_violation';
	END IF;
	IF NEW.pipeline_version <> OLD.pipeline_version THEN
		RAISE EXCEPTION 'an operation''s pipeline version never changes'
			USING ERRCODE = 'PF001',
				  DETAIL = format('It started on version %s and finishes on it.', OLD.pipeline_version);
	END IF;
	IF NEW.status IS NOT DISTINCT FROM OLD.status THEN
		RETURN NEW;
	END IF;
	IF OLD.status = 'FAILED' THEN
		IF EXISTS (SELECT FROM payflow.step_definitions d
					WHERE d.pipeline_version = NEW.pipeline_version AND d.ready_status = NEW.status) THEN
			IF current_setting('payflow.replay_operation', true) IS DISTINCT FROM NEW.id THEN
				RAISE EXCEPTION 'illegal status transition from % to %', OLD.status, NEW.status
					USING ERRCODE = 'PF001', DETAIL = 'Only payflow.replay() re-enters a step from FAILED.';
			END IF;
			PERFORM set_config('payflow.replay_operation', '', true);	-- one move per permission
			RETURN NEW;
		END IF;
	END IF;
	-- A step's own moves (every claim and completion) in one probe; the
	-- rest (FAILED, CANCELLED, errors) through the full check.
	IF EXISTS (SELECT FROM payflow.step_definitions d
				WHERE d.pipeline_version = NEW.pipeline_version
				  AND ((d.ready_status = OLD.status AND d.running_status = NEW.status
						AND d.running_status <> d.ready_status)
					   OR (d.running_status = OLD.status AND d.done_status = NEW.status))) THEN
		RETURN NEW;
	END IF;
	PERFORM payflow._check_transition(OLD.status, NEW.status, false, NEW.pipeline_version);
	RETURN NEW;
END
$$;

REVOKE ALL ON FUNCTION
	payflow._check_transition(text, text, boolean, integer),
	payflow._has_status(integer, text),
	payflow._unknown_status(text),
	payflow._is_terminal(text),
	payflow._allow_replay(text),
	payflow._guard_transition()
	FROM PUBLIC;
