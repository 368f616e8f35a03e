-- payflow: the console's list of operations (admin_operations).  A file of
-- its own, after admin.sql (its helpers), so that the update script takes
-- the same definition.

-- Operations, newest first, with filters (each a string, as in a query):
-- status, tenant, paymentId, createdFrom, createdTo (ISO 8601, from
-- inclusive, to exclusive), step (the current step), errorCode, after (the
-- "next" of the previous page) and limit (1-200, default 50).
--
-- A page reads at most 5000 operations in id order, through the primary
-- key or, with a tenant, the index that starts with it (with a payment id,
-- the two that hold payment ids: admin.sql); the other filters are
-- applied to those.  So a page costs the same with ten
-- or ten million retained operations, however rare its matches: when the
-- window is spent first the page is short, "next" says where to go on,
-- and "scanned" how many were read.  {"items":[…],"next":id|null,"scanned":n}
CREATE OR REPLACE FUNCTION payflow.admin_operations(admin_key text, filters jsonb DEFAULT '{}')
	RETURNS jsonb
	LANGUAGE plpgsql STABLE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	c_window constant integer := 5000;
	k payflow.api_keys := payflow._admin_key(admin_key);
	f jsonb := payflow._admin_filters(filters, ARRAY['status', 'tenant', 'paymentId', 'createdFrom',
													'createdTo', 'step', 'errorCode', 'after', 'limit']);
	v_limit integer := payflow._admin_limit(f, 50, 200);
	v_from timestamptz := payflow._admin_time(f, 'createdFrom');
	v_to timestamptz := payflow._admin_time(f, 'createdTo');
	v_after text := f ->> 'after';
	v_status text := f ->> 'status';
	v_step text := f ->> 'step';
	v_scan text;
	v_rows jsonb;
	v_scanned integer;
	v_last text;
BEGIN
	IF v_status IS NOT NULL AND v_status NOT IN (
			SELECT ready_status FROM payflow.step_definitions UNION SELECT running_status FROM payflow.step_definitions
			UNION SELECT done_status FROM payflow.step_definitions UNION VALUES ('FAILED'), ('CANCELLED')) THEN
		PERFORM payflow._admin_bad('status', 'not a status of the pipeline (e.g. PENDING, FAILED, COMPLETED)');
	END IF;
	IF v_step IS NOT NULL AND NOT EXISTS (SELECT FROM payflow.step_definitions d WHERE d.step_name = v_step) THEN
		PERFORM payflow._admin_bad('step', 'not a step of the pipeline (payflow.step_definitions)');
	END IF;
	IF v_after IS NOT NULL AND v_after !~ '^pay_[0-9A-HJKMNP-TV-Z]{26}$' THEN
		PERFORM payflow._admin_bad('after', 'must be the "next" of a previous page (an operation id)');
	END IF;
	IF v_from IS NOT NULL AND v_to IS NOT NULL AND v_from >= v_to THEN
		PERFORM payflow._admin_bad('createdTo', 'must be after createdFrom');
	END IF;

	-- The window: one index range read backwards.  The id's time part is
	-- taken when the id is made, at or after created_at (the transaction's
	-- start), so createdFrom bounds ids from below exactly; createdTo is
	-- checked on the rows, the id bound only narrows the range (+ 1 hour).
	v_scan := 'SELECT o.* FROM payflow.operations o WHERE true'
		-- (the two indexes that hold a payment id: see operations_payment_id_idx)
		|| CASE WHEN f ? 'paymentId'
				THEN ' AND o.payment_id = $1 AND (o.idempotency_key = $1 OR o.payment_id <> o.idempotency_key)'
				ELSE '' END
		|| CASE WHEN f ? 'tenant' THEN ' AND o.tenant = $2' ELSE '' END
		|| CASE WHEN v_after IS NOT NULL THEN ' AND o.id < $3' ELSE '' END
		|| CASE WHEN v_from IS NOT NULL THEN ' AND o.id >= $4' ELSE '' END
		|| CASE WHEN v_to IS NOT NULL THEN ' AND o.id < $5' ELSE '' END
		|| ' ORDER BY o.id DESC LIMIT $6';
	EXECUTE format($q$
		WITH scan AS MATERIALIZED (%s),
		matched AS (
			SELECT s.* FROM scan s
			 WHERE ($7::text IS NULL OR s.status = $7) AND ($8::text IS NULL OR s.current_step = $8)
			   AND ($9::text IS NULL OR s.error ->> 'code' = $9)
			   AND ($10::timestamptz IS NULL OR s.created_at >= $10) AND ($11::timestamptz IS NULL OR s.created_at < $11)
			 ORDER BY s.id DESC LIMIT $12 + 1)
		SELECT (SELECT coalesce(jsonb_agg(payflow._admin_operation_row(m) ORDER BY m.id DESC), '[]')
				  FROM matched m),
			   (SELECT count(*)::integer FROM scan), (SELECT min(id) FROM scan)
		$q$, v_scan)
	  INTO v_rows, v_scanned, v_last
	 USING f ->> 'paymentId', f ->> 'tenant', v_after, payflow._admin_id_floor(v_from),
		   payflow._admin_id_floor(v_to + interval '1 hour'), c_window,
		   v_status, v_step, f ->> 'errorCode', v_from, v_to, v_limit;

	RETURN jsonb_build_object(
		'items', CASE WHEN jsonb_array_length(v_rows) > v_limit THEN v_rows - v_limit ELSE v_rows END,
		'next', CASE WHEN jsonb_array_length(v_rows) > v_limit THEN v_rows -> (v_limit - 1) ->> 'operationId'
					 WHEN v_scanned = c_window THEN v_last END,
		'scanned', v_scanned);
END
$$;

REVOKE ALL ON FUNCTION payflow.admin_operations(text, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION payflow.admin_operations(text, jsonb) TO payflow_console;
