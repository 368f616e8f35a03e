-- payflow: W3C trace context (issue 29), stored once with each operation.
--
-- An operation is one trace, from the request that submitted it to its
-- last step.  submit() takes the caller's traceparent (the HTTP edge
-- passes its own request span's), or starts a trace when there is none;
-- the operation row keeps it (operations.traceparent, as its 25 bytes:
-- _traceparent_text renders it), every event of the operation carries it
-- as the SQS message attribute "traceparent" (_event_attributes), and each
-- worker's spans of the operation are its children.  status() shows the
-- trace id as "traceId".
--
-- Only traceparent is kept: tracestate is vendor data that the edge keeps
-- on its own spans; an operation's later spans start from the stored
-- traceparent alone (a new version of the W3C format is read as version
-- 00 and stored so, as the recommendation says a parser should).

-- Whether p is a W3C traceparent payflow takes: version 00 exactly, or a
-- later version (not ff) whose first 55 characters read as 00's; trace
-- and parent ids not all zeros.
CREATE OR REPLACE FUNCTION payflow._traceparent_valid(p text) RETURNS boolean
	LANGUAGE sql IMMUTABLE
	RETURN p ~ '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}(-.*)?$'
		   AND left(p, 2) <> 'ff' AND (left(p, 2) <> '00' OR length(p) = 55) AND length(p) <= 512
		   AND substr(p, 4, 32) <> repeat('0', 32) AND substr(p, 37, 16) <> repeat('0', 16);

-- The traceparent to store: p_given checked (22023 if it is not a W3C
-- traceparent), or a new trace (random trace and parent ids, sampled) when
-- NULL.  A trace started here has no span of its id: the workers' first
-- spans name a parent that no exporter sent, and a trace viewer shows them
-- under the trace id all the same.  Stored as its trace id (16 bytes),
-- parent id (8) and flags (1), the version being 00: 26 bytes of the row
-- where its text took 56.
CREATE OR REPLACE FUNCTION payflow._traceparent(p_given text) RETURNS bytea
	LANGUAGE plpgsql VOLATILE
	AS $$
BEGIN
	IF p_given IS NULL THEN
		RETURN uuid_send(gen_random_uuid()) || substr(uuid_send(gen_random_uuid()), 1, 8) || '\x01'::bytea;
	ELSIF NOT payflow._traceparent_valid(p_given) THEN
		RAISE EXCEPTION 'traceparent must be a W3C trace context traceparent'
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = 'Version 00 is "00-" followed by a trace id of 32 and a parent id of 16 lower-case hex digits, '
						   || 'neither all zeros, and "-" and two hex digits of flags.';
	END IF;
	RETURN decode(substr(p_given, 4, 32) || substr(p_given, 37, 16) || substr(p_given, 54, 2), 'hex');
END
$$;

-- A stored traceparent as the W3C text (version 00), as events carry it.
CREATE OR REPLACE FUNCTION payflow._traceparent_text(p_stored bytea) RETURNS text
	LANGUAGE sql IMMUTABLE
	RETURN '00-' || encode(substr(p_stored, 1, 16), 'hex') || '-' || encode(substr(p_stored, 17, 8), 'hex')
		   || '-' || encode(substr(p_stored, 25, 1), 'hex');

-- The trace id of a stored traceparent, as status() and the logs show it.
CREATE OR REPLACE FUNCTION payflow._trace_id(p_stored bytea) RETURNS text
	LANGUAGE sql IMMUTABLE
	RETURN encode(substr(p_stored, 1, 16), 'hex');

REVOKE ALL ON FUNCTION payflow._traceparent_valid(text), payflow._traceparent(text),
	payflow._traceparent_text(bytea), payflow._trace_id(bytea) FROM PUBLIC;
