-- payflow.submit_many: many submits in one statement (0.5.0).
--
-- An application (or the HTTP edge) with a burst of requests pays one
-- round trip and one commit for all of them instead of one each: the
-- commit's WAL flush and the per-statement start-ups are most of what a
-- single submit() costs.  Each item gets submit's checks (the same helpers,
-- the same errors), limits, tenant and idempotency, and the same rows: an
-- item whose key was used before (or earlier in the same array) with the
-- same details names that operation; with other details it is PF002.
--
-- All or nothing: the first bad item raises its own SQLSTATE, its message
-- prefixed with its place ("requests[3].details must be a JSON object"),
-- and no item of the array is submitted.  A caller fixes that item and
-- sends the array again; the items that were fine are idempotent anyway.

-- The most items one call takes: enough to amortise the commit, small
-- enough that one bad array does not hold a transaction for long.
CREATE FUNCTION payflow._submit_many_max() RETURNS integer
	LANGUAGE sql IMMUTABLE
	RETURN 1000;

-- Raises 22023 (or 22004 for a null) for an item that is not a JSON object
-- of the six known fields, with strings where strings go, a whole number
-- for priority and a W3C traceparent for traceparent.
CREATE FUNCTION payflow._require_submit_item(item jsonb) RETURNS void
	LANGUAGE plpgsql IMMUTABLE
	AS $$
DECLARE
	v_key text;
BEGIN
	IF item IS NULL OR jsonb_typeof(item) = 'null' THEN
		RAISE EXCEPTION 'must not be null' USING ERRCODE = 'null_value_not_allowed';
	ELSIF jsonb_typeof(item) <> 'object' THEN
		RAISE EXCEPTION 'must be a JSON object' USING ERRCODE = 'invalid_parameter_value',
			DETAIL = format('Got a JSON %s.', jsonb_typeof(item));
	END IF;
	FOR v_key IN SELECT jsonb_object_keys(item) LOOP
		IF v_key NOT IN ('payment_id', 'details', 'idempotency_key', 'correlation_id', 'priority',
						 'traceparent') THEN
			RAISE EXCEPTION 'has an unknown field "%"', v_key USING ERRCODE = 'invalid_parameter_value',
				HINT = 'An item has payment_id, details, and optionally idempotency_key, correlation_id, priority and traceparent.';
		END IF;
		IF v_key = 'priority' THEN
			IF jsonb_typeof(item -> v_key) NOT IN ('number', 'null')
			   OR (jsonb_typeof(item -> v_key) = 'number' AND (item ->> v_key)::numeric <> trunc((item ->> v_key)::numeric)) THEN
				RAISE EXCEPTION '.priority must be a whole JSON number' USING ERRCODE = 'invalid_parameter_value',
					DETAIL = format('Got %s.', item -> v_key);
			END IF;
			PERFORM payflow._require_priority(greatest(least((item ->> v_key)::numeric, 1000), -1000)::integer);
		ELSIF v_key <> 'details' AND jsonb_typeof(item -> v_key) NOT IN ('string', 'null') THEN
			RAISE EXCEPTION '.% must be a JSON string', v_key USING ERRCODE = 'invalid_parameter_value',
				DETAIL = format('Got a JSON %s.', jsonb_typeof(item -> v_key));
		ELSIF v_key = 'traceparent' THEN
			PERFORM payflow._traceparent(item ->> v_key);
		END IF;
	END LOOP;
END
$$;

-- Raises an item's error again, its message prefixed with the item's place:
-- "requests[3].details must be a JSON object" for submit's messages (they
-- start with the argument's name), "requests[3] must be a JSON object" for
-- the item's own, "requests[3]: idempotency key ..." for the others.
CREATE FUNCTION payflow._raise_for_item(p_item integer, p_state text, p_message text, p_detail text,
										p_hint text) RETURNS void
	LANGUAGE plpgsql
	AS $$
