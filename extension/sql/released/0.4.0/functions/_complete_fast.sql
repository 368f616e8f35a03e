CREATE OR REPLACE FUNCTION payflow._complete_fast(p_step text, p_worker_id text, p_items jsonb)
	RETURNS TABLE (item integer, operation_id text, answer jsonb)
	LANGUAGE plpgsql VOLATILE
	SET plan_cache_mode = force_generic_plan
	SET enable_seqscan = off
	-- a disabled node costs 1e10, which would JIT-compile every call (200 ms)
	SET jit = off
	SET enable_bitmapscan = off
	SET enable_hashjoin = off
	SET enable_mergejoin = off
	AS $$
DECLARE
	r record;
	d payflow.step_definitions;
	n payflow.step_definitions;
	v_max_bytes bigint := payflow._setting('payload_max_bytes')::bigint;
	v_last boolean;
	v_completed_event text;
BEGIN
	-- The step as the newest version that has it defines it; operations of
	-- older versions (in flight across a pipeline change) take the full path.
	-- With it, in the same statement, the next step (none after the last)
	-- and the version's completed event.
	SELECT sd AS d, nx AS n, p.completed_event INTO r
	  FROM payflow.step_definitions sd
	  JOIN payflow.pipelines p ON p.version = sd.pipeline_version
	  LEFT JOIN payflow.step_definitions nx ON nx.pipeline_version = sd.pipeline_version
										   AND nx.position = sd.position + 1
	 WHERE sd.step_name = p_step
	 ORDER BY sd.pipeline_version DESC LIMIT 1;
	IF NOT FOUND THEN
		RETURN;
	END IF;
	d := r.d;
	n := r.n;
	v_last := n.step_name IS NULL;
	v_completed_event := r.completed_event;
	RETURN QUERY
	WITH i AS MATERIALIZED (
		SELECT DISTINCT ON (x.e ->> 'operationId')
			   x.n::integer AS n, x.e ->> 'operationId' AS id, x.e -> 'result' AS result,
			   convert_to((x.e -> 'result')::text, 'UTF8') AS content, gen_random_uuid() AS event_id
		  FROM jsonb_array_elements(p_items) WITH ORDINALITY AS x(e, n)
		 WHERE jsonb_typeof(x.e -> 'result') = 'object'
		   AND coalesce(x.e -> 'resultRef', 'null'::jsonb) = 'null'::jsonb
		 ORDER BY x.e ->> 'operationId', x.n
	), o AS MATERIALIZED (
		SELECT o.id, o.status, o.payment_id, o.correlation_id
		  FROM payflow.operations o
		 WHERE o.id IN (SELECT i.id FROM i) AND o.status = d.running_status
		   AND o.pipeline_version = d.pipeline_version
		 ORDER BY o.id
		   FOR UPDATE SKIP LOCKED
	), s AS (
		UPDATE payflow.steps s
		   SET status = 'SUCCEEDED', result = i.result,
			   result_ref = CASE WHEN d.result_name IS NOT NULL THEN
					jsonb_build_object('store', 'pg', 'key', payflow._payload_key(o.id, d.result_name),
									   'checksum', payflow._checksum(i.content), 'size', octet_length(i.content))
				END,
			   completed_event_id = i.event_id, finished_at = now(), lease_expires_at = NULL, pending_since = NULL, next_attempt_at = NULL
		  FROM o JOIN i ON i.id = o.id
		 WHERE s.operation_id = o.id AND s.step_name = d.step_name
		   AND s.status = 'RUNNING' AND s.lease_owner = p_worker_id
		   AND octet_length(i.content) <= v_max_bytes
		   AND (NOT v_last OR octet_length(i.result::text) <= 65536)
		   AND (d.result_name IS NULL OR NOT EXISTS (
				SELECT FROM payflow.payloads p WHERE p.key = payflow._payload_key(o.id, d.result_name)))
		RETURNING s.operation_id, s.attempt, s.result, s.result_ref, s.input_ref, i.n, i.content,
				  i.event_id, o.status, o.payment_id, o.correlation_id
	), p AS (
		INSERT INTO payflow.payloads (key, operation_id, checksum, size, content)
		SELECT s.result_ref ->> 'key', s.operation_id, s.result_ref ->> 'checksum', octet_length(s.content), s.content
		  FROM s WHERE s.result_ref IS NOT NULL
	), st AS (
		UPDATE payflow.operations op
		   SET status = d.done_status, updated_at = now(),	-- checked by operations_transition
			   current_step = coalesce(n.step_name, op.current_step),
			   result = CASE WHEN v_last THEN s.result ELSE op.result END,
			   terminal_at = CASE WHEN v_last THEN now() END
		  FROM s
		 WHERE op.id = s.operation_id
	), h AS (
		INSERT INTO payflow.operation_history (operation_id, from_status, to_status, reason, actor)
		SELECT s.operation_id, s.status, d.done_status, lower(d.step_name) || ' done', p_worker_id FROM s
		RETURNING payflow._status_changed()
	), ns AS (
		INSERT INTO payflow.steps (operation_id, step_name, input_ref, pending_since)
		SELECT s.operation_id, n.step_name, coalesce(s.result_ref, s.input_ref), now() FROM s WHERE NOT v_last
	), e AS MATERIALIZED (
		SELECT s.operation_id, s.event_id, s.payment_id,
			   coalesce(n.request_event, v_completed_event) AS event_type,
			   coalesce(n.destination, 'operation-events') AS destination,
			   payflow._event_body(s.event_id, s.operation_id, s.payment_id, s.correlation_id,
								   coalesce(n.request_event, v_completed_event),
								   CASE WHEN v_last THEN s.attempt ELSE 1 END,
								   CASE WHEN v_last THEN jsonb_build_object('status', d.done_status, 'result', s.result)
										ELSE jsonb_build_object(n.input_field, coalesce(s.result_ref, s.input_ref)) END) AS body
		  FROM s
	), ev AS (
		-- the aggregates of one scan see the rows in one order, so the
		-- arrays line up (one event per operation: no order to keep)
		SELECT payflow._outbox_write_all(array_agg(e.event_id), array_agg(e.operation_id),
										 array_agg(e.payment_id), array_agg(e.event_type),
										 array_agg(e.destination), array_agg(e.body)) AS written
		  FROM e
	)
	-- ev is read here, so it runs (once, for all the events)
	SELECT s.n, s.operation_id,
		   jsonb_build_object('action', 'completed', 'status', d.done_status,
							  'eventType', coalesce(n.request_event, v_completed_event), 'eventId', s.event_id)
	  FROM s LEFT JOIN ev ON true;
END
$$;
