-- payflow: metrics().
--
-- Health figures for dashboards and alarms, whose cost follows the work in
-- flight and the last hour, never the retention.

-- The outbox figures of metrics(), from where the live rows begin
-- (payflow._outbox_cursor) by outbox_seq_idx: a sequential scan read every
-- page of the outbox's heap at each scrape, and while a snapshot is held
-- open those are all the rows acked since.
CREATE OR REPLACE FUNCTION payflow._outbox_figures() RETURNS jsonb
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

-- Health figures for dashboards and alarms.  Scraped often (the HTTP edge's
-- /metrics), so it never scans all retained operations: every operation not
-- yet terminal (operations_open_idx) has exactly one open step, its
-- current_step (PENDING, RUNNING or RETRY_WAIT); recent terminal
-- operations come from the terminal_at index.  A step that finished in the
-- last hour belongs to an operation still in flight or to one that ended
-- since, so those two sets' steps are all there is to read for it.  Its
-- cost follows the work in flight and the last hour, not the retention.
CREATE OR REPLACE FUNCTION payflow.metrics() RETURNS jsonb
	LANGUAGE sql STABLE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
	WITH in_flight AS MATERIALIZED (
		SELECT o.id, o.status, o.updated_at, o.current_step AS step_name, o.step_status
		  FROM payflow.operations o
		 WHERE o.terminal_at IS NULL	-- operations_open_idx's predicate
	), active AS (
		-- each operation's open step is in its row
		SELECT step_name, step_status, status, updated_at
		  FROM in_flight
		 WHERE step_status IN ('PENDING', 'RUNNING', 'RETRY_WAIT')
	), recent AS MATERIALIZED (
		SELECT id, status, current_step, step_status, step_claimed_at, terminal_at
		  FROM payflow.operations WHERE terminal_at > now() - interval '1 hour'
	), finished AS (
		-- the steps done, by a probe of step_results_pkey per operation
		-- (LATERAL ... OFFSET 0 keeps it a nested loop): a merge or hash join
		-- would read those of every retained operation
		SELECT r.step_name, 'SUCCEEDED' AS status, extract(epoch FROM r.finished_at - r.claimed_at) AS run_seconds
		  FROM (SELECT id FROM in_flight UNION ALL SELECT id FROM recent) o
		 CROSS JOIN LATERAL (SELECT t.step_name, t.finished_at, t.claimed_at FROM payflow.step_results t
							  WHERE t.operation_id = o.id AND t.finished_at > now() - interval '1 hour' OFFSET 0) r
		UNION ALL
		-- and the steps operations ended on
		SELECT o.current_step, o.step_status, extract(epoch FROM o.terminal_at - o.step_claimed_at)
		  FROM recent o WHERE o.step_status IN ('FAILED', 'CANCELLED')
	)
	SELECT jsonb_build_object(
		'operations', (
			SELECT coalesce(jsonb_object_agg(status, jsonb_build_object(
					   'count', n, 'oldestAgeSeconds', round(age::numeric, 3))), '{}'::jsonb)
			  FROM (SELECT status, count(*) AS n, extract(epoch FROM now() - min(updated_at)) AS age
					  FROM active GROUP BY status) a),
		'finishedLastHour', (
			SELECT coalesce(jsonb_object_agg(status, n), '{}'::jsonb)
			  FROM (SELECT status, count(*) AS n FROM recent GROUP BY status) r),
		'outbox', payflow._outbox_figures(),
		'steps', (
			SELECT coalesce(jsonb_object_agg(d.step_name, jsonb_build_object(
					   'pending', coalesce(a.pending, 0), 'running', coalesce(a.running, 0),
					   'retryWaiting', coalesce(a.retry_waiting, 0),
					   'finishedLastHour', coalesce(f.finished, 0),
					   'runSecondsP50', round(f.p50::numeric, 3), 'runSecondsP95', round(f.p95::numeric, 3))
					   -- the step's limit (step_limits.sql) and breaker (step_breakers.sql), when it has them
					   || coalesce((SELECT jsonb_build_object('limit', jsonb_strip_nulls(jsonb_build_object(
												'maxRunning', l.max_running, 'maxRunningPerTenant', l.max_running_per_tenant,
												'perSecond', l.per_second, 'avgRunSeconds', l.avg_run_seconds,
												'slotsHeld', (SELECT count(*) FROM payflow.step_slots x
															   WHERE x.step_name = l.step_name),
												-- operations waiting for a slot (step_dispatch.sql)
												'held', (SELECT count(*) FROM payflow.operations h
														  WHERE h.held_step = l.step_name))))
									  FROM payflow.step_limits l WHERE l.step_name = d.step_name), '{}'::jsonb)
					   || coalesce((SELECT jsonb_build_object('breaker', jsonb_build_object(
												'state', b.state, 'open', b.state = 'OPEN', 'halfOpen', b.state = 'HALF_OPEN',
												'changedAt', payflow._iso(b.changed_at), 'openedTotal', b.opened_total,
												'callsInWindow', b.calls, 'failureRatio', b.failure_ratio))
									  FROM payflow.step_breakers b WHERE b.step_name = d.step_name), '{}'::jsonb)), '{}'::jsonb)
			  FROM (SELECT DISTINCT sd.step_name FROM payflow.step_definitions sd) d
			  LEFT JOIN (SELECT step_name,
								count(*) FILTER (WHERE step_status = 'PENDING') AS pending,
								count(*) FILTER (WHERE step_status = 'RUNNING') AS running,
								count(*) FILTER (WHERE step_status = 'RETRY_WAIT') AS retry_waiting
						   FROM active GROUP BY step_name) a ON a.step_name = d.step_name
			  LEFT JOIN (SELECT step_name, count(*) AS finished,
								percentile_cont(0.5) WITHIN GROUP (ORDER BY run_seconds)
									FILTER (WHERE status = 'SUCCEEDED') AS p50,
								percentile_cont(0.95) WITHIN GROUP (ORDER BY run_seconds)
									FILTER (WHERE status = 'SUCCEEDED') AS p95
						   FROM finished GROUP BY step_name) f ON f.step_name = d.step_name),
		'failureRateLastHour', (
			SELECT round(coalesce(count(*) FILTER (WHERE status = 'FAILED')::numeric
								  / nullif(count(*) FILTER (WHERE status IN ('COMPLETED', 'FAILED')), 0), 0), 4)
			  FROM recent),
		'deadLetters', (
			SELECT jsonb_build_object(
					   'open', count(*) FILTER (WHERE replayed_at IS NULL),
					   'lastHour', count(*) FILTER (WHERE created_at > now() - interval '1 hour'))
			  FROM payflow.dead_letters),
		'webhookFailures', (
			SELECT jsonb_build_object(
					   'open', count(*) FILTER (WHERE replayed_at IS NULL),
					   'lastHour', count(*) FILTER (WHERE updated_at > now() - interval '1 hour'))
			  FROM payflow.webhook_failures),
		-- retention by partition (partitions.sql): daysAhead below 1 or
		-- defaultPartitionRows growing says purge has not run
		'retention', (
			SELECT jsonb_build_object(
					   'dayPartitions', count(DISTINCT d.day),
					   'daysAhead', coalesce(max(d.day) - (now() AT TIME ZONE 'UTC')::date, -1),
					   'oldestDayAgeDays', coalesce((now() AT TIME ZONE 'UTC')::date - min(d.day), 0),
					   -- the planner's estimate: no scan
					   'defaultPartitionRows', (SELECT coalesce(sum(greatest(c.reltuples, 0)), 0)::bigint
												  FROM payflow._day_partitioned() t
												  JOIN pg_catalog.pg_class c
													ON c.oid = ('payflow.' || t.parent || '_default')::regclass))
			  FROM payflow._day_partitions() d),
		-- an array: tenants are data, not metric names (/metrics leaves arrays out)
		'tenantQuotas', (
			SELECT coalesce(jsonb_agg(jsonb_build_object('tenant', q.tenant, 'maxOpen', q.max_open,
														 'openNow', q.open_now, 'countedAt', payflow._iso(q.counted_at))
									  ORDER BY q.tenant), '[]'::jsonb)
			  FROM payflow.tenant_quotas q))
$$;
