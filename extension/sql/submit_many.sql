-- payflow.submit_many: many submits in one statement (0.5.0).
--
-- An application (or the HTTP edge) with a burst of requests pays one
-- round trip and one commit for all of them instead of one each: the
-- commit's WAL flush is most of what a single submit() costs.  Each item
-- goes through submit() itself, so the checks, the limits, the tenant and
-- the idempotency are exactly submit's, item by item: an item whose key was
-- used before (or earlier in the same array) with the same details names
-- that operation; with other details it is PF002.
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
-- of the four known fields, with strings where strings go.
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
		IF v_key NOT IN ('payment_id', 'details', 'idempotency_key', 'correlation_id') THEN
			RAISE EXCEPTION 'has an unknown field "%"', v_key USING ERRCODE = 'invalid_parameter_value',
				HINT = 'An item has payment_id, details, and optionally idempotency_key and correlation_id.';
		END IF;
		IF v_key <> 'details' AND jsonb_typeof(item -> v_key) NOT IN ('string', 'null') THEN
			RAISE EXCEPTION '.% must be a JSON string', v_key USING ERRCODE = 'invalid_parameter_value',
				DETAIL = format('Got a JSON %s.', jsonb_typeof(item -> v_key));
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
	v_message text := format('requests[%s]', p_item) ||
		CASE WHEN p_message ~ '^(payment_id|details|idempotency_key|correlation_id) ' THEN '.'
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

-- Creates an operation for each request of the array (or finds the one its
-- idempotency key names), in one statement; one row per item, in order.
--
-- Two passes.  The first checks every item in the array's order, so the
-- error names the first malformed item.  The second submits them in the
-- order of their idempotency keys: each submit holds its key's index entry
-- until the commit, so two arrays naming the same keys in opposite orders
-- would otherwise deadlock (40P01); in one order, one waits for the other.
-- What only submitting finds (a key used with other details, PF002; details
-- too large, PF007) names its item too, the first in key order.
CREATE FUNCTION payflow.submit_many(requests jsonb)
	RETURNS TABLE (item integer, payment_id text, operation_id text)
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	v_n integer;
	v_i integer := 0;
	v_item jsonb;
	v_items integer[] := ARRAY[]::integer[];
	v_ids text[] := ARRAY[]::text[];
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
		-- pass 1, the array's order: submit's own checks, as one expression
		-- per item; only a bad item takes the helpers, which raise
		FOR v_item, v_i IN SELECT e, o::integer FROM jsonb_array_elements(requests) WITH ORDINALITY r(e, o) LOOP
			IF jsonb_typeof(v_item) IS DISTINCT FROM 'object'
			   OR NOT v_item ?& ARRAY['payment_id', 'details']
			   OR EXISTS (SELECT FROM jsonb_object_keys(v_item) k
						   WHERE k NOT IN ('payment_id', 'details', 'idempotency_key', 'correlation_id'))
			   OR jsonb_typeof(v_item -> 'payment_id') <> 'string'
			   OR jsonb_typeof(v_item -> 'idempotency_key') NOT IN ('string', 'null')
			   OR jsonb_typeof(v_item -> 'correlation_id') NOT IN ('string', 'null') THEN
				PERFORM payflow._require_submit_item(v_item);
			END IF;
			IF v_item ->> 'payment_id' IS NULL OR v_item ->> 'payment_id' = '' OR length(v_item ->> 'payment_id') > 255
			   OR v_item ->> 'payment_id' ~ '[[:cntrl:]\uFFFE\uFFFF]'
			   OR v_item ->> 'idempotency_key' = '' OR length(v_item ->> 'idempotency_key') > 255
			   OR v_item ->> 'idempotency_key' ~ '[[:cntrl:]\uFFFE\uFFFF]'
			   OR v_item ->> 'correlation_id' = '' OR length(v_item ->> 'correlation_id') > 255
			   OR v_item ->> 'correlation_id' ~ '[[:cntrl:]\uFFFE\uFFFF]'
			   OR jsonb_typeof(v_item -> 'details') IS DISTINCT FROM 'object' THEN
				PERFORM payflow._require_submit(v_item ->> 'payment_id', v_item ->> 'idempotency_key',
												v_item ->> 'correlation_id');
				PERFORM payflow._require_object('details', v_item -> 'details');
			END IF;
		END LOOP;
		-- pass 2, the keys' order (submit's key: idempotency_key, else payment_id)
		FOR v_item, v_i IN
			SELECT e, o::integer FROM jsonb_array_elements(requests) WITH ORDINALITY r(e, o)
			 ORDER BY coalesce(e ->> 'idempotency_key', e ->> 'payment_id') COLLATE "C", o
		LOOP
			v_items := v_items || v_i;
			v_ids := v_ids || payflow.submit(v_item ->> 'payment_id', v_item -> 'details',
											 v_item ->> 'idempotency_key', v_item ->> 'correlation_id');
		END LOOP;
	EXCEPTION WHEN OTHERS THEN
		GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_message = MESSAGE_TEXT,
			v_detail = PG_EXCEPTION_DETAIL, v_hint = PG_EXCEPTION_HINT;
		PERFORM payflow._raise_for_item(v_i, v_state, v_message, v_detail, v_hint);
	END;
	RETURN QUERY
		SELECT r.i, requests -> (r.i - 1) ->> 'payment_id', r.id
		  FROM unnest(v_items, v_ids) r(i, id)
		 ORDER BY r.i;
END
$$;

REVOKE ALL ON FUNCTION payflow.submit_many(jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION payflow._submit_many_max() FROM PUBLIC;
REVOKE ALL ON FUNCTION payflow._require_submit_item(jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION payflow._raise_for_item(integer, text, text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION payflow.submit_many(jsonb) TO payflow_app;

COMMENT ON FUNCTION payflow.submit_many(jsonb) IS
	'submit for each item of a JSON array ({payment_id, details, idempotency_key?, correlation_id?}, at most 1000) in one statement: one row (item, payment_id, operation_id) per item, in order; all or nothing, the first bad item''s error names its place.';
