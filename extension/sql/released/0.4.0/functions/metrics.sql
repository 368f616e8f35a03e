CREATE OR REPLACE FUNCTION payflow.metrics() RETURNS jsonb
	LANGUAGE sql STABLE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
	WITH in_flight AS MATERIALIZED (
		SELECT o.id, o.status, o.updated_at, o.current_step
		  FROM payflow.operations o
		 WHERE o.terminal_at IS NULL	-- operations_open_idx's predicate
	), active AS (
		-- each operation's steps by a probe of steps_pkey (LATERAL ... OFFSET 0
		-- keeps it a nested loop): a merge or hash join would read the steps
		-- of every retained operation
		SELECT s.operation_id, s.step_name, s.status AS step_status, o.status, o.updated_at
		  FROM in_flight o
		 CROSS JOIN LATERAL (SELECT t.operation_id, t.step_name, t.status FROM payflow.steps t
							  WHERE t.operation_id = o.id AND t.step_name = o.current_step OFFSET 0) s
		 WHERE s.status IN ('PENDING', 'RUNNING', 'RETRY_WAIT')
	), recent AS MATERIALIZED (
		SELECT id, status FROM payflow.operations WHERE terminal_at > now() - interval '1 hour'
	), finished AS (
		SELECT s.step_name, s.status, extract(epoch FROM s.finished_at - s.claimed_at) AS run_seconds
		  FROM (SELECT id FROM in_flight UNION ALL SELECT id FROM recent) o
		 CROSS JOIN LATERAL (SELECT t.step_name, t.status, t.finished_at, t.claimed_at FROM payflow.steps t
							  WHERE t.operation_id = o.id AND t.finished_at > now() - interval '1 hour' OFFSET 0) s
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
					   'runSecondsP50', round(f.p50::numeric, 3), 'runSecondsP95', round(f.p95::numeric, 3))), '{}'::jsonb)
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
			  FROM payflow.webhook_failures))
$$;
