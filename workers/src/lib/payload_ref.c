/*
 * payload_ref.c
 *		Parsing, formatting and verifying claim-check references.
 */
#include "payflow/payload_ref.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "payflow/buf.h"
#include "payflow/digest.h"

#define CHECKSUM_PREFIX "sha256:"

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

void
pf_checksum_of(const void *data, size_t len, char out[PF_CHECKSUM_LEN + 1])
{
	memcpy(out, CHECKSUM_PREFIX, strlen(CHECKSUM_PREFIX));
	pf_sha256_hex(data, len, out + strlen(CHECKSUM_PREFIX));
}

bool
pf_checksum_parse(const char *text, unsigned char digest[32])
{
	unsigned char scratch[32];

	if (text == NULL || strncmp(text, CHECKSUM_PREFIX, strlen(CHECKSUM_PREFIX)) != 0)
		return false;
	return pf_hex_decode(text + strlen(CHECKSUM_PREFIX), digest ? digest : scratch, 32);
}

bool
pf_checksum_verify(const void *data, size_t len, const char *checksum)
{
	unsigned char want[32];
	unsigned char have[32];

	if (!pf_checksum_parse(checksum, want))
		return false;
	pf_sha256(data, len, have);
	return memcmp(want, have, sizeof(want)) == 0;
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
		return pf_error_set(err, PF_ERR_INVALID, "bad_ref", "payload reference: checksum must be sha256:<64 hex digits>");
	if (!json_is_integer(size) || json_integer_value(size) < 0)
		return pf_error_set(err, PF_ERR_INVALID, "bad_ref", "payload reference: size must be a non-negative integer");

	ref->key = pf_strdup(json_string_value(key));
	/* lower-case so two spellings of one digest compare equal */
	for (size_t i = 0; i < PF_CHECKSUM_LEN; i++)
		ref->checksum[i] = (char) tolower((unsigned char) json_string_value(checksum)[i]);
	ref->checksum[PF_CHECKSUM_LEN] = '\0';
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
