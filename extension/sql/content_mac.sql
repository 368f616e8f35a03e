-- payflow: keyed checksums of request content (issue 26, M4).
--
-- A plain SHA-256 of a payment request names its card number to anyone
-- who can guess the other fields (amount, currency, customer: a few
-- million candidates), and such hashes used to leave the database: in
-- every message's payload reference ("sha256:<hex>"), in the S3 key of a
-- request payflow-api uploads (requests/sha256-<hex>.json), in the console
-- and in logs.  PCI DSS 4.0 (3.5.1.1) asks for keyed hashes.  So every
-- digest of payload content is an HMAC-SHA256 under a secret of this
-- installation:
--
--   checksum       "hmac-sha256:<hex>" in payload references (messages,
--                  request_mac and result_mac, the console), and the name of the
--                  HTTP edge's request objects (requests/hmac-<hex>.json)
--   request_mac    the checksum of a request payflow stores, which the
--                  idempotency check (PF002) compares too: it outlives the
--                  payload it was made of (purge).  0.4's separate request
--                  hash is gone (operations.sql's _same_request).
--
-- The secret: 32 random bytes in _content_key, made by CREATE EXTENSION
-- (and the update to 0.5.0), read by the owner's functions only.  Who must
-- verify or make a checksum outside the database gets it from
-- payload_mac_key(), granted to the role payflow_payload_mac only: the
-- step workers (they verify their input and write their results to S3),
-- the post-processing worker, and payflow-api's login (deploy/sql/
-- install.sql: it names large requests in S3).  payflow_admin holds the
-- step worker's role and reads the payloads themselves anyway; the relay,
-- the webhook worker and the S3 sweeper do not get it.  A dump keeps the
-- key with the rows it checks (backup.sql): a restore's CREATE EXTENSION
-- makes a fresh key first, which the restored row replaces.
--
-- "sha256:<hex>" stays readable (payload_get, the workers): references
-- made before 0.5.0 may still be in flight.  Nothing writes it any more;
-- an application that puts its own objects to S3 and calls submit_ref may
-- still pass one (see docs/sql-api.md).
--
-- The HMAC is computed with the built-in sha256() over the key's two pads
-- (RFC 2104), kept in the table beside the key: no pgcrypto, the same in
-- both flavours.  (CREATE OR REPLACE: the update to 0.5.0 takes this file
-- whole.)

CREATE OR REPLACE FUNCTION payflow._hmac_pad(key bytea, pad integer) RETURNS bytea
	LANGUAGE plpgsql IMMUTABLE STRICT
	AS $$
DECLARE
	v_pad bytea := decode(repeat(lpad(to_hex(pad), 2, '0'), 64), 'hex');
