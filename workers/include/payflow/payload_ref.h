/*
 * payload_ref.h
 *		Claim-check references: where a payload lives and what it must hash to.
 *
 *		{"store":"pg"|"s3","key":"payments/<opId>/request.json",
 *		 "checksum":"sha256:<hex>","size":N}
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

/* "sha256:" and 64 hex digits */
#define PF_CHECKSUM_LEN 71
#define PF_PAYLOAD_KEY_MAX 1024

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
 * requests/sha256-<hex>.json (its checksum names it, so a retried POST
 * writes the same object). Written into out (PF_PAYLOAD_KEY_MAX + 1 bytes);
 * false when it would not fit.
 */
bool		pf_payload_key(const char *operation_id, const char *name, char out[PF_PAYLOAD_KEY_MAX + 1]);
bool		pf_request_key(const char *checksum, char out[PF_PAYLOAD_KEY_MAX + 1]);

/* "sha256:<hex>" of data. */
void		pf_checksum_of(const void *data, size_t len, char out[PF_CHECKSUM_LEN + 1]);

/* Accepts "sha256:" + 64 hex digits of either case; digest may be NULL. */
bool		pf_checksum_parse(const char *text, unsigned char digest[32]);

/* True when data hashes to checksum (a well-formed "sha256:<hex>"). */
bool		pf_checksum_verify(const void *data, size_t len, const char *checksum);

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
