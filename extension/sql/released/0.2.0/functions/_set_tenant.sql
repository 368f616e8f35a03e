CREATE FUNCTION payflow._set_tenant(tenant text) RETURNS void
	AS 'MODULE_PATHNAME', 'payflow_set_tenant' LANGUAGE C VOLATILE STRICT;
