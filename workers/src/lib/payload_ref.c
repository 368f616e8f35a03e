/*
 * payload_ref.c
 *		Parsing, formatting and verifying claim-check references.
 */
#include "payflow/payload_ref.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "payflow/buf.h"
#include "payflow/digest.h"

#define KEYED_PREFIX "hmac-sha256:"
#define PLAIN_PREFIX "sha256:"

const char *
pf_store_kind_name(pf_store_kind kind)
{
	return kind == PF_STORE_S3 ? "s3" : "pg";
}

bool
pf_store_kind_parse(const char *text, pf_store_kind *kind)
{
	if (strcmp(text, "pg") == 0)
		*kind = PF_STORE_PG;
	else if (strcmp(text, "s3") == 0)
		*kind = PF_STORE_S3;
	else
		return false;
	return true;
}

bool
pf_checksum_of(const pf_checksum_key *key, const void *data, size_t len, char out[PF_CHECKSUM_LEN + 1])
{
	unsigned char mac[PF_SHA256_LEN];

	if (key == NULL || !key->set)
		return false;
	pf_hmac_sha256(key->bytes, sizeof(key->bytes), data, len, mac);
	memcpy(out, KEYED_PREFIX, strlen(KEYED_PREFIX));
	pf_hex_encode(mac, sizeof(mac), out + strlen(KEYED_PREFIX));
	return true;
}

bool
pf_checksum_keyed(const char *text)
{
	return text != NULL && strncmp(text, KEYED_PREFIX, strlen(KEYED_PREFIX)) == 0;
}

bool
pf_checksum_parse(const char *text, unsigned char digest[32])
{
	unsigned char scratch[32];
	size_t		prefix;

	if (text == NULL)
		return false;
	if (pf_checksum_keyed(text))
		prefix = strlen(KEYED_PREFIX);
	else if (strncmp(text, PLAIN_PREFIX, strlen(PLAIN_PREFIX)) == 0)
		prefix = strlen(PLAIN_PREFIX);
	else
		return false;
	return pf_hex_decode(text + prefix, digest ? digest : scratch, 32);
}

bool
pf_checksum_verify(const pf_checksum_key *key, const void *data, size_t len, const char *checksum)
{
	unsigned char want[32];
	unsigned char have[32];

	if (!pf_checksum_parse(checksum, want))
		return false;
	if (pf_checksum_keyed(checksum))
	{
		if (key == NULL || !key->set)
			return false;
		pf_hmac_sha256(key->bytes, sizeof(key->bytes), data, len, have);
	}
	else
		pf_sha256(data, len, have);
	return CRYPTO_memcmp(want, have, sizeof(want)) == 0;
}

bool
pf_checksum_key_from_hex(const char *text, pf_checksum_key *key)
{
	if (text == NULL)
		return false;
	if (text[0] == '\\' && text[1] == 'x')
		text += 2;
	if (strlen(text) != 2 * PF_CHECKSUM_KEY_LEN || !pf_hex_decode(text, key->bytes, PF_CHECKSUM_KEY_LEN))
		return false;
	key->set = true;
	return true;
}

bool
pf_payload_key_valid(const char *key)
{
	size_t		len = strlen(key);
	const char *seg = key;

	if (len == 0 || len > PF_PAYLOAD_KEY_MAX || key[0] == '/')
		return false;
	for (const char *p = key; *p; p++)
		if ((unsigned char) *p < 0x20 || *p == 0x7f || *p == '\\')
			return false;
	/* a "." or ".." segment would make one key name two objects */
	for (;;)
	{
		const char *slash = strchr(seg, '/');
		size_t		n = slash ? (size_t) (slash - seg) : strlen(seg);

		if (n == 0 || (n == 1 && seg[0] == '.') || (n == 2 && seg[0] == '.' && seg[1] == '.'))
			return false;
		if (!slash)
			break;
		seg = slash + 1;
	}
	return true;
}

pf_result
pf_payload_ref_from_json(const json_t *json, pf_payload_ref *ref, pf_error *err)
{
	const json_t *store,
			   *key,
			   *checksum,
			   *size;

	memset(ref, 0, sizeof(*ref));
	if (!json_is_object(json))
		return pf_error_set(err, PF_ERR_INVALID, "bad_ref", "payload reference is not a JSON object");

	store = json_object_get(json, "store");
	key = json_object_get(json, "key");
	checksum = json_object_get(json, "checksum");
	size = json_object_get(json, "size");

	if (!json_is_string(store) || !pf_store_kind_parse(json_string_value(store), &ref->store))
		return pf_error_set(err, PF_ERR_INVALID, "bad_ref", "payload reference: store must be \"pg\" or \"s3\"");
	if (!json_is_string(key) || !pf_payload_key_valid(json_string_value(key)))
		return pf_error_set(err, PF_ERR_INVALID, "bad_ref", "payload reference: key is missing or not a valid object key");
	if (!json_is_string(checksum) || !pf_checksum_parse(json_string_value(checksum), NULL))
		return pf_error_set(err, PF_ERR_INVALID, "bad_ref",
							"payload reference: checksum must be hmac-sha256:<64 hex digits> (or sha256:)");
	if (!json_is_integer(size) || json_integer_value(size) < 0)
		return pf_error_set(err, PF_ERR_INVALID, "bad_ref", "payload reference: size must be a non-negative integer");

	ref->key = pf_strdup(json_string_value(key));
	/* lower-case so two spellings of one digest compare equal */
	{
		const char *text = json_string_value(checksum);
		size_t		n = strlen(text);	/* 71 or 76: parsed above */

		for (size_t i = 0; i < n; i++)
			ref->checksum[i] = (char) tolower((unsigned char) text[i]);
		ref->checksum[n] = '\0';
	}
	ref->size = (long long) json_integer_value(size);
	return PF_OK;
}

pf_result
pf_payload_ref_parse(const char *text, pf_payload_ref *ref, pf_error *err)
{
	json_error_t jerr;
	json_t	   *json = json_loads(text, JSON_REJECT_DUPLICATES, &jerr);
	pf_result	r;

	if (json == NULL)
	{
		memset(ref, 0, sizeof(*ref));
		return pf_error_set(err, PF_ERR_INVALID, "bad_ref", "payload reference is not valid JSON: %s", jerr.text);
	}
	r = pf_payload_ref_from_json(json, ref, err);
	json_decref(json);
	return r;
}

json_t *
pf_payload_ref_to_json(const pf_payload_ref *ref)
{
	return json_pack("{s:s, s:s, s:s, s:I}",
					 "store", pf_store_kind_name(ref->store),
					 "key", ref->key,
					 "checksum", ref->checksum,
					 "size", (json_int_t) ref->size);
}

char *
pf_payload_ref_dumps(const pf_payload_ref *ref)
{
	json_t	   *j = pf_payload_ref_to_json(ref);
	char	   *s = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);

	json_decref(j);
	if (s == NULL)
		abort();
	return s;
}

void
pf_payload_ref_copy(pf_payload_ref *dst, const pf_payload_ref *src)
{
	*dst = *src;
	dst->key = src->key ? pf_strdup(src->key) : NULL;
}

void
pf_payload_ref_free(pf_payload_ref *ref)
{
	free(ref->key);
	ref->key = NULL;
}
