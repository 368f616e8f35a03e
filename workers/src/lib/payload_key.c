/*
 * payload_key.c
 *		Where payloads live: the key rules of payload_ref.h.
 */
#include "payflow/payload_ref.h"

#include <stdio.h>
#include <string.h>

#define KEYED_PREFIX "hmac-sha256:"

bool
pf_payload_key(const char *operation_id, const char *name, char out[PF_PAYLOAD_KEY_MAX + 1])
{
	int			n = snprintf(out, PF_PAYLOAD_KEY_MAX + 1, "payments/%s/%s", operation_id, name);

	return n >= 0 && n <= PF_PAYLOAD_KEY_MAX;
}

bool
pf_request_key(const char *checksum, char out[PF_PAYLOAD_KEY_MAX + 1])
{
	int			n;

	if (strncmp(checksum, KEYED_PREFIX, strlen(KEYED_PREFIX)) != 0)
		return false;
	n = snprintf(out, PF_PAYLOAD_KEY_MAX + 1, "requests/hmac-%s.json", checksum + strlen(KEYED_PREFIX));
	return n >= 0 && n <= PF_PAYLOAD_KEY_MAX;
}
