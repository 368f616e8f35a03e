-- payflow: the history of each operation (0.5.0, storage v2, phase 3).
--
-- history() and changes() show every status change: who, when, from, to,
-- why, with ids strictly increasing per operation.  The changes of the
-- common path are not written as rows of their own; they are rendered from
-- facts stored anyway:
--   submitted       the operation's row (created_at, submitted_by);
--   claimed         the attempt whose claim moved the status: the open
--                   step in the operation's row while it runs, then its
--                   step_attempts row (it ended without success) or its
--                   step_results row (it succeeded);
--   "<step> done"   the step's step_results row.
-- Failures, cancels, replays and admin actions are rare and say more (a
-- reason, an admin's name): they are rows of payflow.history_events, as is
-- every change made before 0.5.0.  In 0.4 the seven rows of a three-step
-- operation cost 1,800 bytes of WAL; each rendered one costs a smallint in
-- a row written anyway.
--
-- Ids: the operation's row counts its changes (history_no); change number
-- n has id _history_id(n) = 10^15 + n, above every id 0.4 drew from its
-- sequence, so an event stream resumed across the update (Last-Event-ID)
-- loses nothing and sees nothing twice.  The row lock that serialises an
-- operation's changes serialises the count.

-- The id of an operation's change number p_no.
CREATE OR REPLACE FUNCTION payflow._history_id(p_no integer) RETURNS bigint
	LANGUAGE sql IMMUTABLE PARALLEL SAFE
	AS $$ SELECT 1000000000000000::bigint + p_no $$;

-- Records a change that is not rendered (see above) as number p_no of its
-- operation (the caller's update of the row set history_no to it), and
-- wakes the listeners.  The caller holds the operation's row lock.
CREATE OR REPLACE FUNCTION payflow._status_recorded(p_operation_id text, p_no integer, p_from text, p_to text,
													p_reason text, p_actor text)
	RETURNS void
	LANGUAGE plpgsql
	AS $$
BEGIN
	INSERT INTO payflow.history_events (operation_id, id, from_status, to_status, reason, actor)
	VALUES (p_operation_id, payflow._history_id(p_no), p_from, p_to, left(p_reason, 500), p_actor);
	PERFORM payflow._status_changed();
END
$$;

-- Every change of every operation, with 0.4's columns.  Read it by
-- operation id: each part is then an index probe (history(), changes(),
-- the console).  The ids are _history_id's, spelt out: a view calls
-- functions as its reader, and operation_history's reader is the app,
-- which may call no internal function but _current_tenant.
CREATE OR REPLACE VIEW payflow._operation_history AS
	SELECT h.operation_id, h.id, h.from_status, h.to_status, h.reason, h.actor, h.at
	  FROM payflow.history_events h
	UNION ALL
	SELECT o.id, 1000000000000001::bigint, NULL, f.ready_status, 'submitted', o.submitted_by, o.created_at
	  FROM payflow.operations o
	  JOIN payflow.step_definitions f ON f.pipeline_version = o.pipeline_version AND f.position = 1
	 WHERE o.submitted_by IS NOT NULL
	UNION ALL
	-- the open step's claim, while the attempt that made it runs
	SELECT o.id, 1000000000000000::bigint + o.step_claim_no, d.ready_status, d.running_status, 'claimed',
		   o.step_lease_owner, o.step_claimed_at
	  FROM payflow.operations o
	  JOIN payflow.step_definitions d ON d.pipeline_version = o.pipeline_version AND d.step_name = o.current_step
	 WHERE o.step_status = 'RUNNING' AND o.step_claim_no IS NOT NULL
	UNION ALL
	-- claims made by attempts that ended without success
	SELECT a.operation_id, 1000000000000000::bigint + a.claim_no, d.ready_status, d.running_status, 'claimed',
		   a.worker, a.started_at
	  FROM payflow.step_attempts a
	  JOIN payflow.operations o ON o.id = a.operation_id
	  JOIN payflow.step_definitions d ON d.pipeline_version = o.pipeline_version AND d.step_name = a.step_name
	 WHERE a.claim_no IS NOT NULL
	UNION ALL
	-- the steps done: the claim of the attempt that succeeded, if it moved
	-- the status, and the completion
	SELECT r.operation_id, 1000000000000000::bigint + c.no, c.from_status, c.to_status, c.reason, r.lease_owner, c.at
	  FROM payflow.step_results r
	  JOIN payflow.operations o ON o.id = r.operation_id
	  JOIN payflow.step_definitions d ON d.pipeline_version = o.pipeline_version AND d.step_name = r.step_name
	 CROSS JOIN LATERAL (VALUES (r.claim_no, d.ready_status, d.running_status, 'claimed', r.claimed_at),
								(r.done_no, d.running_status, d.done_status, lower(r.step_name) || ' done',
								 r.finished_at)) AS c(no, from_status, to_status, reason, at)
	 WHERE c.no IS NOT NULL;

-- The same, with 0.4's table's row-level security: what payflow_app may
-- SELECT, its tenant's (the one authenticate() bound; '' when none); a
-- member of payflow_admin sees every tenant's.  (A view reads the tables as
-- its owner, whom row-level security does not restrict, and calls
-- functions as its caller: only _current_tenant is granted to the app.)
CREATE OR REPLACE VIEW payflow.operation_history AS
	SELECT h.operation_id, h.id, h.from_status, h.to_status, h.reason, h.actor, h.at
	  FROM payflow._operation_history h
	  JOIN payflow.operations o ON o.id = h.operation_id
	 WHERE o.tenant = payflow._current_tenant() OR pg_has_role('payflow_admin', 'USAGE');

REVOKE ALL ON FUNCTION payflow._history_id(integer),
	payflow._status_recorded(text, integer, text, text, text, text) FROM PUBLIC;
