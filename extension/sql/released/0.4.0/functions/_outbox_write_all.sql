CREATE OR REPLACE FUNCTION payflow._outbox_write_all(p_event_ids uuid[], p_operation_ids text[], p_group_keys text[],
										  p_event_types text[], p_destinations text[], p_bodies jsonb[])
	RETURNS integer
	LANGUAGE plpgsql
	AS $$
DECLARE
	v_n integer;
BEGIN
	-- An xid before a seq: payflow._outbox_cursor relies on it (a
	-- transaction's first write would otherwise draw the seq and only then
	-- take its xid).  Every caller has written before, so this is a lookup.
	PERFORM pg_catalog.pg_current_xact_id();
	INSERT INTO payflow.outbox (event_id, operation_id, event_type, destination, message_group_id, body)
	SELECT e.event_id, e.operation_id, e.event_type, e.destination, payflow._message_group_id(e.group_key), e.body
	  FROM unnest(p_event_ids, p_operation_ids, p_group_keys, p_event_types, p_destinations, p_bodies) WITH ORDINALITY
		   AS e(event_id, operation_id, group_key, event_type, destination, body, n)
	 ORDER BY e.n;
	GET DIAGNOSTICS v_n = ROW_COUNT;
	IF 'operation-events' = ANY (p_destinations) THEN
		INSERT INTO payflow.operation_events (event_id, operation_id, body_sha256)
		SELECT (e.body ->> 'eventId')::uuid, e.operation_id, sha256(convert_to(e.body::text, 'UTF8'))
		  FROM unnest(p_operation_ids, p_destinations, p_bodies) AS e(operation_id, destination, body)
		 WHERE e.destination = 'operation-events'
		ON CONFLICT (event_id) DO NOTHING;
	END IF;
	IF v_n > 0 THEN
		PERFORM payflow._outbox_written();
	END IF;
	RETURN v_n;
END
$$;
