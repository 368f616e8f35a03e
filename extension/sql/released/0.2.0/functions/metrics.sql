CREATE OR REPLACE FUNCTION payflow.metrics() RETURNS jsonb
	LANGUAGE sql STABLE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
	WITH active AS (
		SELECT s.operation_id, s.step_name, s.status AS step_status, o.status, o.updated_at
		  FROM payflow.steps s
		  JOIN payflow.operations o ON o.id = s.operation_id
		 -- ORed, not IN (...): each arm matches one partial index (BitmapOr)
		 WHERE s.status = 'PENDING' OR s.status = 'RUNNING' OR s.status = 'RETRY_WAIT'
	), recent AS (
		SELECT id, status FROM payflow.operations WHERE terminal_at > now() - interval '1 hour'
	), finished AS (
		SELECT s.step_name, s.status, extract(epoch FROM s.finished_at - s.claimed_at) AS run_seconds
		  FROM payflow.steps s
		 WHERE s.finished_at > now() - interval '1 hour'
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
		'outbox', (
			SELECT jsonb_build_object(
					   'backlog', count(*),
					   'inFlight', count(*) FILTER (WHERE claim_expires_at > now()),
					   'failing', count(*) FILTER (WHERE last_error IS NOT NULL),
					   'oldestAgeSeconds', round(coalesce(extract(epoch FROM now() - min(created_at)), 0)::numeric, 3))
			  FROM payflow.outbox),
		'steps', (
			SELECT coalesce(jsonb_object_agg(d.step_name, jsonb_build_object(
					   'pending', coalesce(a.pending, 0), 'running', coalesce(a.running, 0),
					   'retryWaiting', coalesce(a.retry_waiting, 0),
					   'finishedLastHour', coalesce(f.finished, 0),
					   'runSecondsP50', round(f.p50::numeric, 3), 'runSecondsP95', round(f.p95::numeric, 3))), '{}'::jsonb)
			  FROM payflow.step_definitions d
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
