/*
 * digest.c
 *		SHA-256, HMAC-SHA256, MD5, hex and base64 over OpenSSL's EVP layer
 *		(the low-level SHA256_Init family is deprecated in OpenSSL 3).
 */
#include "payflow/digest.h"

#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "payflow/buf.h"

void
pf_sha256(const void *data, size_t len, unsigned char out[PF_SHA256_LEN])
{
	unsigned int outlen = PF_SHA256_LEN;

	if (!EVP_Digest(data, len, out, &outlen, EVP_sha256(), NULL))
		abort();				/* cannot fail short of a broken OpenSSL */
}

void
pf_sha256_hex(const void *data, size_t len, char out[PF_SHA256_HEX_LEN + 1])
{
	unsigned char d[PF_SHA256_LEN];

	pf_sha256(data, len, d);
	pf_hex_encode(d, sizeof(d), out);
}

void
pf_hmac_sha256(const void *key, size_t keylen, const void *data, size_t len,
			   unsigned char out[PF_SHA256_LEN])
{
	unsigned int outlen = PF_SHA256_LEN;

	if (HMAC(EVP_sha256(), key, (int) keylen, data, len, out, &outlen) == NULL)
		abort();
}

void
pf_md5(const void *data, size_t len, unsigned char out[PF_MD5_LEN])
{
	unsigned int outlen = PF_MD5_LEN;

	if (!EVP_Digest(data, len, out, &outlen, EVP_md5(), NULL))
		abort();
}

void
pf_hex_encode(const unsigned char *bytes, size_t n, char *out)
{
	static const char digits[] = "0123456789abcdef";

	for (size_t i = 0; i < n; i++)
	{
		out[2 * i] = digits[bytes[i] >> 4];
		out[2 * i + 1] = digits[bytes[i] & 0xF];
	}
	out[2 * n] = '\0';
}

static int
hex_value(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

bool
pf_hex_decode(const char *hex, unsigned char *out, size_t n)
{
	if (strlen(hex) != 2 * n)
		return false;
	for (size_t i = 0; i < n; i++)
	{
		int			hi = hex_value(hex[2 * i]);
		int			lo = hex_value(hex[2 * i + 1]);

		if (hi < 0 || lo < 0)
			return false;
		out[i] = (unsigned char) (hi << 4 | lo);
	}
	return true;
}

char *
pf_base64_encode(const void *data, size_t len)
{
	size_t		outlen = 4 * ((len + 2) / 3);
	char	   *out = pf_malloc(outlen + 1);

	EVP_EncodeBlock((unsigned char *) out, data, (int) len);
	out[outlen] = '\0';
	return out;
}
