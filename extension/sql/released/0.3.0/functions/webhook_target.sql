CREATE FUNCTION payflow.webhook_target(operation_id text, event_id uuid DEFAULT NULL, body text DEFAULT NULL)
	RETURNS jsonb
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
	IF event_id IS NULL OR body IS NULL THEN
		RAISE EXCEPTION '% must not be null', CASE WHEN event_id IS NULL THEN 'event_id' ELSE 'body' END
			USING ERRCODE = 'null_value_not_allowed',
				  HINT = 'Pass the event being delivered: only events payflow published are signed.';
	END IF;
	PERFORM payflow._require_published(event_id, operation_id, body);
	RETURN (SELECT jsonb_build_object('tenant', w.tenant, 'url', w.url, 'secret', w.secret)
			  FROM payflow.webhooks w WHERE w.tenant = v_tenant);
END
$$;
