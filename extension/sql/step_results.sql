-- payflow: the steps that are done, and payflow.steps (0.5.0, storage v2).
--
-- An operation's open step lives in its operations row (tables.sql).  A
-- step that succeeded leaves one row here, written once by its completion
-- and never updated; purge deletes it with its operation.  payflow.steps
-- shows both with 0.4's columns, for people and tools that read them; the
-- step functions are the only writers.

-- A step that succeeded: who ran it (the attempt that succeeded), when, and
-- what it handed on.  Facts stored elsewhere are not repeated: the input is
-- the result reference of the step before (the request's for the first), the
-- result is the step's result payload, or the operation's result for the
-- last step (result is stored here only for a step that has neither), and
-- the last error is that of its last failed attempt (step_attempts).
CREATE TABLE payflow.step_results (
	operation_id text COLLATE "C" NOT NULL,
	step_name text COLLATE "C" NOT NULL,
	created_at timestamptz NOT NULL,		-- when the step was ready
	claimed_at timestamptz,
	finished_at timestamptz NOT NULL DEFAULT now(),
	attempt integer NOT NULL,
	lease_owner text,
	external_ref text,
	-- What it handed on: the reference of its result payload.  A fast
	-- completion's (pg store, the key its step's result name gives) is
	-- kept as its keyed checksum and size alone, and _result_ref renders
	-- it (a 206-byte document an operation's two results each kept); any
	-- other (a worker's S3 object, a full completion's) whole in result_ref.
	result_ref jsonb,
	result_mac bytea,
	result_size integer,
	completed_event_id uuid,		-- the event its completion wrote: a repeated complete_step's answer
	result jsonb,					-- only when no payload and no operation result holds it
	-- its history numbers (history.sql): the claim's, if the attempt that
	-- succeeded made it, and the completion's; NULL for a step done before
	-- 0.5.0, whose history rows are stored
	claim_no smallint,
	done_no smallint
) PARTITION BY RANGE (operation_id);	-- a partition a day (partitions.sql; its key: tables.sql's history_events)
CREATE TABLE payflow.step_results_default PARTITION OF payflow.step_results DEFAULT;
ALTER TABLE payflow.step_results_default ADD PRIMARY KEY (operation_id, step_name);

-- A done step's result reference (above): the one kept, else the one its
-- checksum and size render, else NULL (a step without a result payload).
-- SQL without a table: inlined into the statements that call it.
CREATE OR REPLACE FUNCTION payflow._result_ref(p_operation_id text, p_result_name text, p_ref jsonb, p_mac bytea,
											   p_size integer)
	RETURNS jsonb
	LANGUAGE sql STABLE
	AS $$
	SELECT coalesce(p_ref, CASE WHEN p_mac IS NOT NULL THEN
		jsonb_build_object('store', 'pg', 'key', payflow._payload_key(p_operation_id, p_result_name),
						   'checksum', 'hmac-sha256:' || encode(p_mac, 'hex'), 'size', p_size) END)
$$;

-- An operation's request reference (tables.sql): the one kept (submit_ref's,
-- or one made before request_mac was), else the one its checksum and
-- size render, as a fast completion's result reference (_result_ref).
CREATE OR REPLACE FUNCTION payflow._request_ref(p_operation_id text, p_ref jsonb, p_mac bytea, p_size integer)
	RETURNS jsonb
	LANGUAGE sql STABLE
	AS $$ SELECT payflow._result_ref(p_operation_id, 'request.json', p_ref, p_mac, p_size) $$;

-- The input of an operation's step: the result reference of its last step
-- done that has one (a step without a result payload hands its own input
-- on), else the request's (given as its three columns: _request_ref).
-- p_before, when not NULL, is the position of the step whose input it is:
-- only the steps before it count (an event's renderer, outbox.sql); NULL
-- is the open step's.  PL/pgSQL, whose plan is kept: a SQL function with a
-- sub-select is never inlined, and each call planned it again (128 us).
-- The step engine's batch statements read it by a join of their own.
CREATE OR REPLACE FUNCTION payflow._step_input(p_operation_id text, p_version integer, p_request_ref jsonb,
											   p_request_mac bytea, p_request_size integer,
											   p_before integer DEFAULT NULL)
	RETURNS jsonb
	LANGUAGE plpgsql STABLE
	SET plan_cache_mode = force_generic_plan	-- as _step_bound
	AS $$
BEGIN
	RETURN coalesce((SELECT payflow._result_ref(r.operation_id, d.result_name, r.result_ref, r.result_mac, r.result_size)
					   FROM payflow.step_results r
					   JOIN payflow.step_definitions d ON d.pipeline_version = p_version AND d.step_name = r.step_name
					  WHERE r.operation_id = p_operation_id AND (r.result_ref IS NOT NULL OR r.result_mac IS NOT NULL)
						AND (p_before IS NULL OR d.position < p_before)
					  ORDER BY d.position DESC LIMIT 1),
					payflow._request_ref(p_operation_id, p_request_ref, p_request_mac, p_request_size));
END
$$;

-- 0.4's steps table, column for column: the done steps, then the open step
-- of each operation that has one (a FAILED or CANCELLED operation keeps
-- the step it ended on, finished when the operation ended).
CREATE VIEW payflow.steps AS
	SELECT r.operation_id, r.step_name, r.created_at,
		   coalesce((SELECT payflow._result_ref(b.operation_id, bd.result_name, b.result_ref, b.result_mac, b.result_size)
					   FROM payflow.step_results b
					   JOIN payflow.step_definitions bd ON bd.pipeline_version = o.pipeline_version
													   AND bd.step_name = b.step_name
					  WHERE b.operation_id = r.operation_id AND (b.result_ref IS NOT NULL OR b.result_mac IS NOT NULL)
						AND bd.position < d.position
					  ORDER BY bd.position DESC LIMIT 1),
					payflow._request_ref(o.id, o.request_ref, o.request_mac, o.request_size)) AS input_ref,
		   r.external_ref, r.attempt, r.lease_owner, r.claimed_at,
		   'SUCCEEDED'::text AS status,
		   NULL::timestamptz AS lease_expires_at, NULL::timestamptz AS pending_since,
		   NULL::timestamptz AS next_attempt_at,
		   coalesce(r.result,
					CASE WHEN o.current_step = r.step_name AND o.step_status = 'SUCCEEDED' THEN o.result END,
					(SELECT convert_from(p.content, 'UTF8')::jsonb
					   FROM payflow.payloads p
					  -- (the step's own key: rendered from its operation, or
					  -- a worker's reference checked by _require_own_ref)
					  WHERE rr.ref ->> 'store' = 'pg' AND p.key = rr.ref ->> 'key')) AS result,
		   rr.ref AS result_ref, r.completed_event_id,
		   -- the error of its last failed attempt, as 0.4 kept it with the step
		   (SELECT a.error FROM payflow.step_attempts a
			 WHERE a.operation_id = r.operation_id AND a.step_name = r.step_name AND a.error IS NOT NULL
			 ORDER BY a.id DESC LIMIT 1) AS last_error,
		   r.finished_at
	  FROM payflow.step_results r
	  JOIN payflow.operations o ON o.id = r.operation_id
	  LEFT JOIN payflow.step_definitions d ON d.pipeline_version = o.pipeline_version AND d.step_name = r.step_name
	  CROSS JOIN LATERAL (SELECT payflow._result_ref(r.operation_id, d.result_name, r.result_ref, r.result_mac,
													 r.result_size) AS ref) rr
	UNION ALL
	SELECT o.id, o.current_step, o.step_created_at,
		   payflow._step_input(o.id, o.pipeline_version, o.request_ref, o.request_mac, o.request_size),
		   o.step_external_ref, o.step_attempt, o.step_lease_owner, o.step_claimed_at, o.step_status,
		   o.step_lease_expires_at, o.step_pending_since, o.step_next_attempt_at,
		   NULL::jsonb, NULL::jsonb, NULL::uuid, o.step_last_error,
		   CASE WHEN o.step_status IN ('FAILED', 'CANCELLED') THEN o.terminal_at END
	  FROM payflow.operations o
	 WHERE o.step_status <> 'SUCCEEDED';
-- A view calls functions as its reader, whatever its owner may: the admin,
-- who reads this one, may call the pure renderers it computes with.
GRANT EXECUTE ON FUNCTION payflow._payload_key(text, text),
	payflow._result_ref(text, text, jsonb, bytea, integer),
	payflow._request_ref(text, jsonb, bytea, integer),
	payflow._step_input(text, integer, jsonb, bytea, integer, integer)
	TO payflow_admin;
