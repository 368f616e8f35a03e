CREATE FUNCTION payflow.changes(operation_ids text[], after_id bigint DEFAULT 0)
	RETURNS TABLE (operation_id text, id bigint, at timestamptz, from_status text,
				   to_status text, reason text, terminal boolean)
	LANGUAGE plpgsql STABLE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
BEGIN
	IF operation_ids IS NULL THEN
		RAISE EXCEPTION 'operation_ids must not be null' USING ERRCODE = 'null_value_not_allowed';
	ELSIF cardinality(operation_ids) > 10000 THEN
		RAISE EXCEPTION 'at most 10000 operation ids per call'
			USING ERRCODE = 'program_limit_exceeded';
	END IF;
	RETURN QUERY
		SELECT h.operation_id, h.id, h.at, h.from_status, h.to_status, h.reason,
			   payflow._is_terminal(h.to_status)
		  FROM payflow.operations o
		  JOIN payflow.operation_history h ON h.operation_id = o.id
		 WHERE o.id = ANY (changes.operation_ids)
		   AND payflow._visible(o.tenant)
		   AND h.id > coalesce(changes.after_id, 0)
		 ORDER BY h.operation_id, h.id;
END
$$;
