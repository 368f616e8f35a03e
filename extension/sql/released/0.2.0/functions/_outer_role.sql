CREATE FUNCTION payflow._outer_role() RETURNS text
	AS 'MODULE_PATHNAME', 'payflow_outer_role' LANGUAGE C STABLE;
