-- payflow: admin_dead_letters(), the console's dead letters (0.5.0: a file
-- of its own, so that the update script takes the same definition;
-- included before admin.sql, whose grants name it).

-- Dead letters, newest first: open ("true" default, "false", "all"),
-- after (an id), limit.  No message bodies (they may hold payment details).
CREATE OR REPLACE FUNCTION payflow.admin_dead_letters(admin_key text, filters jsonb DEFAULT '{}') RETURNS jsonb
	LANGUAGE plpgsql STABLE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	k payflow.api_keys := payflow._admin_key(admin_key);
	f jsonb := payflow._admin_filters(filters, ARRAY['open', 'after', 'limit']);
	v_limit integer := payflow._admin_limit(f, 50, 200);
	v_after bigint := payflow._admin_id(f, 'after');
	v_open text := coalesce(f ->> 'open', 'true');
	v_rows jsonb;
BEGIN
	IF v_open NOT IN ('true', 'false', 'all') THEN
		PERFORM payflow._admin_bad('open', 'must be true, false or all');
	END IF;
	-- newest first by the primary key; open ones are most of what is kept
	SELECT coalesce(jsonb_agg(jsonb_build_object(
			   'id', d.id, 'source', d.source, 'operationId', d.operation_id, 'step', d.step_name,
			   'queue', d.queue, 'error', d.error, 'attempts', d.attempts,
			   'createdAt', payflow._iso(d.created_at), 'replayedAt', payflow._iso(d.replayed_at),
			   'replayable', d.replayed_at IS NULL AND d.source = 'step' AND o.status = 'FAILED',
			   'operationStatus', o.status,
			   -- the operation's trace (trace_context.sql); a message's own, as its worker logged it
			   'traceId', coalesce(payflow._trace_id(o.traceparent), d.error ->> 'traceId')) ORDER BY d.id DESC), '[]')
	  INTO v_rows
	  FROM (SELECT * FROM payflow.dead_letters x
			 WHERE (v_after IS NULL OR x.id < v_after)
			   AND (v_open = 'all' OR (x.replayed_at IS NULL) = (v_open = 'true'))
			 ORDER BY x.id DESC LIMIT v_limit + 1) d
	  LEFT JOIN payflow.operations o ON o.id = d.operation_id;
	RETURN jsonb_build_object(
		'items', CASE WHEN jsonb_array_length(v_rows) > v_limit THEN v_rows - v_limit ELSE v_rows END,
		'next', CASE WHEN jsonb_array_length(v_rows) > v_limit THEN v_rows -> (v_limit - 1) ->> 'id' END);
END
$$;
