-- payflow: events SQS refuses for good (0.5.0).
--
-- A nack makes an event wait and try again, which is right for a throttled
-- or failing SQS but loops forever on a message SQS will never take (a body
-- with characters it refuses, one over its size limit): the relay would
-- retry it every five minutes for ever and its operation would wait in
-- PENDING for ever.  The relay calls outbox_dead_letter instead when SQS
-- refused an entry for what the message is (the codes are in
-- workers/src/relay/publish.c); such an event leaves the outbox and is kept
-- as a dead letter, and the operation it would have moved on is failed, so
-- that its app learns it (OperationFailed) and an operator can replay it.

-- Takes an event this relay holds the claim of out of the outbox for good:
-- a dead letter (source 'event') keeps its body and the error; when it was
-- the request of its operation's open step, and no worker holds that step,
-- the operation fails there (error code EVENT_REFUSED, OperationFailed,
-- a step dead letter that admin_replay_dead_letters can replay).  False
-- when this relay holds no claim on it (another relay's, or gone).
CREATE FUNCTION payflow.outbox_dead_letter(event_id uuid, error text, relay_id text DEFAULT NULL)
	RETURNS boolean
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	e payflow.outbox;
	o payflow.operations;
	v_error jsonb;
BEGIN
	IF event_id IS NULL THEN
		RAISE EXCEPTION 'event_id must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	PERFORM payflow._require_text('relay_id', relay_id, 200);
	DELETE FROM payflow.outbox x
	 WHERE x.event_id = outbox_dead_letter.event_id AND x.claimed_by = outbox_dead_letter.relay_id
	RETURNING x.* INTO e;
	IF NOT FOUND THEN
		RETURN false;
	END IF;
	v_error := jsonb_build_object('code', 'EVENT_REFUSED',
								  'message', format('SQS refused the %s event for good: %s',
													e.event_type, left(error, 1000)),
								  'eventId', e.event_id, 'destination', e.destination);
	INSERT INTO payflow.dead_letters (source, operation_id, queue, message_body, error, attempts)
	VALUES ('event', e.operation_id, e.destination, payflow._mask_card_numbers(e.body::text),
			payflow._mask_card_numbers(v_error), e.attempts);

	-- The operation fails at its open step if this event asked for that
	-- step and no worker runs it.  A running step has its worker (the event
	-- was a second request, e.g. a re-drive): that worker decides how it ends.
	SELECT * INTO o FROM payflow.operations x WHERE x.id = e.operation_id FOR UPDATE;
	IF FOUND AND NOT payflow._is_terminal(o.status)
	   AND (payflow._step_of(o.pipeline_version, o.current_step)).request_event = e.event_type THEN
		IF o.step_status IN ('PENDING', 'RETRY_WAIT') THEN
			PERFORM payflow._fail_operation(o, v_error, 'relay:' || relay_id);
		END IF;
	END IF;
	RETURN true;
END
$$;

REVOKE ALL ON FUNCTION payflow.outbox_dead_letter(uuid, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION payflow.outbox_dead_letter(uuid, text, text) TO payflow_relay;
COMMENT ON FUNCTION payflow.outbox_dead_letter(uuid, text, text) IS
	'Moves an event SQS refuses for good to the dead letters and fails the step it requested; only from the relay holding the claim.';
