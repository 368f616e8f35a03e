-- payflow: what consumers record.
--
-- mark_consumed (consumer-side de-duplication of event ids) and
-- record_dead_letter (a message no worker could handle, on its last
-- receive).

-- Records that a consumer handled an event; false if it already had.
CREATE FUNCTION payflow.mark_consumed(consumer text, event_id uuid) RETURNS boolean
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
BEGIN
	PERFORM payflow._require_text('consumer', consumer, 200);
	IF event_id IS NULL THEN
		RAISE EXCEPTION 'event_id must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	INSERT INTO payflow.consumed_events (consumer, event_id)
	VALUES (mark_consumed.consumer, mark_consumed.event_id)
	ON CONFLICT DO NOTHING;
	RETURN FOUND;
END
$$;

-- Keeps a message no worker could handle (bad JSON, unknown version,
-- checksum mismatch…) for investigation; returns the dead letter's id.
CREATE FUNCTION payflow.record_dead_letter(queue text, message_body text, error jsonb,
										   operation_id text DEFAULT NULL)
	RETURNS bigint
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	v_id bigint;
BEGIN
	PERFORM payflow._require_text('queue', queue, 1000);
	PERFORM payflow._require_object('error', error);
	INSERT INTO payflow.dead_letters (source, queue, message_body, error, operation_id)
	VALUES ('message', queue, payflow._mask_card_numbers(left(message_body, 262144)),
			payflow._mask_card_numbers(error),
			CASE WHEN operation_id ~ '^pay_[0-9A-HJKMNP-TV-Z]{26}$' THEN operation_id END)
	RETURNING id INTO v_id;
	RETURN v_id;
END
$$;
