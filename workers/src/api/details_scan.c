/*
 * details_scan.c
 *		Locate the top-level "details" object of a POST /payments body while
 *		it arrives, and hash exactly its bytes on the way.
 *
 * This is a tokenizer, not a validator: it follows strings, escapes and
 * nesting only far enough to know where "details" starts and ends. The
 * body is still parsed in full (jansson) before anything is stored; the
 * scan only saves a second pass over a large body and makes its SHA-256
 * ready with the last byte (an HMAC under the payload checksum key, once
 * the API has read it: payments.c). A member name written with escapes
 * ("d\u0065tails") or a repeated one makes the scan give up (ambiguous),
 * and the caller hashes the member found by the parser instead.
 */
#include "api.h"

#include <string.h>

#include "payflow/digest.h"

#define KEY_MAX 16

void
details_scan_init(details_scan *scan, const pf_checksum_key *key)
{
	memset(scan, 0, sizeof(*scan));
	scan->sha = EVP_MD_CTX_new();
	if (scan->sha == NULL || !EVP_DigestInit_ex(scan->sha, EVP_sha256(), NULL))
		abort();
	if (key != NULL && key->set)
	{
		/* HMAC (RFC 2104) as it streams: the inner hash starts with key ^ ipad */
		unsigned char inner_pad[64];

		memset(inner_pad, 0x36, sizeof(inner_pad));
		memset(scan->outer_pad, 0x5c, sizeof(scan->outer_pad));
		for (size_t i = 0; i < sizeof(key->bytes); i++)
		{
			inner_pad[i] ^= key->bytes[i];
			scan->outer_pad[i] ^= key->bytes[i];
		}
		if (!EVP_DigestUpdate(scan->sha, inner_pad, sizeof(inner_pad)))
			abort();
		scan->keyed = true;
	}
}

void
details_scan_free(details_scan *scan)
{
	EVP_MD_CTX_free(scan->sha);
	scan->sha = NULL;
	pf_buf_free(&scan->key);
}

static void
hash(details_scan *scan, const char *data, size_t len)
{
	if (len > 0 && !EVP_DigestUpdate(scan->sha, data, len))
		abort();
}

void
details_scan_feed(details_scan *scan, const char *data, size_t len)
{
	size_t		hash_from = 0;

	for (size_t i = 0; i < len; i++)
	{
		char		c = data[i];

		if (scan->in_string)
		{
			if (scan->escape)
				scan->escape = false;
			else if (c == '\\')
			{
				scan->escape = true;
				if (scan->collecting_key)
					scan->key_plain = false;
			}
			else if (c == '"')
			{
				scan->in_string = false;
				if (scan->collecting_key)
				{
					scan->collecting_key = false;
					scan->key_is_details = scan->key_plain && scan->key.len == 7 &&
						memcmp(scan->key.data, "details", 7) == 0;
					/* a name written with escapes may still be "details" */
					if (!scan->key_plain)
						scan->ambiguous = true;
				}
			}
			else if (scan->collecting_key && scan->key.len <= KEY_MAX)
				pf_buf_append_char(&scan->key, c);
			continue;
		}
		switch (c)
		{
			case '"':
				scan->in_string = true;
				if (scan->depth == 1 && scan->expect_key)
				{
					scan->expect_key = false;
					pf_buf_reset(&scan->key);
					scan->key_plain = true;
					scan->collecting_key = true;
				}
				break;
			case '{':
			case '[':
				if (scan->depth == 1 && c == '{' && scan->key_is_details)
				{
					if (scan->found || scan->in_details)
						scan->ambiguous = true;
					scan->in_details = true;
					scan->start = scan->offset + i;
					hash_from = i;
				}
				scan->depth++;
				if (scan->depth == 1 && c == '{')
					scan->expect_key = true;
				break;
			case '}':
			case ']':
				scan->depth--;
				if (scan->in_details && scan->depth == 1)
				{
					scan->in_details = false;
					scan->end = scan->offset + i + 1;
					if (!scan->found)
						hash(scan, data + hash_from, i + 1 - hash_from);
					scan->found = true;
				}
				break;
			case ',':
				if (scan->depth == 1)
				{
					scan->expect_key = true;
					scan->key_is_details = false;
				}
				break;
			default:
				break;
		}
	}
	if (scan->in_details && !scan->found)
		hash(scan, data + hash_from, len - hash_from);
	scan->offset += len;
}

bool
details_scan_finish(details_scan *scan)
{
	unsigned int n = sizeof(scan->digest);

	if (!scan->found || scan->ambiguous || scan->in_details)
		return false;
	if (!EVP_DigestFinal_ex(scan->sha, scan->digest, &n))
		abort();
	if (scan->keyed)
	{
		unsigned char outer[64 + 32];

		memcpy(outer, scan->outer_pad, 64);
		memcpy(outer + 64, scan->digest, 32);
		pf_sha256(outer, sizeof(outer), scan->digest);
	}
	return true;
}
