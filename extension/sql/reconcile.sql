-- payflow: reconciliation with the legacy DBMS and the callers (0.5.0).
--
-- After a failover with asynchronous replication the promoted standby
-- lacks the last commits of the old primary: operations whose ids the API
-- returned may be gone, and a worker may have charged one before its
-- completion was lost.  The legacy DBMS and the callers still know: the
-- payments team exports the legacy charges of the window (each with the
-- idempotency key payflow sent, "<operation id>:<step>") and the operation
-- ids the API returned (access logs, the applications' own records), and
-- reconcile() says what payflow does not account for.  Also after any
-- incident (a restore from backup, outcome_unknown operations).
--
-- Findings, one row each:
--   charge_unknown       a charge whose key names an operation payflow does
--                        not have (lost, or purged: pass charges younger
--                        than payflow.retention_completed)
--   charge_not_recorded  a charge for an operation that ended without that
--                        step succeeding (FAILED: lease_expired,
--                        outcome_unknown; CANCELLED): refund or replay
--   id_unknown           an operation id a caller was given that payflow
--                        does not have: its request must be submitted again
-- A charge whose key is not payflow's ("pay_<ULID>:<step>") is not payflow's
-- and is passed over; one for an operation still running is not a finding
-- (its step completes with that charge: the same key).

-- Raises 22023 unless charges is a JSON array of objects with a string
-- idempotency_key.
CREATE FUNCTION payflow._require_charges(charges jsonb) RETURNS void
	LANGUAGE plpgsql IMMUTABLE
	AS $$
DECLARE
	v_bad integer;
BEGIN
	IF charges IS NULL THEN
		RAISE EXCEPTION 'legacy_charges must not be null' USING ERRCODE = 'null_value_not_allowed';
	ELSIF jsonb_typeof(charges) <> 'array' THEN
		RAISE EXCEPTION 'legacy_charges must be a JSON array' USING ERRCODE = 'invalid_parameter_value',
			DETAIL = format('Got a JSON %s.', jsonb_typeof(charges));
	END IF;
	SELECT min(c.n) - 1 INTO v_bad
	  FROM jsonb_array_elements(charges) WITH ORDINALITY AS c(charge, n)
	 WHERE jsonb_typeof(c.charge) IS DISTINCT FROM 'object'
		OR jsonb_typeof(c.charge -> 'idempotency_key') IS DISTINCT FROM 'string';
	IF v_bad IS NOT NULL THEN
		RAISE EXCEPTION 'legacy_charges[%] must be a JSON object with a string idempotency_key', v_bad
			USING ERRCODE = 'invalid_parameter_value',
				  HINT = 'Export each charge with the idempotency key payflow sent ("<operation id>:<step>").';
	END IF;
END
$$;

CREATE FUNCTION payflow.reconcile(legacy_charges jsonb DEFAULT '[]', returned_ids text[] DEFAULT '{}')
	RETURNS TABLE (finding text, operation_id text, payment_id text, detail jsonb)
	LANGUAGE plpgsql STABLE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
BEGIN
	PERFORM payflow._require_charges(legacy_charges);
	IF returned_ids IS NULL OR array_position(returned_ids, NULL) IS NOT NULL THEN
		RAISE EXCEPTION 'returned_ids must not be null nor hold a null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	RETURN QUERY
	WITH charge AS (
		SELECT c.charge, split_part(c.charge ->> 'idempotency_key', ':', 1) AS op_id,
			   upper(split_part(c.charge ->> 'idempotency_key', ':', 2)) AS step_name
		  FROM jsonb_array_elements(legacy_charges) AS c(charge)
		 WHERE c.charge ->> 'idempotency_key' ~ '^pay_[0-9A-HJKMNP-TV-Z]{26}:[a-z0-9_]+$'
	)
	SELECT 'charge_unknown', c.op_id, c.charge ->> 'payment_id',
		   jsonb_build_object('charge', c.charge)
	  FROM charge c
	 WHERE NOT EXISTS (SELECT FROM payflow.operations o WHERE o.id = c.op_id)
	UNION ALL
	SELECT 'charge_not_recorded', o.id, o.payment_id,
		   jsonb_build_object('status', o.status, 'error', o.error ->> 'code', 'step', c.step_name,
							  'stepStatus', s.status, 'charge', c.charge)
	  FROM charge c
	  JOIN payflow.operations o ON o.id = c.op_id
	  LEFT JOIN payflow.steps s ON s.operation_id = o.id AND s.step_name = c.step_name
	 WHERE payflow._is_terminal(o.status) AND s.status IS DISTINCT FROM 'SUCCEEDED'
	UNION ALL
	SELECT 'id_unknown', r.id, NULL::text, '{}'::jsonb
	  FROM (SELECT DISTINCT u.id FROM unnest(returned_ids) AS u(id)) r
	 WHERE NOT EXISTS (SELECT FROM payflow.operations o WHERE o.id = r.id)
	ORDER BY 1, 2;
END
$$;

REVOKE ALL ON FUNCTION payflow._require_charges(jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION payflow.reconcile(jsonb, text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION payflow.reconcile(jsonb, text[]) TO payflow_admin;
COMMENT ON FUNCTION payflow.reconcile(jsonb, text[]) IS
	'Charges of the legacy DBMS and operation ids given to callers that payflow does not account for (after a failover or an incident).';
