CREATE OR REPLACE FUNCTION payflow.record_webhook_failure(event_id uuid, operation_id text, body text,
											   attempts integer, error jsonb)
	RETURNS bigint
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	v_tenant text;
	v_body jsonb;
	v_id bigint;
BEGIN
	IF event_id IS NULL THEN
		RAISE EXCEPTION 'event_id must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	PERFORM payflow._require_operation_id(operation_id);
	PERFORM payflow._require_text('body', body, 262144);
	BEGIN
		v_body := body::jsonb;
	EXCEPTION WHEN invalid_text_representation THEN
		RAISE EXCEPTION 'body is not JSON' USING ERRCODE = 'invalid_text_representation';
	END;
	IF jsonb_typeof(v_body) IS DISTINCT FROM 'object' OR jsonb_typeof(v_body -> 'eventType') IS DISTINCT FROM 'string' THEN
		RAISE EXCEPTION 'body must be an event: a JSON object with an "eventType"'
			USING ERRCODE = 'invalid_parameter_value';
	END IF;
	IF attempts IS NULL OR attempts < 1 THEN
		RAISE EXCEPTION 'attempts must be at least 1'
			USING ERRCODE = CASE WHEN attempts IS NULL THEN 'null_value_not_allowed'
								 ELSE 'invalid_parameter_value' END;
	END IF;
	IF error IS NOT NULL THEN
		PERFORM payflow._require_object('error', error);
	END IF;
	SELECT o.tenant INTO v_tenant FROM payflow.operations o
	 WHERE o.id = record_webhook_failure.operation_id;
	IF NOT FOUND THEN
		PERFORM payflow._unknown_operation(operation_id);
	END IF;
	-- what replay_webhook would send again must be payflow's own event
	PERFORM payflow._require_published(event_id, operation_id, body);
	INSERT INTO payflow.webhook_failures AS f (event_id, operation_id, tenant, url, body, attempts, error)
	VALUES (record_webhook_failure.event_id, record_webhook_failure.operation_id, v_tenant,
			coalesce((SELECT w.url FROM payflow.webhooks w WHERE w.tenant = v_tenant), ''),
			v_body, attempts, payflow._mask_card_numbers(error))
	ON CONFLICT ON CONSTRAINT webhook_failures_event_id_key DO UPDATE
		SET attempts = EXCLUDED.attempts, error = EXCLUDED.error, url = EXCLUDED.url,
			updated_at = now(), replayed_at = NULL
	RETURNING f.id INTO v_id;
	RETURN v_id;
END
$$;
