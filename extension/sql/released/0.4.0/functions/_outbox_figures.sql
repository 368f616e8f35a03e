CREATE FUNCTION payflow._outbox_figures() RETURNS jsonb
	LANGUAGE plpgsql STABLE
	SET enable_seqscan = off
	-- a disabled node costs 1e10, which would JIT-compile every call (200 ms)
	SET jit = off
	SET enable_bitmapscan = off
	AS $$
BEGIN
	RETURN (SELECT jsonb_build_object(
					   'backlog', count(*),
					   'inFlight', count(*) FILTER (WHERE o.claim_expires_at > now()),
					   'failing', count(*) FILTER (WHERE o.last_error IS NOT NULL),
					   'oldestAgeSeconds', round(coalesce(extract(epoch FROM now() - min(o.created_at)), 0)::numeric, 3))
			  FROM payflow.outbox o
			 WHERE o.seq > 0	-- outbox_seq_idx's predicate (see outbox_claim)
			   AND o.seq >= coalesce((SELECT k.low_seq FROM payflow._outbox_cursor k), 0));
END
$$;
