-- Sealing secrets at rest (webhook signing secrets): AES-256-GCM in
-- extension/src/seal.c, under payflow._webhook_key.  The C-free flavour's
-- twins (flavour-sql/seal.sql) use pgcrypto.  CREATE OR REPLACE: the
-- update to 0.5.0 takes this file whole.
CREATE OR REPLACE FUNCTION payflow._seal(plaintext text, key bytea) RETURNS bytea
	AS 'MODULE_PATHNAME', 'payflow_seal' LANGUAGE C VOLATILE STRICT;
-- XX001 when the bytes were sealed with another key or changed since.
CREATE OR REPLACE FUNCTION payflow._unseal(sealed bytea, key bytea) RETURNS text
	AS 'MODULE_PATHNAME', 'payflow_unseal' LANGUAGE C STABLE STRICT;
REVOKE ALL ON FUNCTION payflow._seal(text, bytea), payflow._unseal(bytea, bytea) FROM PUBLIC;
