-- payflow: payloads (the claim check).
--
-- The key rule (payments/<operation id>/<name>), the write-once "pg" store,
-- and payload_get/payload_put for workers.  Messages carry a reference and
-- a keyed checksum (content_mac.sql), never the payload itself.

-- (The key rule, _payload_key: payload_key.sql.)

-- Writes a payload of the "pg" store and returns its reference.  A key is
-- written once: the same content again is a no-op, other content an error,
-- so a reference already sent in an event can never change under a reader.
CREATE OR REPLACE FUNCTION payflow._payload_write(p_operation_id text, p_name text, p_content bytea)
	RETURNS jsonb
	LANGUAGE plpgsql
	AS $$
DECLARE
	v_key text := payflow._payload_key(p_operation_id, p_name);
	v_existing bytea;
BEGIN
	PERFORM payflow._require_size('payload', octet_length(p_content));
	INSERT INTO payflow.payloads (key, content)
	VALUES (v_key, p_content)
	ON CONFLICT DO NOTHING;	-- the key of the day's partition (tables.sql)
	IF NOT FOUND THEN
		-- the bytes compared: the same bytes have the same reference
		SELECT p.content INTO v_existing FROM payflow.payloads p WHERE p.key = v_key;
		IF v_existing <> p_content THEN
			RAISE EXCEPTION 'payload "%" already exists with other content', v_key
				USING ERRCODE = 'unique_violation',
					  DETAIL = 'Payload keys are written once; a reference may already be in flight.';
		END IF;
	END IF;
	RETURN jsonb_build_object('store', 'pg', 'key', v_key, 'checksum', payflow._checksum(p_content),
							  'size', octet_length(p_content));
END
$$;

-- Whether an operation's payloads are purged: it ended COMPLETED or
-- CANCELLED more than retention_payloads ago.  The rule, not the rows, says
-- what is purged: a payload past it may stay in its day's partition until
-- purge drops the day (partitions.sql), and shows nowhere meanwhile.  A
-- plain expression, inlined into the statements that use it (payload_get,
-- purge, the admin's view, s3_unretained_keys), whose plans are kept.
CREATE OR REPLACE FUNCTION payflow._payloads_past_retention(p_status text, p_terminal_at timestamptz)
	RETURNS boolean
	LANGUAGE sql STABLE
	AS $$
	SELECT p_status IN ('COMPLETED', 'CANCELLED') AND p_terminal_at < now() - payflow._seconds('retention_payloads')
$$;

-- Reads a payload of the "pg" store, verifying its checksum (PF005).
CREATE OR REPLACE FUNCTION payflow.payload_get(ref jsonb) RETURNS bytea
	LANGUAGE plpgsql STABLE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	-- payloads is partitioned (partitions.sql): a custom plan, which the
	-- plan cache keeps choosing for a lookup of the partition key, is
	-- planned again at every call (266 us a call against 39 in 0.4.1)
	SET plan_cache_mode = force_generic_plan
	AS $$
DECLARE
	p payflow.payloads;
BEGIN
	-- The checks as expressions; the helpers, each a statement of its own
	-- (some 10 us), only for bad input, which they name precisely.
	IF ref IS NULL OR jsonb_typeof(ref) <> 'object' THEN
		PERFORM payflow._require_object('ref', ref);
	END IF;
	IF ref ->> 'store' IS DISTINCT FROM 'pg' THEN
		RAISE EXCEPTION 'payload reference is not of the "pg" store'
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = format('Its store is %s.', coalesce(ref ->> 'store', 'missing'));
	END IF;
	IF coalesce(ref ->> 'key', '') = '' OR length(ref ->> 'key') > 1024
	   OR coalesce(ref ->> 'checksum', '') = '' OR length(ref ->> 'checksum') > 76 THEN
		PERFORM payflow._require_text('ref.key', ref ->> 'key', 1024);
		PERFORM payflow._require_text('ref.checksum', ref ->> 'checksum', 76);
	END IF;
	SELECT * INTO p FROM payflow.payloads WHERE key = ref ->> 'key';
	IF NOT FOUND
	   OR NOT EXISTS (SELECT FROM payflow.operations o
					   WHERE o.id = payflow._payload_operation(p.key) AND NOT payflow._payloads_past_retention(o.status, o.terminal_at)) THEN
		RAISE EXCEPTION 'payload "%" does not exist', ref ->> 'key'
			USING ERRCODE = 'no_data_found',
				  DETAIL = 'It may have been purged after its operation ended.';
	END IF;
	IF NOT payflow._checksum_matches(p.content, ref ->> 'checksum') THEN
		RAISE EXCEPTION 'checksum mismatch for payload "%"', p.key USING ERRCODE = 'PF005';
	END IF;
	RETURN p.content;
END
$$;

-- Writes a payload of the "pg" store for a step's result; returns its ref
-- (for complete_step's result_ref).  Only the worker holding the lease of
-- the running step may, and only under the step's result name: anyone else
-- could take the key first, and the step's completion would then fail
-- after the payment was made.
CREATE OR REPLACE FUNCTION payflow.payload_put(operation_id text, name text, content bytea,
									step text DEFAULT NULL, worker_id text DEFAULT NULL,
									lease_token text DEFAULT NULL)
	RETURNS jsonb
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	d payflow.step_definitions;
	o payflow.operations;
BEGIN
	PERFORM payflow._require_operation_id(operation_id);
	PERFORM payflow._require_text('name', name, 100);
	IF name !~ '^[A-Za-z0-9][A-Za-z0-9._-]*$' THEN
		RAISE EXCEPTION 'invalid payload name "%"', name
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = 'Names use letters, digits, ".", "_" and "-".';
	END IF;
	IF content IS NULL THEN
		RAISE EXCEPTION 'content must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	SELECT * INTO o FROM payflow.operations t WHERE t.id = payload_put.operation_id;
	IF NOT FOUND THEN
		PERFORM payflow._unknown_operation(operation_id);
	END IF;
	IF step IS NULL OR worker_id IS NULL THEN
		RAISE EXCEPTION 'only the lease holder of a running step may write a payload'
			USING ERRCODE = 'PF004', HINT = 'Pass the step and the worker_id that claimed it.';
	END IF;
	d := payflow._step_definition(step);
	d := payflow._require_step_of(o, d.step_name);
	PERFORM payflow._require_worker(worker_id, 1);
	PERFORM payflow._require_step_role(d.step_name);
	IF o.current_step <> d.step_name OR o.step_status IS DISTINCT FROM 'RUNNING'
	   OR o.step_lease_owner IS DISTINCT FROM worker_id THEN
		RAISE EXCEPTION 'worker "%" does not hold the lease of step %', worker_id, d.step_name
			USING ERRCODE = 'PF004', DETAIL = format('Operation %s.', operation_id);
	END IF;
	PERFORM payflow._require_lease_token(o, lease_token);
	IF name IS DISTINCT FROM d.result_name THEN
		RAISE EXCEPTION 'step % writes only its result payload', d.step_name
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = CASE WHEN d.result_name IS NULL THEN format('Step %s has no result payload.', d.step_name)
								ELSE format('Its name is %s.', d.result_name) END;
	END IF;
	RETURN payflow._payload_write(operation_id, name, content);
END
$$;

REVOKE ALL ON FUNCTION payflow._payloads_past_retention(text, timestamptz) FROM PUBLIC;
