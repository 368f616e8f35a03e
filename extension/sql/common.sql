-- payflow: internal helpers every other file uses.
--
-- Settings as intervals, timestamps in the event format, card masking,
-- argument checks (each with its SQLSTATE), tenant visibility, the row
-- locks of an operation and a step, step definitions and checksums.  None
-- is callable by the payflow roles (revoked from PUBLIC in payflow.sql).

---------------------------------------------------------------------------
-- Internal helpers (revoked from PUBLIC below)
---------------------------------------------------------------------------

-- Interval GUC (stored in seconds).
CREATE FUNCTION payflow._seconds(name text) RETURNS interval
	LANGUAGE sql STABLE STRICT
	AS $$ SELECT make_interval(secs => payflow._setting(name)::float8) $$;

-- ISO 8601 UTC with milliseconds, as in the event format ("…Z").
CREATE FUNCTION payflow._iso(ts timestamptz) RETURNS text
	LANGUAGE sql STABLE
	AS $$ SELECT to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') $$;

-- Card numbers in error texts (a legacy DBMS that echoes its input, say):
-- every run of 13 to 19 digits, spaces or dashes between them allowed, that
-- passes the Luhn check keeps its last four digits and loses the others.
-- Applied to errors before they are stored (PCI DSS 3.4); the workers
-- redact before that already.
CREATE FUNCTION payflow._mask_card_numbers(value text) RETURNS text
	LANGUAGE plpgsql IMMUTABLE STRICT
	AS $$
DECLARE
	-- A UUID's digit groups are no card number: "17678424-4288-4eea-..."
	-- holds the Luhn-valid run 1767842442884, and masking it would change
	-- event ids and operation bodies kept in dead letters for replay.
	-- UUIDs are set aside behind placeholders of non-digits while runs are
	-- looked for, then put back.
	c_uuid constant text := '[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}';
	v_uuids text[];
	v_match text;
	v_digits text;
	v_sum integer;
	v_digit integer;
	v_out text := value;
BEGIN
	IF value !~ '[0-9]{4}' THEN
		RETURN value;
	END IF;
	-- (a text already holding the placeholder mark is searched whole:
	-- masking too much is the safe side)
	IF strpos(value, chr(57344)) = 0 THEN
		v_uuids := ARRAY(SELECT DISTINCT m[1] FROM regexp_matches(value, '(' || c_uuid || ')', 'g') m);
		FOR i IN 1..coalesce(array_length(v_uuids, 1), 0) LOOP
			v_out := replace(v_out, v_uuids[i], chr(57344) || translate(i::text, '0123456789', 'abcdefghij') || chr(57345));
		END LOOP;
	END IF;
	FOR v_match IN SELECT DISTINCT m[1] FROM regexp_matches(v_out, '(?<![0-9])([0-9](?:[ -]?[0-9]){12,18})(?![0-9])', 'g') m LOOP
		v_digits := regexp_replace(v_match, '[^0-9]', '', 'g');
		v_sum := 0;
		FOR i IN 1..length(v_digits) LOOP
			v_digit := substr(v_digits, length(v_digits) - i + 1, 1)::integer;
			IF i % 2 = 0 THEN
				v_digit := v_digit * 2;
				IF v_digit > 9 THEN
					v_digit := v_digit - 9;
				END IF;
			END IF;
			v_sum := v_sum + v_digit;
		END LOOP;
		IF v_sum % 10 = 0 THEN
			v_out := replace(v_out, v_match, repeat('*', length(v_digits) - 4) || right(v_digits, 4));
		END IF;
	END LOOP;
	FOR i IN 1..coalesce(array_length(v_uuids, 1), 0) LOOP
		v_out := replace(v_out, chr(57344) || translate(i::text, '0123456789', 'abcdefghij') || chr(57345), v_uuids[i]);
	END LOOP;
	RETURN v_out;
END
$$;

