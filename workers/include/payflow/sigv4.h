/*
 * sigv4.h
 *		AWS Signature Version 4 (header form, AWS4-HMAC-SHA256).
 *
 * The signer works on a plain description of the request so that it can be
 * checked byte for byte against AWS's published test vectors; aws_client.h
 * turns an outgoing HTTP request into that description and back.
 */
#ifndef PAYFLOW_SIGV4_H
#define PAYFLOW_SIGV4_H

#include <stdbool.h>
#include <stddef.h>
#include <time.h>

#include "payflow/buf.h"
#include "payflow/error.h"

#define PF_SIGV4_ALGORITHM "AWS4-HMAC-SHA256"
#define PF_SIGV4_UNSIGNED_PAYLOAD "UNSIGNED-PAYLOAD"
#define PF_AMZ_DATE_LEN 16		/* 20150830T123600Z */

typedef struct pf_sigv4_header
{
	const char *name;
	const char *value;
} pf_sigv4_header;

typedef struct pf_sigv4_request
{
	const char *method;
	const char *path;			/* as sent; may already be percent-encoded */
	const char *query;			/* as sent, without '?'; NULL or "" for none */
	const pf_sigv4_header *headers; /* the headers to sign, in sending order; a name may repeat */
	size_t		n_headers;
	const char *payload_hash;	/* hex SHA-256 of the body, or UNSIGNED-PAYLOAD */

	/*
	 * S3 signs the path as it is (encoded once, no "." / ".." / "//"
	 * clean-up); every other service normalises the path and encodes it a
	 * second time.
	 */
	bool		s3;
} pf_sigv4_request;

typedef struct pf_sigv4_scope
{
	const char *access_key_id;
	const char *secret_access_key;
	const char *region;
	const char *service;
	const char *amz_date;		/* the request's X-Amz-Date */
} pf_sigv4_scope;

typedef struct pf_sigv4_result
{
	char	   *canonical_request;
	char	   *string_to_sign;
	char	   *signed_headers;
	char	   *authorization;	/* the Authorization header's value */
	char		signature[65];
} pf_sigv4_result;

pf_result	pf_sigv4_sign(const pf_sigv4_request *req, const pf_sigv4_scope *scope,
						  pf_sigv4_result *out, pf_error *err);
void		pf_sigv4_result_free(pf_sigv4_result *res);

/* X-Amz-Date form of t (UTC). */
void		pf_sigv4_amz_date(time_t t, char out[PF_AMZ_DATE_LEN + 1]);

/*
 * RFC 3986 percent-encoding as AWS wants it: everything but A-Z a-z 0-9 - _ . ~
 * becomes %XX (upper-case hex); '/' is kept when keep_slash.
 */
void		pf_uri_encode(pf_buf *out, const char *text, size_t len, bool keep_slash);

/* Decode %XX escapes ('+' stays '+'); malformed escapes are kept as they are. */
void		pf_uri_decode(pf_buf *out, const char *text, size_t len);

#endif							/* PAYFLOW_SIGV4_H */