DECLARE
	-- item 0: the statement that submits them all failed, no item in particular
	v_message text := CASE WHEN p_item = 0 THEN 'requests' ELSE format('requests[%s]', p_item) END ||
		CASE WHEN p_message ~ '^(payment_id|details|idempotency_key|correlation_id|priority|traceparent) ' THEN '.'
			 WHEN p_message ~ '^(must|has) ' THEN ' '
			 WHEN left(p_message, 1) = '.' THEN ''
			 ELSE ': ' END || p_message;
BEGIN
	-- GET STACKED DIAGNOSTICS gives '' for a missing detail or hint
	IF p_detail <> '' AND p_hint <> '' THEN
		RAISE EXCEPTION '%', v_message USING ERRCODE = p_state, DETAIL = p_detail, HINT = p_hint;
	ELSIF p_detail <> '' THEN
		RAISE EXCEPTION '%', v_message USING ERRCODE = p_state, DETAIL = p_detail;
	ELSIF p_hint <> '' THEN
		RAISE EXCEPTION '%', v_message USING ERRCODE = p_state, HINT = p_hint;
	END IF;
	RAISE EXCEPTION '%', v_message USING ERRCODE = p_state;
END
$$;

-- PF002 for an item whose idempotency key names an operation created with
-- other details: submit's error (_create_operation), word for word.
CREATE FUNCTION payflow._raise_key_reused(p_key text, p_operation_id text) RETURNS void
	LANGUAGE plpgsql
	AS $$
BEGIN
	RAISE EXCEPTION 'idempotency key "%" was already used with other details', p_key
		USING ERRCODE = 'PF002',
			  DETAIL = format('Operation %s was created with this key.', p_operation_id),
			  HINT = 'Use a new idempotency key for a new payment request.';
END
$$;

