CREATE FUNCTION payflow.webhook_target(operation_id text) RETURNS jsonb
	LANGUAGE plpgsql STABLE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	v_tenant text;
BEGIN
	PERFORM payflow._require_operation_id(operation_id);
	SELECT o.tenant INTO v_tenant FROM payflow.operations o WHERE o.id = webhook_target.operation_id;
	IF NOT FOUND THEN
		PERFORM payflow._unknown_operation(operation_id);
	END IF;
	RETURN (SELECT jsonb_build_object('tenant', w.tenant, 'url', w.url, 'secret', w.secret)
			  FROM payflow.webhooks w WHERE w.tenant = v_tenant);
END
$$;
