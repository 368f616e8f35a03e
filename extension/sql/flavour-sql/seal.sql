-- Sealing secrets at rest (webhook signing secrets): pgcrypto's OpenPGP
-- symmetric encryption (AES-256, an integrity check), under
-- payflow._webhook_key, whose 32 random bytes are the passphrase (hex), so
-- the passphrase needs no stretching (s2k-mode=1).  The C flavour's twins
-- (flavour-c/seal.sql) use AES-256-GCM.  CREATE OR REPLACE: the update to
-- 0.5.0 takes this file whole.
DO $seal$
DECLARE
	v_schema name := (SELECT n.nspname FROM pg_catalog.pg_extension e
						JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace
					   WHERE e.extname = 'pgcrypto');
BEGIN
	EXECUTE format($f$
		CREATE OR REPLACE FUNCTION payflow._seal(plaintext text, key bytea) RETURNS bytea
			LANGUAGE sql VOLATILE STRICT
			RETURN %I.pgp_sym_encrypt(plaintext, pg_catalog.encode(key, 'hex'),
									  'cipher-algo=aes256, s2k-mode=1')$f$, v_schema);
	EXECUTE format($f$
		CREATE OR REPLACE FUNCTION payflow._pgp_open(sealed bytea, key bytea) RETURNS text
			LANGUAGE sql STABLE STRICT
			RETURN %I.pgp_sym_decrypt(sealed, pg_catalog.encode(key, 'hex'))$f$, v_schema);
END
$seal$;

-- XX001, as the C flavour's, when the bytes were sealed with another key
-- or changed since (pgcrypto says 39000, "Wrong key or corrupt data").
CREATE OR REPLACE FUNCTION payflow._unseal(sealed bytea, key bytea) RETURNS text
	LANGUAGE plpgsql STABLE STRICT
	AS $$
BEGIN
	RETURN payflow._pgp_open(sealed, key);
EXCEPTION WHEN external_routine_invocation_exception THEN
	RAISE EXCEPTION 'a sealed secret did not open with this key'
		USING ERRCODE = 'data_corrupted', DETAIL = 'It was sealed with another key, or changed since.';
END
$$;

INSERT INTO payflow.settings (name, value, default_value, kind, unit, min_value, max_value)
VALUES ('webhook_secret_overlap', '86400', '86400', 'integer', 's', 0, 604800)
ON CONFLICT (name) DO NOTHING;
REVOKE ALL ON FUNCTION payflow._seal(text, bytea), payflow._unseal(bytea, bytea), payflow._pgp_open(bytea, bytea)
	FROM PUBLIC;
