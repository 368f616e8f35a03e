CREATE FUNCTION payflow._outbox_cursor_move() RETURNS bigint
	LANGUAGE plpgsql VOLATILE
	AS $$
DECLARE
	k record;
	v_end bigint;
	v_low bigint;
BEGIN
	SELECT c.low_seq, c.pending_end, c.reset_at, c.moved_by, c.xmin AS written_by INTO k
	  FROM payflow._outbox_cursor c FOR UPDATE SKIP LOCKED;
	IF NOT FOUND THEN
		-- Another session is moving it, or a crash emptied the table.  (Not
		-- INSERT ... ON CONFLICT first: it would wait for the other session.)
		SELECT c.low_seq INTO v_low FROM payflow._outbox_cursor c;
		IF NOT FOUND THEN
			INSERT INTO payflow._outbox_cursor DEFAULT VALUES ON CONFLICT DO NOTHING;
		END IF;
		RETURN coalesce(v_low, 0);
	END IF;
	v_low := k.low_seq;
	-- the sequence's next value, before the snapshots of the statements below
	SELECT CASE WHEN s.is_called THEN s.last_value + 1 ELSE s.last_value END INTO v_end
	  FROM payflow.outbox_seq_seq s;
	IF v_low > v_end OR k.reset_at < clock_timestamp() - interval '1 minute' THEN
		v_low := 0;
		k.reset_at := clock_timestamp();
	ELSIF k.pending_end IS NOT NULL AND k.moved_by IS DISTINCT FROM pg_catalog.pg_current_xact_id() THEN
		-- (a move earlier in this transaction has not ended: the next one
		-- will look)
		-- One statement, one snapshot: the horizon check and the rows it
		-- sees.  The xid that wrote this version of the row, as an xid8: the
		-- snapshot's xmax is newer (that transaction has ended: its row lock
		-- is ours), and the distance is under 2^32 (else the result is newer
		-- than the truth, which only delays the move).  Not this
		-- transaction's xid: it may be older than that one.
		SELECT CASE WHEN x.horizon > x.xmax - (x.xmax % 4294967296 - k.written_by::text::numeric + 4294967296) % 4294967296
					THEN LEAST(k.pending_end,
							   (SELECT o.seq FROM payflow.outbox o
								 WHERE o.seq > 0 AND o.seq >= k.low_seq	-- outbox_seq_idx
								 ORDER BY o.seq LIMIT 1))
					ELSE k.low_seq END
		  INTO v_low
		  FROM (SELECT pg_catalog.pg_snapshot_xmin(s.s)::text::numeric AS horizon,
					   pg_catalog.pg_snapshot_xmax(s.s)::text::numeric AS xmax
				  FROM (SELECT pg_catalog.pg_current_snapshot() AS s) s) x;
		v_low := GREATEST(k.low_seq, v_low);
	END IF;
	-- Written in a subtransaction, whose first write takes a new xid: newer
	-- than the xid of every transaction that drew a seq below v_end, and it
	-- is the row version's xmin, which the next move reads back.  (Not the
	-- snapshot's xmax: that is the newest ended xid + 1, and a running writer
	-- can hold a newer one.  Nor this transaction's xid, which it may have
	-- taken before such a writer took its own.)
	BEGIN
		UPDATE payflow._outbox_cursor c
		   SET low_seq = v_low, pending_end = v_end, moved_at = clock_timestamp(), reset_at = k.reset_at,
			   moved_by = pg_catalog.pg_current_xact_id();
	EXCEPTION WHEN OTHERS THEN
		RAISE;
	END;
	RETURN v_low;
END
$$;