-- The same over every string and number of a JSON document (keys stay).
CREATE FUNCTION payflow._mask_card_numbers(value jsonb) RETURNS jsonb
	LANGUAGE sql IMMUTABLE STRICT
	AS $$
	SELECT CASE jsonb_typeof(value)
		WHEN 'string' THEN to_jsonb(payflow._mask_card_numbers(value #>> '{}'))
		WHEN 'object' THEN (SELECT coalesce(jsonb_object_agg(k, payflow._mask_card_numbers(v)), '{}'::jsonb)
							  FROM jsonb_each(value) AS e(k, v))
		WHEN 'array' THEN (SELECT coalesce(jsonb_agg(payflow._mask_card_numbers(v) ORDER BY i), '[]'::jsonb)
							 FROM jsonb_array_elements(value) WITH ORDINALITY AS e(v, i))
		-- a number that is a card number becomes the masked string
		WHEN 'number' THEN CASE WHEN payflow._mask_card_numbers(value::text) = value::text THEN value
								ELSE to_jsonb(payflow._mask_card_numbers(value::text)) END
		ELSE value
	END
$$;

-- A required text argument: not NULL (22004), not empty (22023), not
-- longer than max_length characters (22001).
CREATE FUNCTION payflow._require_text(arg_name text, value text, max_length integer)
	RETURNS void
	LANGUAGE plpgsql IMMUTABLE
	AS $$
BEGIN
	IF value IS NULL THEN
		RAISE EXCEPTION '% must not be null', arg_name USING ERRCODE = 'null_value_not_allowed';
	ELSIF value = '' THEN
		RAISE EXCEPTION '% must not be empty', arg_name USING ERRCODE = 'invalid_parameter_value';
	ELSIF length(value) > max_length THEN
		RAISE EXCEPTION '% is too long', arg_name
			USING ERRCODE = 'string_data_right_truncation',
				  DETAIL = format('The limit is %s characters.', max_length);
	END IF;
END
$$;

-- A well-formed operation id, else 22P02 (an unknown but well-formed id is
-- PF003, raised by the caller after the look-up).
CREATE FUNCTION payflow._require_operation_id(operation_id text) RETURNS void
	LANGUAGE plpgsql IMMUTABLE
	AS $$
BEGIN
	PERFORM payflow._require_text('operation_id', operation_id, 64);
	IF operation_id !~ '^pay_[0-9A-HJKMNP-TV-Z]{26}$' THEN
		RAISE EXCEPTION 'invalid operation id "%"', operation_id
			USING ERRCODE = 'invalid_text_representation',
				  DETAIL = 'An operation id is "pay_" followed by 26 characters of Crockford base32.';
	END IF;
END
$$;

-- Whether the caller may see an operation of this tenant: one of the
-- tenant authenticate() bound to the transaction ('' when none), or, for an
-- administrator (a member of payflow_admin, superusers included) who bound
-- none, every tenant's, so that operators can look up any operation.  The
-- caller's role decides (login or SET ROLE), not the functions' owner.
CREATE FUNCTION payflow._visible(op_tenant text) RETURNS boolean
	LANGUAGE sql STABLE
	AS $$
	SELECT op_tenant = payflow._current_tenant()
		   OR (payflow._current_tenant() = ''
			   AND pg_has_role(payflow._outer_role(), 'payflow_admin', 'USAGE'))
$$;

CREATE FUNCTION payflow._unknown_operation(operation_id text) RETURNS void
	LANGUAGE plpgsql VOLATILE
	AS $$
BEGIN
	RAISE EXCEPTION 'operation "%" does not exist', operation_id USING ERRCODE = 'PF003';
END
$$;

-- Locks an operation's row, else PF003.  Lock order everywhere: the
-- operation, then its step, so step functions never deadlock each other.
CREATE FUNCTION payflow._lock_operation(p_operation_id text) RETURNS payflow.operations
	LANGUAGE plpgsql
	AS $$
DECLARE
	o payflow.operations;
BEGIN
	SELECT * INTO o FROM payflow.operations WHERE id = p_operation_id FOR UPDATE;
	IF NOT FOUND THEN
		PERFORM payflow._unknown_operation(p_operation_id);
	END IF;
	RETURN o;
END
$$;

-- The definition of a step by name in the newest version that has it,
-- else 22023.  Step functions check names with it before they know the
-- operation, then read the operation's own version (_step_of).
CREATE FUNCTION payflow._step_definition(step text) RETURNS payflow.step_definitions
	LANGUAGE plpgsql STABLE
	AS $$
DECLARE
	d payflow.step_definitions;
BEGIN
	PERFORM payflow._require_text('step', step, 64);
	SELECT * INTO d FROM payflow.step_definitions sd WHERE sd.step_name = step
	 ORDER BY sd.pipeline_version DESC LIMIT 1;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'unknown step "%"', step
			USING ERRCODE = 'invalid_parameter_value',
				  HINT = format('Steps are %s.', payflow._step_list(payflow._pipeline_version()));
	END IF;
	RETURN d;
END
$$;

-- A step of the version an operation runs on, else 22023: a report for a
-- step that operation's pipeline does not have.
CREATE FUNCTION payflow._require_step_of(o payflow.operations, p_step text) RETURNS payflow.step_definitions
	LANGUAGE plpgsql STABLE
	AS $$
DECLARE
	d payflow.step_definitions := payflow._step_of(o.pipeline_version, p_step);
BEGIN
	IF d.step_name IS NULL THEN
		RAISE EXCEPTION 'step % is not in pipeline version % of operation %', p_step, o.pipeline_version, o.id
			USING ERRCODE = 'invalid_parameter_value',
				  HINT = 'Operations finish on the pipeline version they started with.';
	END IF;
	RETURN d;
END
$$;

-- Validates the arguments every step function shares.
CREATE FUNCTION payflow._require_worker(worker_id text, lease_seconds integer) RETURNS void
	LANGUAGE plpgsql IMMUTABLE
	AS $$
BEGIN
	PERFORM payflow._require_text('worker_id', worker_id, 200);
	IF lease_seconds IS NULL OR lease_seconds < 1 OR lease_seconds > 86400 THEN
		RAISE EXCEPTION 'lease_seconds must be between 1 and 86400'
			USING ERRCODE = 'invalid_parameter_value';
	END IF;
END
$$;

-- A JSON object argument.
CREATE FUNCTION payflow._require_object(arg_name text, value jsonb) RETURNS void
	LANGUAGE plpgsql IMMUTABLE
	AS $$
BEGIN
	IF value IS NULL THEN
		RAISE EXCEPTION '% must not be null', arg_name USING ERRCODE = 'null_value_not_allowed';
	ELSIF jsonb_typeof(value) <> 'object' THEN
		RAISE EXCEPTION '% must be a JSON object', arg_name
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = format('Got a JSON %s.', jsonb_typeof(value));
	END IF;
END
$$;

-- Raises PF007 when a payload exceeds payflow.payload_max_bytes.
CREATE FUNCTION payflow._require_size(what text, size bigint) RETURNS void
	LANGUAGE plpgsql STABLE
	AS $$
DECLARE
	max_bytes bigint := payflow._setting('payload_max_bytes')::bigint;
BEGIN
	IF size > max_bytes THEN
		RAISE EXCEPTION '% is too large', what
			USING ERRCODE = 'PF007',
				  DETAIL = format('It has %s bytes; payflow.payload_max_bytes is %s.', size, max_bytes),
				  HINT = 'Put large payloads in S3 and call payflow.submit_ref().';
	END IF;
END
$$;
