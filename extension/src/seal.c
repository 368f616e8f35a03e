/*
 * seal.c
 *		Secrets at rest: webhook signing secrets are kept sealed with
 *		AES-256-GCM under a key that lives outside their table
 *		(payflow._webhook_key, which no role but the owner can read).
 *
 * The C-free flavour does the same with pgcrypto (flavour-sql/seal.sql);
 * each flavour reads only what it wrote.  The server links OpenSSL
 * already (pgcrypto is built on it), so no library is added to what a
 * PostgreSQL installation carries.
 *
 * A sealed value is: a version byte (1), a 12-byte random nonce, the
 * ciphertext, and the 16-byte GCM tag, which authenticates the rest: a
 * changed byte or another key fails to open, with an error, never with
 * garbage.
 */
#include "payflow.h"

#include <openssl/evp.h>

#include "fmgr.h"
#include "utils/builtins.h"

PG_FUNCTION_INFO_V1(payflow_seal);
PG_FUNCTION_INFO_V1(payflow_unseal);

#define SEAL_VERSION 1
#define SEAL_KEY_LEN 32
#define SEAL_NONCE_LEN 12
#define SEAL_TAG_LEN 16
#define SEAL_OVERHEAD (1 + SEAL_NONCE_LEN + SEAL_TAG_LEN)

static void
check_key(bytea *key)
{
	if (VARSIZE_ANY_EXHDR(key) != SEAL_KEY_LEN)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("a sealing key has %d bytes", SEAL_KEY_LEN)));
}

/* Frees the cipher context, then reports what failed. */
static void
seal_failed(EVP_CIPHER_CTX *ctx, const char *what)
{
	EVP_CIPHER_CTX_free(ctx);
	ereport(ERROR,
			(errcode(ERRCODE_INTERNAL_ERROR),
			 errmsg("could not %s a secret", what)));
}

/*
 * payflow._seal(plaintext text, key bytea) returns the sealed bytes.
 */
Datum
payflow_seal(PG_FUNCTION_ARGS)
{
	text	   *plain = PG_GETARG_TEXT_PP(0);
	bytea	   *key = PG_GETARG_BYTEA_PP(1);
	int			plain_len = VARSIZE_ANY_EXHDR(plain);
	bytea	   *sealed;
	unsigned char *out;
	EVP_CIPHER_CTX *ctx;
	int			len;

	check_key(key);
	sealed = (bytea *) palloc(VARHDRSZ + SEAL_OVERHEAD + plain_len);
	SET_VARSIZE(sealed, VARHDRSZ + SEAL_OVERHEAD + plain_len);
	out = (unsigned char *) VARDATA(sealed);
	out[0] = SEAL_VERSION;
	if (!pg_strong_random(out + 1, SEAL_NONCE_LEN))
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not generate a nonce")));
	ctx = EVP_CIPHER_CTX_new();
	if (ctx == NULL)
		seal_failed(NULL, "seal");
	if (EVP_EncryptInit_ex(ctx, EVP_aes_256_gcm(), NULL, NULL, NULL) != 1 ||
		EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_IVLEN, SEAL_NONCE_LEN, NULL) != 1 ||
		EVP_EncryptInit_ex(ctx, NULL, NULL, (unsigned char *) VARDATA_ANY(key), out + 1) != 1 ||
		EVP_EncryptUpdate(ctx, out + 1 + SEAL_NONCE_LEN, &len,
						  (unsigned char *) VARDATA_ANY(plain), plain_len) != 1 ||
		EVP_EncryptFinal_ex(ctx, out + 1 + SEAL_NONCE_LEN + len, &len) != 1 ||
		EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, SEAL_TAG_LEN,
							out + 1 + SEAL_NONCE_LEN + plain_len) != 1)
		seal_failed(ctx, "seal");
	EVP_CIPHER_CTX_free(ctx);
	PG_RETURN_BYTEA_P(sealed);
}

/*
 * payflow._unseal(sealed bytea, key bytea) returns the plaintext, or fails
 * (XX001) when the bytes were not sealed with this key or were changed.
 */
Datum
payflow_unseal(PG_FUNCTION_ARGS)
{
	bytea	   *sealed = PG_GETARG_BYTEA_PP(0);
	bytea	   *key = PG_GETARG_BYTEA_PP(1);
	int			sealed_len = VARSIZE_ANY_EXHDR(sealed);
	unsigned char *in = (unsigned char *) VARDATA_ANY(sealed);
	int			plain_len = sealed_len - SEAL_OVERHEAD;
	text	   *plain;
	EVP_CIPHER_CTX *ctx;
	int			len;
	bool		opened;

	check_key(key);
	if (sealed_len < SEAL_OVERHEAD || in[0] != SEAL_VERSION)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("not a sealed secret")));
	plain = (text *) palloc(VARHDRSZ + plain_len + 1);
	ctx = EVP_CIPHER_CTX_new();
	if (ctx == NULL)
		seal_failed(NULL, "open");
	if (EVP_DecryptInit_ex(ctx, EVP_aes_256_gcm(), NULL, NULL, NULL) != 1 ||
		EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_IVLEN, SEAL_NONCE_LEN, NULL) != 1 ||
		EVP_DecryptInit_ex(ctx, NULL, NULL, (unsigned char *) VARDATA_ANY(key), in + 1) != 1 ||
		EVP_DecryptUpdate(ctx, (unsigned char *) VARDATA(plain), &len,
						  in + 1 + SEAL_NONCE_LEN, plain_len) != 1 ||
		EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, SEAL_TAG_LEN,
							in + 1 + SEAL_NONCE_LEN + plain_len) != 1)
		seal_failed(ctx, "open");
	opened = EVP_DecryptFinal_ex(ctx, (unsigned char *) VARDATA(plain) + len, &len) == 1;
	EVP_CIPHER_CTX_free(ctx);
	if (!opened)
	{
		explicit_bzero(VARDATA(plain), plain_len);
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("a sealed secret did not open with this key"),
				 errdetail("It was sealed with another key, or changed since.")));
	}
	SET_VARSIZE(plain, VARHDRSZ + plain_len);
	PG_RETURN_TEXT_P(plain);
}
