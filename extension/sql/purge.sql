-- payflow: purge(), the TTL clean-up (0.5.0: a file of its own, so that
-- the update script takes the same definition).

-- Whether an operation is past its retention: it ended more than
-- retention_completed ago, or retention_failed for a FAILED one.  A plain
-- expression, inlined where it is used (purge, partitions.sql).
CREATE OR REPLACE FUNCTION payflow._operation_past_retention(p_status text, p_terminal_at timestamptz)
	RETURNS boolean
	LANGUAGE sql STABLE
	AS $$
	SELECT p_terminal_at < now() - CASE WHEN p_status = 'FAILED' THEN payflow._seconds('retention_failed')
										ELSE payflow._seconds('retention_completed') END
$$;
REVOKE ALL ON FUNCTION payflow._operation_past_retention(text, timestamptz) FROM PUBLIC;

-- TTL clean-up in bounded batches (each kind at most max_rows rows per
-- call; "more" says whether to call again), and retention by partition
-- (partitions.sql: a past day's rows dropped whole):
-- payloads of completed/cancelled operations after retention_payloads;
-- operations (with steps, history, payloads, dead letters) after
-- retention_completed, or retention_failed for FAILED ones; the published
-- log; old consumed-event ids; and pg_cron's run details of payflow's jobs,
-- which pg_cron never prunes itself.
CREATE OR REPLACE FUNCTION payflow.purge(max_rows integer DEFAULT 10000) RETURNS jsonb
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	v_payloads integer;
	v_operations integer;
	v_published integer;
	v_logged integer;
	v_consumed integer;
	v_dead integer;
	v_webhooks integer;
	v_cron integer := 0;
	v_position payflow.purge_position;
	v_payload_ops integer;
	v_partitions jsonb;
BEGIN
	IF max_rows IS NULL THEN
		RAISE EXCEPTION 'max_rows must not be null' USING ERRCODE = 'null_value_not_allowed';
	ELSIF max_rows < 1 THEN
		RAISE EXCEPTION 'max_rows must be positive' USING ERRCODE = 'invalid_parameter_value';
	END IF;

	-- Payloads: the operations that ended COMPLETED or CANCELLED more than
	-- retention_payloads ago, read in (terminal_at, id) order from where
	-- the last call stopped (purge_position), so that nothing is written
	-- to an operation's row but for the S3 store's requests, which
	-- payflow-s3-sweep deletes once marked (s3_purge.sql).  The rows are
	-- deleted here from the default partition; a day's partition goes
	-- whole (partitions.sql).
	SELECT * INTO v_position FROM payflow.purge_position FOR UPDATE;
	WITH ops AS MATERIALIZED (
		SELECT o.id, o.terminal_at, payflow._payloads_past_retention(o.status, o.terminal_at) AS done,
			   o.request_ref ->> 'store' = 's3' AND o.payloads_purged_at IS NULL AS s3
		  FROM payflow.operations o
		 WHERE o.terminal_at IS NOT NULL
		   AND o.terminal_at >= v_position.payloads_terminal_at
		   AND (o.terminal_at, o.id) > (v_position.payloads_terminal_at, v_position.payloads_operation)
		   AND o.terminal_at < now() - payflow._seconds('retention_payloads')
		 ORDER BY o.terminal_at, o.id LIMIT max_rows
	), marked AS (
		UPDATE payflow.operations o SET payloads_purged_at = now() FROM ops
		 WHERE o.id = ops.id AND ops.done AND ops.s3
	), moved AS (
		UPDATE payflow.purge_position p SET payloads_terminal_at = l.terminal_at, payloads_operation = l.id
		  FROM (SELECT ops.terminal_at, ops.id FROM ops ORDER BY ops.terminal_at DESC, ops.id DESC LIMIT 1) l
	), gone AS (
		DELETE FROM payflow.payloads_default p USING ops
		 WHERE ops.done AND p.key >= payflow._payload_key(ops.id, '') AND p.key < payflow._payload_keys_end(ops.id)
		RETURNING 1
	)
	SELECT (SELECT count(*) FROM gone), (SELECT count(*) FROM ops) INTO v_payloads, v_payload_ops;

	-- The operations past retention, deleted without a row lock first (a
	-- lock is a WAL record an operation, 54 bytes, and the first change of
	-- its page since the checkpoint: the page's image): the delete checks
	-- the retention again on the row it deletes, so one replayed or changed
	-- meanwhile stays, and what goes with an operation goes by the ids the
	-- delete returned.
	WITH gone AS (
		DELETE FROM payflow.operations o
		 WHERE o.id IN (SELECT f.id FROM payflow.operations f
						 WHERE f.terminal_at IS NOT NULL AND payflow._operation_past_retention(f.status, f.terminal_at)
						 ORDER BY f.terminal_at LIMIT max_rows)
		   AND payflow._operation_past_retention(o.status, o.terminal_at)
		RETURNING o.id
	-- an operation's rows in a day's partition go with their day; those
	-- of the default partition go here
	), del_steps AS (
		DELETE FROM payflow.step_results_default c USING gone WHERE c.operation_id = gone.id
	), del_attempts AS (
		DELETE FROM payflow.step_attempts_default c USING gone WHERE c.operation_id = gone.id
	), del_history AS (
		DELETE FROM payflow.history_events_default c USING gone WHERE c.operation_id = gone.id
	), del_payloads AS (
		-- "0" follows "/": the range holds exactly the keys under payments/<id>/
		DELETE FROM payflow.payloads_default c USING gone
		 WHERE c.key >= payflow._payload_key(gone.id, '') AND c.key < payflow._payload_keys_end(gone.id)
	), del_dead AS (
		DELETE FROM payflow.dead_letters c USING gone WHERE c.operation_id = gone.id
	), del_events AS (
		DELETE FROM payflow.operation_events c USING gone WHERE c.operation_id = gone.id
	), del_log AS (
		-- its events in the outbox log's default partition (those the pass
		-- below did not take: its terminal event, kept with it for the
		-- webhook check, and any moved there when its day was dropped);
		-- long published by now
		DELETE FROM payflow.outbox_events_default c USING gone
		 WHERE c.operation_id = gone.id
		   AND c.seq < (SELECT p.done_below FROM payflow.outbox_position p)
	)
	SELECT count(*) INTO v_operations FROM gone;

	v_partitions := payflow._purge_partitions(max_rows);

	-- The published log: whole batches, counted by their events (those of
	-- the default partition; an hour's partition goes whole, above).  Then
	-- the log rows of the outbox's default partition (the events of days
	-- without a partition of their own, or of operations kept past their
	-- day; a day's partition goes whole with its day, partitions.sql), once
	-- published (below outbox_position.done_below) and as old, but for the
	-- terminal events (operation-events), which go with their operation
	-- (above).  It is read in seq order from purged_below, up to the first
	-- row not old enough: the terminal events left behind are not read
	-- again at each call (their number follows retention_completed, not
	-- the work).
	WITH gone AS (
		DELETE FROM payflow.outbox_batches_default
		 WHERE ctid = ANY (ARRAY(SELECT ctid FROM payflow.outbox_batches_default
								  WHERE published_at < now() - payflow._seconds('retention_published')
								  LIMIT max_rows))
		RETURNING cardinality(seqs) AS n
	)
	SELECT coalesce(sum(n), 0) INTO v_published FROM gone;
	WITH span AS MATERIALIZED (
		SELECT e.seq, e.destination, e.rendered,
			   e.created_at < now() - payflow._seconds('retention_published') AS old
		  FROM payflow.outbox_events_default e, payflow.outbox_position p
		 WHERE e.seq >= p.purged_below AND e.seq < p.done_below
		 ORDER BY e.seq LIMIT max_rows
	), reach AS (
		SELECT coalesce(min(s.seq) FILTER (WHERE NOT s.old), max(s.seq) + 1) AS below FROM span s
	), gone AS (
		DELETE FROM payflow.outbox_events_default e USING span s, reach r
		 WHERE e.seq = s.seq AND s.old AND s.seq < r.below AND NOT payflow._operation_event(s.destination, s.rendered)
		RETURNING 1
	), moved AS (
		UPDATE payflow.outbox_position p SET purged_below = r.below FROM reach r WHERE r.below > p.purged_below
	)
	SELECT count(*) INTO v_logged FROM gone;

	DELETE FROM payflow.consumed_events
	 WHERE ctid = ANY (ARRAY(SELECT ctid FROM payflow.consumed_events
							  WHERE consumed_at < now() - payflow._seconds('retention_consumed')
							  LIMIT max_rows));
	GET DIAGNOSTICS v_consumed = ROW_COUNT;

	-- Message dead letters have no operation; keep them as long as failures.
	DELETE FROM payflow.dead_letters
	 WHERE id = ANY (ARRAY(SELECT id FROM payflow.dead_letters
							WHERE created_at < now() - payflow._seconds('retention_failed')
							ORDER BY created_at LIMIT max_rows));
	GET DIAGNOSTICS v_dead = ROW_COUNT;

	-- Failed webhook deliveries: kept as long as failed operations, counted
	-- from their last failure.
	DELETE FROM payflow.webhook_failures
	 WHERE id = ANY (ARRAY(SELECT id FROM payflow.webhook_failures
							WHERE updated_at < now() - payflow._seconds('retention_failed')
							ORDER BY updated_at LIMIT max_rows));
	GET DIAGNOSTICS v_webhooks = ROW_COUNT;

	IF to_regclass('cron.job_run_details') IS NOT NULL THEN
		EXECUTE $sql$
			DELETE FROM cron.job_run_details
			 WHERE runid = ANY (ARRAY(
				SELECT d.runid FROM cron.job_run_details d JOIN cron.job j USING (jobid)
				 WHERE j.jobname LIKE 'payflow%' AND d.end_time < now() - $1
				 LIMIT $2))
		$sql$ USING payflow._seconds('retention_published'), max_rows;
		GET DIAGNOSTICS v_cron = ROW_COUNT;
	END IF;

	RETURN jsonb_build_object('payloads', v_payloads,
							  'operations', v_operations,
							  -- those deleted one by one (an hour's partition dropped
							  -- counts in partitions.publishedHours)
							  'publishedEvents', v_published,
							  'consumedEvents', v_consumed,
							  'deadLetters', v_dead,
							  'webhookFailures', v_webhooks,
							  'cronRunDetails', v_cron,
							  'partitions', v_partitions,
							  'more', greatest(v_payload_ops, v_operations, v_published, v_logged,
											   v_consumed, v_dead, v_webhooks, v_cron) >= max_rows);
END
$$;
