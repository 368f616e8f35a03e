CREATE FUNCTION payflow.outbox_nack(event_id uuid, error text, relay_id text DEFAULT NULL) RETURNS boolean
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
BEGIN
	IF event_id IS NULL THEN
		RAISE EXCEPTION 'event_id must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	PERFORM payflow._require_text('relay_id', relay_id, 200);
	UPDATE payflow.outbox o
	   SET claimed_by = NULL, claim_expires_at = NULL,
		   available_at = now() + payflow.backoff_delay(least(greatest(o.attempts - 1, 0), 30),
														'1 second', '5 minutes', 0.2),
		   last_error = left(error, 2000)
	 WHERE o.event_id = outbox_nack.event_id AND o.claimed_by = outbox_nack.relay_id;
	RETURN FOUND;
END
$$;
