/*
 * digest.h
 *		Hashes and encodings used by SigV4, S3 checksums, SQS body MD5s and
 *		claim-check references (OpenSSL's EVP interface underneath).
 */
#ifndef PAYFLOW_DIGEST_H
#define PAYFLOW_DIGEST_H

#include <stdbool.h>
#include <stddef.h>

#define PF_SHA256_LEN 32
#define PF_SHA256_HEX_LEN 64
#define PF_MD5_LEN 16

void		pf_sha256(const void *data, size_t len, unsigned char out[PF_SHA256_LEN]);

/* out gets 64 lower-case hex digits and a NUL. */
void		pf_sha256_hex(const void *data, size_t len, char out[PF_SHA256_HEX_LEN + 1]);
void		pf_hmac_sha256(const void *key, size_t keylen, const void *data, size_t len,
						   unsigned char out[PF_SHA256_LEN]);
void		pf_md5(const void *data, size_t len, unsigned char out[PF_MD5_LEN]);

/* Lower-case hex of n bytes into out (2n+1 bytes). */
void		pf_hex_encode(const unsigned char *bytes, size_t n, char *out);

/* Parse exactly 2n hex digits (either case); false on anything else. */
bool		pf_hex_decode(const char *hex, unsigned char *out, size_t n);

/* Standard base64 with padding; the caller frees the result. */
char	   *pf_base64_encode(const void *data, size_t len);

#endif							/* PAYFLOW_DIGEST_H */
