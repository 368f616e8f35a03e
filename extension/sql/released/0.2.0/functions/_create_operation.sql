CREATE OR REPLACE FUNCTION payflow._create_operation(p_payment_id text, p_idempotency_key text,
										  p_correlation_id text, p_request_hash bytea,
										  p_request_ref jsonb, p_content bytea)
	RETURNS text
	LANGUAGE plpgsql
	AS $$
DECLARE
	v_id text := payflow._new_operation_id();
	v_event_id uuid := gen_random_uuid();
	v_ref jsonb := coalesce(p_request_ref,
							jsonb_build_object('store', 'pg',
											   'key', 'payments/' || v_id || '/request.json',
											   'checksum', payflow._checksum(p_content),
											   'size', octet_length(p_content)));
	v_tenant text := payflow._current_tenant();
	v_created text;
	v_existing payflow.operations;
BEGIN
	WITH op AS (
		INSERT INTO payflow.operations (id, tenant, payment_id, idempotency_key, request_hash,
										correlation_id, request_ref)
		VALUES (v_id, v_tenant, p_payment_id, p_idempotency_key, p_request_hash, p_correlation_id, v_ref)
		ON CONFLICT ON CONSTRAINT operations_idempotency_key DO NOTHING
		RETURNING id
	), payload AS (
		INSERT INTO payflow.payloads (key, operation_id, checksum, size, content)
		SELECT v_ref ->> 'key', op.id, v_ref ->> 'checksum', octet_length(p_content), p_content
		  FROM op WHERE p_content IS NOT NULL
	), step AS (
		INSERT INTO payflow.steps (operation_id, step_name, input_ref, pending_since)
		SELECT op.id, 'PROCESS_PAYMENT', v_ref, now() FROM op
	), history AS (
		INSERT INTO payflow.operation_history (operation_id, from_status, to_status, reason, actor)
		SELECT op.id, NULL, 'PENDING', 'submitted', session_user FROM op
	), event AS (
		INSERT INTO payflow.outbox (event_id, operation_id, event_type, destination,
									message_group_id, body, attributes)
		SELECT v_event_id, op.id, 'PaymentRequested', 'payment-requests', payflow._message_group_id(p_payment_id),
			   payflow._event_body(v_event_id, op.id, p_payment_id, p_correlation_id,
								   'PaymentRequested', 1, jsonb_build_object('payload', v_ref)),
			   payflow._event_attributes(op.id, p_correlation_id, 'PaymentRequested')
		  FROM op
	)
	SELECT id INTO v_created FROM op;

	IF v_created IS NULL THEN
		SELECT * INTO v_existing FROM payflow.operations
		 WHERE tenant = v_tenant AND idempotency_key = p_idempotency_key;
		IF v_existing.request_hash <> p_request_hash THEN
			RAISE EXCEPTION 'idempotency key "%" was already used with other details', p_idempotency_key
				USING ERRCODE = 'PF002',
					  DETAIL = format('Operation %s was created with this key.', v_existing.id),
					  HINT = 'Use a new idempotency key for a new payment request.';
		END IF;
		RETURN v_existing.id;
	END IF;
	PERFORM payflow._outbox_written();
	RETURN v_id;
END
$$;
