-- payflow: admin_operation(), the console's page of one operation (0.5.0:
-- a file of its own, so that the update script takes the same definition;
-- included before admin.sql, whose grants name it).

-- One operation for the operator: its fields (no details, no result), its
-- transitions, every step with its attempts (times, worker, error), the
-- payloads' references (never their contents) and the events published
-- for it with their SQS message ids, or waiting in the outbox.  PF003 for
-- an unknown id, 22023 (parameter "id") for a malformed one.
CREATE OR REPLACE FUNCTION payflow.admin_operation(admin_key text, operation_id text) RETURNS jsonb
	LANGUAGE plpgsql STABLE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	k payflow.api_keys := payflow._admin_key(admin_key);
	o payflow.operations;
BEGIN
	IF operation_id IS NULL OR operation_id !~ '^pay_[0-9A-HJKMNP-TV-Z]{26}$' THEN
		PERFORM payflow._admin_bad('id', 'not an operation id ("pay_" and 26 characters of Crockford base32)');
	END IF;
	SELECT * INTO o FROM payflow.operations x WHERE x.id = admin_operation.operation_id;
	IF NOT FOUND THEN
		PERFORM payflow._unknown_operation(operation_id);
	END IF;
	RETURN payflow._admin_operation_row(o) || jsonb_build_object(
		'idempotencyKey', o.idempotency_key,
		'traceId', payflow._trace_id(o.traceparent),	-- (trace_context.sql)
		'request', payflow._request_ref(o.id, o.request_ref, o.request_mac, o.request_size),
		'actions', jsonb_build_object('replay', o.status = 'FAILED', 'cancel', o.status = 'PENDING'),
		'transitions', (
			SELECT coalesce(jsonb_agg(jsonb_build_object(
					   'id', h.id, 'at', payflow._iso(h.at), 'from', h.from_status, 'to', h.to_status,
					   'reason', h.reason, 'actor', h.actor) ORDER BY h.id), '[]')
			  FROM payflow._operation_history h WHERE h.operation_id = o.id),
		'steps', (
			SELECT coalesce(jsonb_agg(jsonb_build_object(
					   'step', s.step_name, 'status', s.status, 'attempt', s.attempt,
					   'worker', s.lease_owner, 'claimedAt', payflow._iso(s.claimed_at),
					   'leaseExpiresAt', payflow._iso(s.lease_expires_at),
					   'nextAttemptAt', payflow._iso(s.next_attempt_at), 'lastError', s.last_error,
					   'input', s.input_ref, 'resultRef', s.result_ref,
					   'createdAt', payflow._iso(s.created_at), 'finishedAt', payflow._iso(s.finished_at))
					   ORDER BY d.position), '[]')
			  FROM payflow.steps s
			  JOIN payflow.step_definitions d ON d.pipeline_version = o.pipeline_version AND d.step_name = s.step_name
			 WHERE s.operation_id = o.id),
		-- the attempts that ended without success, then each step's
		-- successful one, which is its steps row
		'attempts', (
			SELECT coalesce(jsonb_agg(jsonb_build_object(
					   'step', a.step_name, 'attempt', a.attempt, 'worker', a.worker,
					   'startedAt', payflow._iso(a.started_at), 'finishedAt', payflow._iso(a.finished_at),
					   'outcome', a.outcome, 'error', a.error) ORDER BY a.finished_at, d.position, a.n), '[]')
			  FROM (SELECT x.step_name, x.attempt, x.worker, x.started_at, x.finished_at, x.outcome, x.error, x.id AS n
					  FROM payflow.step_attempts x WHERE x.operation_id = o.id
					UNION ALL
					SELECT r.step_name, r.attempt, r.lease_owner, r.claimed_at, r.finished_at, 'SUCCEEDED', NULL, NULL
					  FROM payflow.step_results r WHERE r.operation_id = o.id) a
			  LEFT JOIN payflow.step_definitions d ON d.pipeline_version = o.pipeline_version AND d.step_name = a.step_name),
		'payloads', (
			SELECT coalesce(jsonb_agg(jsonb_build_object(
					   'store', 'pg', 'key', p.key, 'checksum', payflow._checksum(p.content),
					   'size', octet_length(p.content),
					   'createdAt', payflow._iso(p.created_at)) ORDER BY p.key), '[]')
			  FROM payflow.payloads p
			 WHERE p.key >= payflow._payload_key(o.id, '') AND p.key < payflow._payload_keys_end(o.id)
			   AND NOT payflow._payloads_past_retention(o.status, o.terminal_at)),
		'events', (
			SELECT coalesce(jsonb_agg(e.doc ORDER BY e.at, e.doc ->> 'eventId'), '[]')
			  FROM (SELECT p.published_at AS at, jsonb_build_object(
							   'eventId', l.event_id, 'eventType', r.event_type, 'destination', r.destination,
							   'messageId', p.message_id, 'publishedAt', payflow._iso(p.published_at)) AS doc
					  FROM payflow.outbox_events l
					  CROSS JOIN LATERAL payflow._outbox_event_route(l) r
					  -- its batch: block ranges of both seqs (outbox_batches_seq_idx)
					  CROSS JOIN LATERAL (
							SELECT b.published_at, b.message_ids[array_position(b.seqs, l.seq)] AS message_id
							  FROM payflow.outbox_batches b
							 WHERE b.first_seq <= l.seq AND b.last_seq >= l.seq AND l.seq = ANY (b.seqs)
							 LIMIT 1) p
					 WHERE l.operation_id = o.id
					UNION ALL
					SELECT x.created_at, jsonb_build_object(
							   'eventId', x.event_id, 'eventType', x.event_type, 'destination', x.destination,
							   'messageId', NULL, 'publishedAt', NULL, 'pendingSince', payflow._iso(x.created_at),
							   'attempts', x.attempts)
					  FROM payflow.outbox x WHERE x.operation_id = o.id) e));
END
$$;
