-- payflow: the console's list of steps that should be moving and are not.

-- Steps that should be moving and are not, among the open steps (each
-- operation in flight's current_step, operations_open_idx): RUNNING past
-- their lease, PENDING for longer than payflow.stuck_after, RETRY_WAIT
-- more than a minute past their time.
-- limit (default 100) per kind.  {"items":[…]}
CREATE OR REPLACE FUNCTION payflow.admin_stuck(admin_key text, filters jsonb DEFAULT '{}') RETURNS jsonb
	LANGUAGE plpgsql STABLE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	k payflow.api_keys := payflow._admin_key(admin_key);
	f jsonb := payflow._admin_filters(filters, ARRAY['limit']);
	v_limit integer := payflow._admin_limit(f, 100, 500);
	v_stuck_after interval := payflow._seconds('stuck_after');
BEGIN
	RETURN jsonb_build_object('stuckAfterSeconds', extract(epoch FROM v_stuck_after)::integer, 'items', (
		SELECT coalesce(jsonb_agg(jsonb_build_object(
				   'operationId', s.id, 'step', s.current_step, 'stepStatus', s.step_status,
				   'reason', s.reason, 'attempt', s.step_attempt, 'worker', s.step_lease_owner,
				   'since', payflow._iso(s.since), 'operationStatus', s.status, 'tenant', s.tenant)
				   ORDER BY s.since), '[]')
		  FROM (
			(SELECT o.*, 'lease_expired' AS reason, o.step_lease_expires_at AS since
			   FROM payflow.operations o
			  WHERE o.terminal_at IS NULL AND o.step_status = 'RUNNING' AND o.step_lease_expires_at < now()
			  ORDER BY o.step_claimed_at LIMIT v_limit)
			UNION ALL
			(SELECT o.*, 'pending_too_long', o.step_pending_since
			   FROM payflow.operations o
			  WHERE o.terminal_at IS NULL AND o.step_status = 'PENDING' AND o.step_pending_since < now() - v_stuck_after
				AND o.held_step IS NULL		-- waits for a slot of its step's limit, by design
			  ORDER BY o.step_pending_since LIMIT v_limit)
			UNION ALL
			(SELECT o.*, 'retry_overdue', o.step_next_attempt_at
			   FROM payflow.operations o
			  WHERE o.step_next_attempt_at < now() - interval '1 minute' AND o.step_status = 'RETRY_WAIT'
			  ORDER BY o.step_next_attempt_at LIMIT v_limit)) s));
END
$$;

REVOKE ALL ON FUNCTION payflow.admin_stuck(text, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION payflow.admin_stuck(text, jsonb) TO payflow_console;
