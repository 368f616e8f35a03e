CREATE OR REPLACE FUNCTION payflow.history(operation_id text)
	RETURNS TABLE (at timestamptz, from_status text, to_status text, reason text, actor text)
	LANGUAGE plpgsql STABLE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
BEGIN
	PERFORM payflow._require_operation_id(operation_id);
	IF NOT EXISTS (SELECT FROM payflow.operations o
				    WHERE o.id = history.operation_id AND payflow._visible(o.tenant)) THEN
		PERFORM payflow._unknown_operation(operation_id);
	END IF;
	RETURN QUERY
		SELECT h.at, h.from_status, h.to_status, h.reason, h.actor
		  FROM payflow.operation_history h
		 WHERE h.operation_id = history.operation_id
		 ORDER BY h.id;
END
$$;
