CREATE FUNCTION payflow.outbox_ack(event_ids uuid[], message_ids text[] DEFAULT NULL, relay_id text DEFAULT NULL)
	RETURNS integer
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	v_count integer;
BEGIN
	IF event_ids IS NULL THEN
		RAISE EXCEPTION 'event_ids must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	PERFORM payflow._require_text('relay_id', relay_id, 200);
	IF message_ids IS NOT NULL AND cardinality(message_ids) <> cardinality(event_ids) THEN
		RAISE EXCEPTION 'message_ids must have one entry per event id'
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = format('Got %s event ids and %s message ids.',
								  cardinality(event_ids), cardinality(message_ids));
	END IF;
	WITH acked AS (
		DELETE FROM payflow.outbox o
		 WHERE o.event_id = ANY (event_ids) AND o.claimed_by = outbox_ack.relay_id
		RETURNING o.event_id, o.operation_id, o.event_type, o.destination
	), ids AS (
		SELECT DISTINCT ON (m.event_id) m.event_id, m.message_id
		  FROM unnest(event_ids, coalesce(message_ids, '{}'::text[])) AS m(event_id, message_id)
		 ORDER BY m.event_id
	)
	INSERT INTO payflow.outbox_published (event_id, operation_id, event_type, destination, message_id)
	SELECT a.event_id, a.operation_id, a.event_type, a.destination, i.message_id
	  FROM acked a LEFT JOIN ids i ON i.event_id = a.event_id;
	GET DIAGNOSTICS v_count = ROW_COUNT;
	RETURN v_count;
END
$$;
