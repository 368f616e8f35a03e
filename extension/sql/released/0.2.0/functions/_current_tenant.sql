CREATE FUNCTION payflow._current_tenant() RETURNS text
	AS 'MODULE_PATHNAME', 'payflow_current_tenant' LANGUAGE C STABLE PARALLEL RESTRICTED;
