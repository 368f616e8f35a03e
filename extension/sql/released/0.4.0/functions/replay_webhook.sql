CREATE OR REPLACE FUNCTION payflow.replay_webhook(failure_id bigint) RETURNS boolean
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	f payflow.webhook_failures;
BEGIN
	IF failure_id IS NULL THEN
		RAISE EXCEPTION 'failure_id must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	SELECT * INTO f FROM payflow.webhook_failures w WHERE w.id = failure_id FOR UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'webhook failure % does not exist', failure_id USING ERRCODE = 'no_data_found';
	ELSIF f.replayed_at IS NOT NULL THEN
		RETURN false;
	END IF;
	PERFORM payflow._outbox_write(gen_random_uuid(), f.operation_id, coalesce(f.body ->> 'paymentId', f.operation_id),
								  f.body ->> 'eventType', 'operation-events', f.body);
	UPDATE payflow.webhook_failures w SET replayed_at = now() WHERE w.id = f.id;
	RETURN true;
END
$$;
