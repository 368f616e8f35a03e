CREATE OR REPLACE FUNCTION payflow.outbox_claim(max_events integer, relay_id text, lease_seconds integer DEFAULT 30)
	RETURNS TABLE (event_id uuid, destination text, message_group_id text, dedup_id text,
				   body text, attributes jsonb)
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	SET enable_seqscan = off
	-- a disabled node costs 1e10, which would JIT-compile every call (200 ms)
	SET jit = off
	SET enable_bitmapscan = off
	SET enable_sort = off
	AS $$
DECLARE
	v_low bigint;
	v_moved_at timestamptz;
BEGIN
	PERFORM payflow._require_text('relay_id', relay_id, 200);
	-- Capped: one relay login must not be able to lease the whole outbox
	-- for a day.
	IF max_events IS NULL OR max_events < 1 OR max_events > 1000 THEN
		RAISE EXCEPTION 'max_events must be between 1 and 1000' USING ERRCODE = 'invalid_parameter_value';
	ELSIF lease_seconds IS NULL OR lease_seconds < 1 OR lease_seconds > 600 THEN
		RAISE EXCEPTION 'lease_seconds must be between 1 and 600' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	SELECT k.low_seq, k.moved_at INTO v_low, v_moved_at FROM payflow._outbox_cursor k;
	IF v_moved_at IS NULL OR v_moved_at < clock_timestamp() - interval '100 milliseconds' THEN
		v_low := payflow._outbox_cursor_move();
	END IF;
	RETURN QUERY
		WITH candidates AS (
			SELECT c.ctid
			  FROM payflow.outbox c
			 WHERE c.seq > 0	-- outbox_seq_idx's predicate: see above
			   AND c.seq >= v_low
			   AND c.available_at <= now()
			   AND (c.claim_expires_at IS NULL OR c.claim_expires_at <= now())
			   AND c.seq = (SELECT e.seq FROM payflow.outbox e
							 WHERE e.message_group_id = c.message_group_id
							 ORDER BY e.message_group_id, e.seq LIMIT 1)
			 ORDER BY c.seq
			 LIMIT max_events
			   FOR UPDATE SKIP LOCKED
		)
		UPDATE payflow.outbox u
		   SET claimed_by = relay_id,
			   claim_expires_at = now() + make_interval(secs => lease_seconds),
			   attempts = u.attempts + 1
		  FROM candidates
		 WHERE u.ctid = candidates.ctid
		RETURNING u.event_id, u.destination, u.message_group_id, u.event_id::text,
				  u.body::text,
				  -- the attributes follow the body, so they can never tell another story
				  payflow._event_attributes(u.operation_id, u.body ->> 'correlationId', u.event_type);
END
$$;
