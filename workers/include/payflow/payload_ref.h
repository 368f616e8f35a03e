/*
 * payload_ref.h
 *		Claim-check references: where a payload lives and what it must hash to.
 *
 *		{"store":"pg"|"s3","key":"payments/<opId>/request.json",
 *		 "checksum":"hmac-sha256:<hex>","size":N}
 *
 * The checksum is an HMAC-SHA256 under the installation's key
 * (payflow.payload_mac_key(), extension/sql/content_mac.sql): a plain
 * SHA-256 of a request would let anyone who sees a message, an S3 key or
 * a log line brute-force the card number in it. "sha256:<hex>" is still
 * read (references made before payflow 0.5.0, or by an application's own
 * submit_ref); nothing here writes it.
 */
#ifndef PAYFLOW_PAYLOAD_REF_H
#define PAYFLOW_PAYLOAD_REF_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "payflow/error.h"

typedef enum pf_store_kind
{
	PF_STORE_PG = 0,
	PF_STORE_S3 = 1
} pf_store_kind;

/* the longer form: "hmac-sha256:" and 64 hex digits ("sha256:<hex>" is 71) */
#define PF_CHECKSUM_LEN 76
#define PF_PAYLOAD_KEY_MAX 1024
#define PF_CHECKSUM_KEY_LEN 32

/* The installation's checksum key; set is false until it was read. */
typedef struct pf_checksum_key
{
	bool		set;
	unsigned char bytes[PF_CHECKSUM_KEY_LEN];
} pf_checksum_key;

typedef struct pf_payload_ref
{
	pf_store_kind store;
	char	   *key;
	char		checksum[PF_CHECKSUM_LEN + 1];	/* always lower-case hex */
	long long	size;
} pf_payload_ref;

const char *pf_store_kind_name(pf_store_kind kind);
bool		pf_store_kind_parse(const char *text, pf_store_kind *kind);

/*
 * The payload key rules (payload_key.c), the same in the "pg" store and in
 * S3: a payload of an operation is payments/<operation id>/<name>
 * (payflow._payload_key in the extension); a request the HTTP edge puts to
 * S3 before the database has made its operation is content-addressed,
 * requests/hmac-<hex>.json (its keyed checksum names it, so a retried POST
 * writes the same object; a plain one is refused). Written into out
 * (PF_PAYLOAD_KEY_MAX + 1 bytes); false when it would not fit.
 */
bool		pf_payload_key(const char *operation_id, const char *name, char out[PF_PAYLOAD_KEY_MAX + 1]);
bool		pf_request_key(const char *checksum, char out[PF_PAYLOAD_KEY_MAX + 1]);

/* "hmac-sha256:<hex>" of data under key; false when the key is not set. */
bool		pf_checksum_of(const pf_checksum_key *key, const void *data, size_t len, char out[PF_CHECKSUM_LEN + 1]);

/*
 * Accepts "hmac-sha256:" or "sha256:" + 64 hex digits of either case;
 * digest (the 32 bytes) may be NULL.
 */
bool		pf_checksum_parse(const char *text, unsigned char digest[32]);

/* True when a well-formed checksum is keyed ("hmac-sha256:"). */
bool		pf_checksum_keyed(const char *text);

/*
 * True when data has checksum: a keyed one under key (never when the key
 * is not set), or a plain "sha256:<hex>".
 */
bool		pf_checksum_verify(const pf_checksum_key *key, const void *data, size_t len, const char *checksum);

/* The key from a hex text (64 digits, or bytea's "\x" + 64); false otherwise. */
bool		pf_checksum_key_from_hex(const char *text, pf_checksum_key *key);

/*
 * Parse a reference from JSON. Members other than the four are ignored so a
 * newer producer can add some. On failure ref is left empty and err says
 * which member is wrong (PF_ERR_INVALID).
 */
pf_result	pf_payload_ref_from_json(const json_t *json, pf_payload_ref *ref, pf_error *err);
pf_result	pf_payload_ref_parse(const char *text, pf_payload_ref *ref, pf_error *err);
json_t	   *pf_payload_ref_to_json(const pf_payload_ref *ref);

/* Compact JSON text; the caller frees it. */
char	   *pf_payload_ref_dumps(const pf_payload_ref *ref);
void		pf_payload_ref_copy(pf_payload_ref *dst, const pf_payload_ref *src);
void		pf_payload_ref_free(pf_payload_ref *ref);

/* A key a claim-check store accepts: relative, no "." or ".." segments, no controls. */
bool		pf_payload_key_valid(const char *key);

#endif							/* PAYFLOW_PAYLOAD_REF_H */