-- Creates an operation for each request of the array (or finds the one its
-- idempotency key names), in one statement; one row per item, in order.
--
-- The first pass checks every item, in one query, as submit() does
-- (the same helpers raise the same errors), so the error names the first
-- bad item.  Then one statement writes what submit writes for each of
-- them, set-based: operations (each with its first step open), payloads, events, a
-- statement each for all items (calling submit() per item cost an executor
-- start-up per table per item, and ran at 2x single submits in make bench
-- instead of the 5x aimed at).  The rows go in in the order of their
-- idempotency keys: each holds its key's index entry until the commit, so
-- two arrays naming the same keys in opposite orders would otherwise
-- deadlock (40P01); in one order, one waits for the other.  An item whose
-- key was taken before (or earlier in the array) is found afterwards and
-- its request compared, as submit does (_same_request): PF002 names the
-- first such item in key order.
CREATE FUNCTION payflow.submit_many(requests jsonb)
	RETURNS TABLE (item integer, payment_id text, operation_id text)
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	-- Plans for any tenant, not for this one: a custom plan for a tenant the
	-- statistics had not seen (a new tenant's burst) looked each item up by
	-- operations_tenant_id_idx, reading every operation of the tenant per
	-- item (1,000 items: 0.15 s for the first array, 2.2 s for the tenth,
	-- fair_shares.sh); the generic plan takes the unique key.
	SET plan_cache_mode = force_generic_plan
	AS $$
DECLARE
	v_n integer;
	v_i integer := 0;
	v_item jsonb;
	v_max_bytes bigint := payflow._setting('payload_max_bytes')::bigint;
	v_tenant text := payflow._current_tenant();
	v_payments text[] := ARRAY[]::text[];
	v_keys text[] := ARRAY[]::text[];
	v_correlations text[] := ARRAY[]::text[];
	v_contents bytea[] := ARRAY[]::bytea[];
	v_macs bytea[] := ARRAY[]::bytea[];
	v_priorities smallint[] := ARRAY[]::smallint[];
	v_traces text[] := ARRAY[]::text[];
	v_ids text[] := ARRAY[]::text[];
	v_first text;
	v_events integer;
	v_state text;
	v_message text;
	v_detail text;
	v_hint text;
BEGIN
	IF requests IS NULL THEN
		RAISE EXCEPTION 'requests must not be null' USING ERRCODE = 'null_value_not_allowed';
	ELSIF jsonb_typeof(requests) <> 'array' THEN
		RAISE EXCEPTION 'requests must be a JSON array of request objects'
			USING ERRCODE = 'invalid_parameter_value', DETAIL = format('Got a JSON %s.', jsonb_typeof(requests));
	END IF;
	v_n := jsonb_array_length(requests);
	IF v_n > payflow._submit_many_max() THEN
		RAISE EXCEPTION 'requests holds % items; the limit is %', v_n, payflow._submit_many_max()
			USING ERRCODE = 'program_limit_exceeded', HINT = 'Split the array.';
	END IF;
	-- One block for the whole array, not one per item: a subtransaction
	-- each would cost more than the items.  v_i says which item failed.
	BEGIN
		-- pass 1: submit's own checks as one expression per item, in one
		-- query (a PL/pgSQL loop over the items cost more than their
		-- inserts); only the first bad item takes the helpers, which raise
		SELECT min(r.o) INTO v_i
		  FROM jsonb_array_elements(requests) WITH ORDINALITY r(e, o)
		 WHERE CASE WHEN jsonb_typeof(r.e) IS DISTINCT FROM 'object' THEN true
				   ELSE NOT r.e ?& ARRAY['payment_id', 'details']
						OR EXISTS (SELECT FROM jsonb_object_keys(r.e) k
									WHERE k NOT IN ('payment_id', 'details', 'idempotency_key', 'correlation_id', 'priority',
						 'traceparent'))
						OR jsonb_typeof(r.e -> 'payment_id') <> 'string'
						OR jsonb_typeof(r.e -> 'idempotency_key') NOT IN ('string', 'null')
						OR jsonb_typeof(r.e -> 'correlation_id') NOT IN ('string', 'null')
						OR jsonb_typeof(r.e -> 'traceparent') NOT IN ('string', 'null')
						OR NOT payflow._traceparent_valid(r.e ->> 'traceparent')	-- (NULL when absent: not bad)
						OR r.e ->> 'payment_id' = '' OR length(r.e ->> 'payment_id') > 255
						OR r.e ->> 'payment_id' ~ '[[:cntrl:]\uFFFE\uFFFF]'
						OR r.e ->> 'idempotency_key' = '' OR length(r.e ->> 'idempotency_key') > 255
						OR r.e ->> 'idempotency_key' ~ '[[:cntrl:]\uFFFE\uFFFF]'
						OR r.e ->> 'correlation_id' = '' OR length(r.e ->> 'correlation_id') > 255
						OR r.e ->> 'correlation_id' ~ '[[:cntrl:]\uFFFE\uFFFF]'
						OR jsonb_typeof(r.e -> 'details') IS DISTINCT FROM 'object'
						OR octet_length(convert_to((r.e -> 'details')::text, 'UTF8')) > v_max_bytes
						OR CASE coalesce(jsonb_typeof(r.e -> 'priority'), 'null')
								WHEN 'null' THEN false
								WHEN 'number' THEN (r.e ->> 'priority')::numeric NOT BETWEEN -100 AND 100
												   OR (r.e ->> 'priority')::numeric <> trunc((r.e ->> 'priority')::numeric)
								ELSE true END END;
		IF v_i IS NOT NULL THEN
			v_item := requests -> (v_i - 1);
			PERFORM payflow._require_submit_item(v_item);
			PERFORM payflow._require_submit(v_item ->> 'payment_id', v_item ->> 'idempotency_key',
											v_item ->> 'correlation_id');
			PERFORM payflow._require_object('details', v_item -> 'details');
			PERFORM payflow._require_size('details', octet_length(convert_to((v_item -> 'details')::text, 'UTF8')));
			RAISE EXCEPTION 'must be a valid request' USING ERRCODE = 'invalid_parameter_value';	-- not reached
		END IF;
		-- each request's keyed checksum made here, once: the operation keeps
		-- it (tables.sql) and the idempotency check below compares it (the
		-- key read once, not by a _content_mac call per item: content_mac.sql)
		SELECT coalesce(array_agg(r.e ->> 'payment_id' ORDER BY r.o), ARRAY[]::text[]),
			   coalesce(array_agg(coalesce(r.e ->> 'idempotency_key', r.e ->> 'payment_id') ORDER BY r.o), ARRAY[]::text[]),
			   coalesce(array_agg(r.e ->> 'correlation_id' ORDER BY r.o), ARRAY[]::text[]),
			   coalesce(array_agg(c.content ORDER BY r.o), ARRAY[]::bytea[]),
			   coalesce(array_agg(payflow._mac_with(k.inner_pad, k.outer_pad, c.content) ORDER BY r.o), ARRAY[]::bytea[]),
			   coalesce(array_agg(coalesce((r.e ->> 'priority')::numeric, 0)::smallint ORDER BY r.o), ARRAY[]::smallint[]),
			   coalesce(array_agg(r.e ->> 'traceparent' ORDER BY r.o), ARRAY[]::text[])
		  INTO v_payments, v_keys, v_correlations, v_contents, v_macs, v_priorities, v_traces
		  FROM jsonb_array_elements(requests) WITH ORDINALITY r(e, o)
		 CROSS JOIN LATERAL (SELECT convert_to((r.e -> 'details')::text, 'UTF8') AS content) c
		 CROSS JOIN payflow._content_key k;
		v_i := 0;

		-- pass 2: all of them at once, in key order; a taken key is skipped
		WITH f AS MATERIALIZED (
			SELECT d.*,
				   -- a first step with a limit is held for a slot (step_dispatch.sql)
				   CASE WHEN EXISTS (SELECT FROM payflow.step_limits l WHERE l.step_name = d.step_name)
						THEN d.step_name END AS held_step
			  FROM payflow.step_definitions d
			 WHERE d.pipeline_version = payflow._pipeline_version() AND d.position = 1
		), ids AS MATERIALIZED (
			-- volatile in the select list: a new id and event id per item
			SELECT r.*, payflow._new_operation_id() AS id, gen_random_uuid() AS event_id,
				   payflow._traceparent(r.given_trace) AS traceparent
			  FROM unnest(v_payments, v_keys, v_correlations, v_contents, v_macs, v_priorities, v_traces) WITH ORDINALITY
				   AS r(payment_id, key, correlation_id, content, mac, priority, given_trace, i)
		), it AS MATERIALIZED (
			-- each request kept as its checksum and size (tables.sql)
			SELECT ids.*, payflow._request_ref(ids.id, NULL, ids.mac, octet_length(ids.content)) AS ref
			  FROM ids
		), op AS (
			INSERT INTO payflow.operations (id, tenant, payment_id, idempotency_key,
											correlation_id, status, current_step, pipeline_version,
											submitted_by, priority, held_step, traceparent, request_mac, request_size)
			SELECT it.id, v_tenant, it.payment_id, it.key,
				   it.correlation_id, f.ready_status, f.step_name, f.pipeline_version, session_user,
				   it.priority, f.held_step, it.traceparent, it.mac, octet_length(it.content)
			  FROM it, f
			 -- (a sub-select: evaluated once, not once an item)
			 WHERE (SELECT payflow._within_quota(v_tenant))	-- (tenant_quotas.sql)
			 ORDER BY it.key COLLATE "C", it.i
			ON CONFLICT ON CONSTRAINT operations_idempotency_key DO NOTHING
			RETURNING id, status, current_step
		), payload AS (
			INSERT INTO payflow.payloads (key, content)
			SELECT it.ref ->> 'key', it.content
			  FROM op JOIN it USING (id)
		), outbox_in AS (
			-- their first step's requests (the log renders them, as submit's)
			SELECT it.event_id, it.id AS operation_id, it.payment_id AS group_key, f.request_event AS event_type,
				   f.destination,
				   payflow._event_body(it.event_id, it.id, it.payment_id, it.correlation_id, f.request_event, 1,
									   jsonb_build_object(f.input_field, it.ref)) AS body,
				   f.position::smallint AS rendered,
				   row_number() OVER (ORDER BY it.key COLLATE "C", it.i) AS n
			  FROM op JOIN it USING (id), f
			 WHERE f.held_step IS NULL
		),
		--@@ include outbox_write_ctes.sql @@
		SELECT count(*) INTO v_events FROM outbox_work;	-- (the statement runs for its writes)
		-- held for a slot: those that have one now go (step_dispatch.sql)
		SELECT l.step_name INTO v_first
		  FROM payflow.step_definitions d JOIN payflow.step_limits l ON l.step_name = d.step_name
		 WHERE d.pipeline_version = payflow._pipeline_version() AND d.position = 1;
		IF v_first IS NOT NULL THEN
			PERFORM payflow._dispatch_held(v_first);
		END IF;

		-- Each item's operation, made now or before, in one probe per item
		-- (LIMIT 1 in the LATERAL keeps it an index probe: joined as a set,
		-- the planner hashed the whole operations table), and the first
		-- item in key order whose key names other details: PF002
		SELECT array_agg((x.o).id ORDER BY r.i),
			   (array_agg(r.i ORDER BY r.key COLLATE "C", r.i)
				  FILTER (WHERE NOT payflow._same_request(x.o, r.payment_id, NULL, r.content, r.mac)))[1]
		  INTO v_ids, v_i
		  FROM unnest(v_payments, v_keys, v_contents, v_macs) WITH ORDINALITY AS r(payment_id, key, content, mac, i)
		  CROSS JOIN LATERAL (SELECT o FROM payflow.operations o
							   WHERE o.tenant = v_tenant AND o.idempotency_key = r.key LIMIT 1) x;
		IF coalesce(cardinality(v_ids), 0) <> coalesce(cardinality(v_keys), 0) THEN
			-- an item neither made nor there before: the tenant is past its quota
			v_i := 0;
			PERFORM payflow._quota_exceeded(v_tenant);
		ELSIF v_i IS NOT NULL THEN
			PERFORM payflow._raise_key_reused(v_keys[v_i], v_ids[v_i]);
		END IF;
	EXCEPTION WHEN OTHERS THEN
		GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_message = MESSAGE_TEXT,
			v_detail = PG_EXCEPTION_DETAIL, v_hint = PG_EXCEPTION_HINT;
		PERFORM payflow._raise_for_item(v_i, v_state, v_message, v_detail, v_hint);
	END;
	RETURN QUERY
		SELECT r.i::integer, r.payment_id, r.id
		  FROM unnest(v_payments, v_ids) WITH ORDINALITY AS r(payment_id, id, i)
		 ORDER BY r.i;
END
$$;

REVOKE ALL ON FUNCTION payflow.submit_many(jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION payflow._submit_many_max() FROM PUBLIC;
REVOKE ALL ON FUNCTION payflow._require_submit_item(jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION payflow._raise_for_item(integer, text, text, text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION payflow._raise_key_reused(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION payflow.submit_many(jsonb) TO payflow_app;

COMMENT ON FUNCTION payflow.submit_many(jsonb) IS
	'submit for each item of a JSON array ({payment_id, details, idempotency_key?, correlation_id?, priority?, traceparent?}, at most 1000) in one statement: one row (item, payment_id, operation_id) per item, in order; all or nothing, the first bad item''s error names its place.';
