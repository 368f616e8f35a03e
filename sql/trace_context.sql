-- W3C trace context, stored once with each operation (issue 29,
-- trace_context.sql): submit takes the caller's traceparent or starts a
-- trace; status() shows its trace id; every event of the operation
-- carries it as the SQS attribute "traceparent".

-- bad input: 22023, nothing written
SELECT * FROM pf_try($$SELECT payflow.submit('t-bad', '{"amount": 1}', traceparent => 'not-a-trace')$$);
SELECT * FROM pf_try($$SELECT payflow.submit('t-bad', '{"amount": 1}',
	traceparent => '00-00000000000000000000000000000000-00f067aa0ba902b7-01')$$);	-- trace id all zeros
SELECT * FROM pf_try($$SELECT payflow.submit('t-bad', '{"amount": 1}',
	traceparent => '00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01')$$);	-- parent id all zeros
SELECT * FROM pf_try($$SELECT payflow.submit('t-bad', '{"amount": 1}',
	traceparent => '00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01')$$);	-- upper case
SELECT * FROM pf_try($$SELECT payflow.submit('t-bad', '{"amount": 1}',
	traceparent => 'ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01')$$);	-- version ff
SELECT * FROM pf_try($$SELECT payflow.submit('t-bad', '{"amount": 1}',
	traceparent => '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra')$$);	-- 00 has no more fields
SELECT * FROM pf_try($$SELECT payflow.submit_ref('t-bad', 's3', 'k', 'sha256:' || repeat('0', 64), 1,
	traceparent => '00-4bf92f3577b34da6a3ce929d0e0e4736')$$);
SELECT * FROM pf_try($$SELECT payflow.submit_many('[{"payment_id": "t-ok", "details": {}},
	{"payment_id": "t-bad", "details": {}, "traceparent": "00-xyz"}]')$$);
SELECT * FROM pf_try($$SELECT payflow.submit_many('[{"payment_id": "t-bad", "details": {}, "traceparent": 7}]')$$);
SELECT count(*) AS written FROM payflow.operations WHERE payment_id IN ('t-bad', 't-ok');

-- the caller's context is stored as given; status() shows its trace id
SELECT payflow.submit('t-1', '{"amount": 1}',
	traceparent => '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01') AS op1 \gset
SELECT payflow._traceparent_text(traceparent) AS traceparent FROM payflow.operations WHERE id = :'op1';
SELECT payflow.status(:'op1') ->> 'traceId' AS trace_id;
-- a later version is read as 00 and stored so (extra fields dropped)
SELECT payflow.submit('t-2', '{"amount": 1}',
					  traceparent => 'cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-what-comes-next') AS op2 \gset
SELECT payflow._traceparent_text(traceparent) AS traceparent FROM payflow.operations WHERE id = :'op2';
-- the same key again: the operation keeps the trace of its first submit
SELECT payflow.submit('t-1', '{"amount": 1}',
	traceparent => '00-11111111111111111111111111111111-2222222222222222-01') = :'op1' AS same_operation;
SELECT payflow.status(:'op1') ->> 'traceId' AS trace_id;

-- none given: a new trace each, sampled
SELECT count(payflow.submit('t-new-' || n, '{"amount": 1}')) AS submitted FROM generate_series(1, 20) n;
SELECT count(*) AS operations, count(DISTINCT payflow._trace_id(traceparent)) AS traces,
	   bool_and(payflow._traceparent_text(traceparent) ~ '^00-[0-9a-f]{32}-[0-9a-f]{16}-01$'
				AND payflow._traceparent_valid(payflow._traceparent_text(traceparent))) AS well_formed
  FROM payflow.operations WHERE payment_id LIKE 't-new-%';

-- submit_ref and submit_many take it too
SELECT payflow.submit_ref('t-ref', 's3', 'requests/t-ref', 'sha256:' || repeat('a', 64), 10,
						  traceparent => '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01') AS op_ref \gset
SELECT payflow._traceparent_text(traceparent) AS traceparent FROM payflow.operations WHERE id = :'op_ref';
SELECT count(*) AS submitted FROM payflow.submit_many('[{"payment_id": "t-many-1", "details": {},
		"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"},
	{"payment_id": "t-many-2", "details": {}}]');
SELECT payment_id, traceparent IS NOT NULL AS has_trace,
	   payflow._traceparent_text(traceparent) = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00' AS as_given
  FROM payflow.operations WHERE payment_id LIKE 't-many-%' ORDER BY 1;

-- kept as its 25 bytes (trace id, parent id, flags), shown as the text
SELECT octet_length(traceparent) AS stored_bytes, payflow._trace_id(traceparent) AS trace_id
  FROM payflow.operations WHERE id = :'op1';

-- the operation's events carry it as the SQS attribute the workers read
BEGIN;
SELECT c.attributes ->> 'traceparent' AS traceparent_attribute
  FROM payflow.outbox_claim(1000, 'relay-trace') c
 WHERE c.event_id = (SELECT event_id FROM payflow.outbox WHERE operation_id = :'op1');
ROLLBACK;
