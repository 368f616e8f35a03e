CREATE FUNCTION payflow._visible(op_tenant text) RETURNS boolean
	LANGUAGE sql STABLE
	AS $$
	SELECT op_tenant = payflow._current_tenant()
		   OR (payflow._current_tenant() = ''
			   AND pg_has_role(payflow._outer_role(), 'payflow_admin', 'USAGE'))
$$;
