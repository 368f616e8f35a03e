-- payflow: the key rule of payloads.  A file of its own, included before
-- step_results.sql, whose _result_ref names a result payload's key with it
-- (the plain SQL install checks a SQL function's body as it is created).

-- The one rule for a payload's key, in the "pg" store and in S3 alike (the
-- workers' payload_key.c writes the same): payments/<operation id>/<name>.
-- Every key of an operation lies in [_payload_key(id, ''),
-- _payload_keys_end(id)), so purge and the admin views find an operation's
-- payloads by a range of the primary key ("0" follows "/" in "C" order).
CREATE OR REPLACE FUNCTION payflow._payload_key(p_operation_id text, p_name text) RETURNS text
	LANGUAGE sql IMMUTABLE PARALLEL SAFE
	AS $$
	SELECT 'payments/' || p_operation_id || '/' || p_name
$$;

CREATE OR REPLACE FUNCTION payflow._payload_keys_end(p_operation_id text) RETURNS text
	LANGUAGE sql IMMUTABLE PARALLEL SAFE
	AS $$
	SELECT 'payments/' || p_operation_id || '0'
$$;

-- The operation a payload key belongs to (the rule above read back): a
-- payload keeps its key only, not its operation's id a second time.
CREATE OR REPLACE FUNCTION payflow._payload_operation(p_key text) RETURNS text
	LANGUAGE sql IMMUTABLE PARALLEL SAFE
	AS $$
	SELECT split_part(p_key, '/', 2)
$$;
REVOKE ALL ON FUNCTION payflow._payload_operation(text) FROM PUBLIC;
