-- payflow, C flavour: the transition check, derived from the pipeline
-- definition (extension/src/transitions.c, which caches a version's graph
-- per backend).  payflow.sql and the update that brings the definition
-- include this file where the tables exist; the C-free flavour includes
-- its PL/pgSQL twin (flavour-sql/transitions.sql).

-- Raises PF001 unless an operation of pipeline_version (NULL: the newest)
-- may move from -> to (replay: the moves payflow.replay() makes); returns
-- "to".  22023 for a status the version does not have.
CREATE OR REPLACE FUNCTION payflow._check_transition(from_status text, to_status text, replay boolean DEFAULT false,
													 pipeline_version integer DEFAULT NULL)
	RETURNS text
	AS 'MODULE_PATHNAME', 'payflow_pipeline_check_transition' LANGUAGE C STABLE PARALLEL SAFE;

-- The last step's done status (COMPLETED), FAILED and CANCELLED; 22023
-- for a status no version has.
CREATE OR REPLACE FUNCTION payflow._is_terminal(status text) RETURNS boolean
	AS 'MODULE_PATHNAME', 'payflow_pipeline_is_terminal' LANGUAGE C STABLE STRICT PARALLEL SAFE;

-- Lets the next status change of this operation in this transaction be a
-- replay move; only payflow.replay() calls it.
CREATE OR REPLACE FUNCTION payflow._allow_replay(operation_id text) RETURNS void
	AS 'MODULE_PATHNAME', 'payflow_allow_replay' LANGUAGE C VOLATILE STRICT PARALLEL RESTRICTED;

-- The trigger of payflow.operations behind every status change.
CREATE OR REPLACE FUNCTION payflow._guard_transition() RETURNS trigger
	AS 'MODULE_PATHNAME', 'payflow_guard_transition' LANGUAGE C;

REVOKE ALL ON FUNCTION
	payflow._check_transition(text, text, boolean, integer),
	payflow._is_terminal(text),
	payflow._allow_replay(text),
	payflow._guard_transition()
	FROM PUBLIC;
