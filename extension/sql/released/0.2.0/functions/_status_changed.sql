CREATE FUNCTION payflow._status_changed() RETURNS void
	AS 'MODULE_PATHNAME', 'payflow_status_changed' LANGUAGE C VOLATILE;