BEGIN
	FOR i IN 0 .. octet_length(key) - 1 LOOP
		v_pad := set_byte(v_pad, i, get_byte(key, i) # pad);
	END LOOP;
	RETURN v_pad;
END
$$;

CREATE TABLE payflow._content_key (
	id boolean PRIMARY KEY DEFAULT true CHECK (id),
	key bytea NOT NULL CHECK (octet_length(key) = 32),
	inner_pad bytea GENERATED ALWAYS AS (payflow._hmac_pad(key, 54)) STORED,	-- 0x36
	outer_pad bytea GENERATED ALWAYS AS (payflow._hmac_pad(key, 92)) STORED,	-- 0x5c
	created_at timestamptz NOT NULL DEFAULT now()
);

-- One key: a row inserted (a restore's) replaces the one there.
CREATE OR REPLACE FUNCTION payflow._content_key_replace() RETURNS trigger
	LANGUAGE plpgsql
	AS $$
BEGIN
	DELETE FROM payflow._content_key;
	RETURN NEW;
END
$$;
CREATE TRIGGER content_key_replace BEFORE INSERT ON payflow._content_key
	FOR EACH ROW EXECUTE FUNCTION payflow._content_key_replace();
INSERT INTO payflow._content_key (key) VALUES (decode(payflow._random_token(32), 'hex'));
-- In a dump (backup.sql: inside CREATE EXTENSION only; the plain SQL
-- install's tables are dumped like any other).
DO $content_key_dump$
BEGIN
	IF EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'payflow') THEN
		PERFORM pg_catalog.pg_extension_config_dump('payflow._content_key', '');
	END IF;
END
$content_key_dump$;

-- HMAC-SHA256 of content under a key given by its two pads, and the
-- checksum made of it: SQL with no table read, so the planner inlines
-- them into the statement that calls them.  The hot statements (submit,
-- a batch's claim and completion) read the pads once into variables and
-- call these per row: _checksum below reads the key at each call, a
-- statement of its own (7 us a call, six calls an operation).
CREATE OR REPLACE FUNCTION payflow._mac_with(inner_pad bytea, outer_pad bytea, content bytea) RETURNS bytea
	LANGUAGE sql IMMUTABLE PARALLEL SAFE
	AS $$ SELECT sha256(outer_pad || sha256(inner_pad || content)) $$;

CREATE OR REPLACE FUNCTION payflow._checksum_with(inner_pad bytea, outer_pad bytea, content bytea) RETURNS text
	LANGUAGE sql IMMUTABLE PARALLEL SAFE
	AS $$ SELECT 'hmac-sha256:' || encode(payflow._mac_with(inner_pad, outer_pad, content), 'hex') $$;

-- HMAC-SHA256 of content under the installation's key.  PL/pgSQL, whose
-- plan of the key's read is kept for the session: a SQL function reading
-- a table is never inlined, and each statement that called it parsed and
-- planned it again (58 us a submit, 17 us a step in the step-engine bench).
CREATE OR REPLACE FUNCTION payflow._content_mac(content bytea) RETURNS bytea
	LANGUAGE plpgsql STABLE STRICT PARALLEL SAFE
	AS $$
BEGIN
	RETURN (SELECT payflow._mac_with(k.inner_pad, k.outer_pad, content) FROM payflow._content_key k);
END
$$;

-- The checksum of a payload: "hmac-sha256:<hex>".
CREATE OR REPLACE FUNCTION payflow._checksum(content bytea) RETURNS text
	LANGUAGE plpgsql STABLE STRICT PARALLEL SAFE
	AS $$
BEGIN
	RETURN (SELECT payflow._checksum_with(k.inner_pad, k.outer_pad, content) FROM payflow._content_key k);
END
$$;

-- True when content has the checksum: a keyed one, or a plain
-- "sha256:<hex>" of a reference made before 0.5.0.
CREATE OR REPLACE FUNCTION payflow._checksum_matches(content bytea, checksum text) RETURNS boolean
	LANGUAGE sql STABLE PARALLEL SAFE
	AS $$
	SELECT CASE WHEN checksum LIKE 'sha256:%' THEN 'sha256:' || encode(sha256(content), 'hex') = checksum
				ELSE payflow._checksum(content) = checksum END
$$;

-- The role that may read the key (above).
DO $payload_mac_role$
BEGIN
	IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'payflow_payload_mac') THEN
		CREATE ROLE payflow_payload_mac NOLOGIN;
	END IF;
END
$payload_mac_role$;
GRANT payflow_payload_mac TO payflow_step_worker, payflow_postprocess_worker;
GRANT USAGE ON SCHEMA payflow TO payflow_payload_mac;

-- The key payload checksums are made with, for the edge programs that
-- make or verify them outside the database (payflow_payload_mac).
CREATE OR REPLACE FUNCTION payflow.payload_mac_key() RETURNS bytea
	LANGUAGE sql STABLE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$ SELECT k.key FROM payflow._content_key k $$;

COMMENT ON FUNCTION payflow.payload_mac_key() IS
	'The key payload checksums ("hmac-sha256:") are made with, for the edge programs that verify or make them (payflow_payload_mac).';

REVOKE ALL ON payflow._content_key FROM PUBLIC;
REVOKE ALL ON FUNCTION payflow._hmac_pad(bytea, integer), payflow._content_key_replace(),
	payflow._mac_with(bytea, bytea, bytea), payflow._checksum_with(bytea, bytea, bytea),
	payflow._content_mac(bytea), payflow._checksum(bytea), payflow._checksum_matches(bytea, text),
	payflow.payload_mac_key() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION payflow.payload_mac_key() TO payflow_payload_mac;
