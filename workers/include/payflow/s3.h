/*
 * s3.h
 *		Amazon S3 client for claim-check payloads: PutObject with checksums,
 *		GetObject with verification, ListObjectsV2, DeleteObjects.
 *
 * The endpoint is AWS_ENDPOINT_URL_S3, else AWS_ENDPOINT_URL, else
 * https://s3.<region>.amazonaws.com. Addressing is path-style
 * (endpoint/bucket/key) when an endpoint is set, virtual-hosted
 * (bucket.endpoint/key) otherwise, unless PAYFLOW_S3_ADDRESSING says.
 *
 * Every object is written with x-amz-checksum-sha256 (S3 verifies the bytes
 * on arrival) and user metadata x-amz-meta-sha256 (hex, for people and tools
 * that read metadata). Reads are verified against the expected checksum and
 * against the checksums S3 returns; any mismatch is PF_ERR_CHECKSUM with code
 * "PF005", never data handed to the caller.
 */
#ifndef PAYFLOW_S3_H
#define PAYFLOW_S3_H

#include <stddef.h>
#include <stdint.h>

#include "payflow/aws_client.h"
#include "payflow/buf.h"
#include "payflow/config.h"
#include "payflow/error.h"
#include "payflow/payload_ref.h"

#define PF_S3_MAX_DELETE 1000
#define PF_S3_MAX_LIST 1000

/* One page of a listing: keys in order, each with its LastModified. */
typedef struct pf_s3_listing
{
	int			n;
	char	  **keys;
	int64_t    *last_modified;	/* Unix seconds, UTC */
	char	   *next_token;		/* NULL on the last page */
} pf_s3_listing;

typedef struct pf_s3 pf_s3;

pf_s3	   *pf_s3_create(pf_aws_client *aws, const pf_config *cfg);
void		pf_s3_destroy(pf_s3 *s3);

/* The URL of an object under the chosen addressing; the caller frees it. */
char	   *pf_s3_object_url(const pf_s3 *s3, const char *bucket, const char *key);

pf_result	pf_s3_put_object(pf_s3 *s3, const char *bucket, const char *key, const void *data, size_t len,
							 const char *content_type, pf_error *err);

/*
 * Read an object into out (reset first). expected_checksum is a reference's
 * checksum (payload_ref.h; a keyed one is checked under mac) or NULL; a
 * mismatch is PF_ERR_CHECKSUM and out is emptied.
 */
pf_result	pf_s3_get_object(pf_s3 *s3, const char *bucket, const char *key, const char *expected_checksum,
							 const pf_checksum_key *mac,
							 pf_buf *out, pf_error *err);

/*
 * One page (at most max_keys, 1 to 1000) of the keys under prefix, after
 * the page that gave token (NULL: the first); out is freed and refilled.
 */
pf_result	pf_s3_list_objects(pf_s3 *s3, const char *bucket, const char *prefix, const char *token,
							   int max_keys, pf_s3_listing *out, pf_error *err);
void		pf_s3_listing_free(pf_s3_listing *listing);

/* Delete up to 1000 keys; *n_failed (may be NULL) counts keys S3 refused. */
pf_result	pf_s3_delete_objects(pf_s3 *s3, const char *bucket, const char *const *keys, int n,
								 int *n_failed, pf_error *err);

/* Parse an S3 XML error body into err (exposed for tests). */
void		pf_s3_parse_error(long status, const char *body, pf_error *err);

#endif							/* PAYFLOW_S3_H */
