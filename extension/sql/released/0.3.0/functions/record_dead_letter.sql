CREATE OR REPLACE FUNCTION payflow.record_dead_letter(queue text, message_body text, error jsonb,
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
