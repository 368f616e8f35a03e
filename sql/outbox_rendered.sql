-- The outbox log renders the bodies of the events the hot paths write
-- (submit, submit_many, a fast completion's next request and completed
-- event) from the operation's rows instead of keeping them: each renders
-- to the body the relays send (the work list's), and the webhook check
-- accepts exactly that body.  Events of the other paths (a failure, a
-- retry) keep theirs.
SELECT count(payflow.submit('rendered-' || g, jsonb_build_object('amount', g),
							correlation_id => CASE WHEN g % 2 = 0 THEN 'corr-' || g END)) AS submitted
  FROM generate_series(1, 4) g;
SELECT count(*) AS submitted_many FROM payflow.submit_many(
	'[{"payment_id": "rendered-m1", "details": {"amount": 5}},
	  {"payment_id": "rendered-m2", "details": {"amount": 6}, "correlation_id": "corr-m2"}]');
SELECT array_agg(id ORDER BY payment_id) AS ops FROM payflow.operations WHERE payment_id LIKE 'rendered-%' \gset

-- each operation's events as the log renders them and as the relays get
-- them: the body, and the type, queue and message group (the log keeps
-- none of the three of a rendered event: _outbox_event_route)
CREATE FUNCTION pg_temp.rendered_events(p_ops text[])
	RETURNS TABLE (event_type text, rendered smallint, events bigint, body_kept bigint, same_body bigint,
				   route_kept bigint, same_route bigint)
	LANGUAGE sql AS $$
	SELECT r.event_type, l.rendered, count(*), count(l.body),
		   count(*) FILTER (WHERE payflow._outbox_event_body(l) = w.body),
		   count(*) FILTER (WHERE l.event_type IS NOT NULL OR l.destination IS NOT NULL
								  OR l.message_group_id IS NOT NULL),
		   count(*) FILTER (WHERE (r.event_type, r.destination, r.message_group_id)
								  = (w.event_type, w.destination, w.message_group_id))
	  FROM payflow.outbox w JOIN payflow.outbox_events l ON l.seq = w.seq
	 CROSS JOIN LATERAL payflow._outbox_event_route(l) r
	 WHERE w.operation_id = ANY (p_ops)
	 GROUP BY 1, 2 ORDER BY 2, 1
$$;
SELECT * FROM pg_temp.rendered_events(:'ops');

-- through the three steps in batches (the fast paths); the fourth
-- operation's payment fails for good (its OperationFailed keeps its body),
-- the fifth's waits for its retry
SELECT count(*) AS claimed FROM payflow.claim_steps('PROCESS_PAYMENT', 'rw', :'ops', 60);
SELECT c.answer ->> 'action' AS action, count(*)
  FROM payflow.fail_steps('PROCESS_PAYMENT', 'rw', jsonb_build_array(
	jsonb_build_object('operationId', (:'ops'::text[])[4], 'error', jsonb_build_object('code', 'DECLINED'),
					   'retryable', false),
	jsonb_build_object('operationId', (:'ops'::text[])[5], 'error', jsonb_build_object('code', 'HYT00'),
					   'retryable', true))) c
 GROUP BY 1 ORDER BY 1;
SELECT (:'ops'::text[])[1:3] || (:'ops'::text[])[6:6] AS going \gset
SELECT count(*) AS completed FROM payflow.complete_steps('PROCESS_PAYMENT', 'rw',
	(SELECT jsonb_agg(jsonb_build_object('operationId', id, 'result', jsonb_build_object('charge', id))) FROM unnest(:'going'::text[]) id));
SELECT count(*) AS claimed FROM payflow.claim_steps('POST_PROCESS', 'rw', :'going', 60);
SELECT count(*) AS completed FROM payflow.complete_steps('POST_PROCESS', 'rw',
	(SELECT jsonb_agg(jsonb_build_object('operationId', id, 'result', jsonb_build_object('invoiceInput', id))) FROM unnest(:'going'::text[]) id));
SELECT count(*) AS claimed FROM payflow.claim_steps('CREATE_INVOICE', 'rw', :'going', 60);
SELECT count(*) AS completed FROM payflow.complete_steps('CREATE_INVOICE', 'rw',
	(SELECT jsonb_agg(jsonb_build_object('operationId', id, 'result', jsonb_build_object('invoiceId', 'inv-' || id))) FROM unnest(:'going'::text[]) id));
SELECT * FROM pg_temp.rendered_events(:'ops');

-- a fast completion keeps its result's keyed checksum and size, not the
-- reference: the steps view renders it, payload_get takes it, and it is the
-- one the next step's request carried
SELECT s.step_name, r.result_ref IS NULL AS ref_not_kept, octet_length(r.result_mac) AS mac_bytes,
	   CASE WHEN s.result_ref IS NOT NULL
			THEN convert_from(payflow.payload_get(s.result_ref), 'UTF8')::jsonb = s.result END AS payload_ok,
	   (SELECT w.body -> nd.input_field = s.result_ref
		  FROM payflow.step_definitions d, payflow.step_definitions nd, payflow.outbox w
		 WHERE d.pipeline_version = o.pipeline_version AND d.step_name = s.step_name
		   AND nd.pipeline_version = d.pipeline_version AND nd.position = d.position + 1
		   AND w.operation_id = o.id AND w.event_type = nd.request_event) AS handed_on
  FROM payflow.steps s JOIN payflow.step_results r USING (operation_id, step_name)
  JOIN payflow.operations o ON o.id = s.operation_id
 WHERE s.operation_id = (:'ops'::text[])[2] ORDER BY s.created_at;

-- the webhook check takes the completed event's body as the relays sent it,
-- and refuses it changed (PF008)
SELECT count(payflow._require_published(w.event_id, w.operation_id, w.body::text)) AS published
  FROM payflow.outbox w WHERE w.operation_id = ANY (:'ops') AND w.event_type = 'OperationCompleted';
SELECT format($$SELECT payflow._require_published(%L, %L, %L)$$, w.event_id, w.operation_id,
			  jsonb_set(w.body, '{result,invoiceId}', '"inv-forged"')::text) AS forged
  FROM payflow.outbox w WHERE w.operation_id = (:'ops'::text[])[1] AND w.event_type = 'OperationCompleted' \gset
SELECT * FROM pf_try(:'forged');

-- an operation gone (purged while its events waited): nothing to render
BEGIN;
DELETE FROM payflow.operations WHERE id = (:'ops'::text[])[1];
SELECT l.rendered, payflow._outbox_event_body(l) IS NULL AS no_body,
	   (payflow._outbox_event_route(l)).event_type IS NULL AS no_route
  FROM payflow.outbox_events l WHERE l.operation_id = (:'ops'::text[])[1] ORDER BY l.seq;
ROLLBACK;

DELETE FROM payflow.outbox WHERE operation_id = ANY (:'ops');
