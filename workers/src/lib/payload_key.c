/*
 * payload_key.c
 *		Where payloads live: the key rules of payload_ref.h.
 */
#include "payflow/payload_ref.h"

#include <stdio.h>
#include <string.h>

#define CHECKSUM_PREFIX "sha256:"

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

	if (strncmp(checksum, CHECKSUM_PREFIX, strlen(CHECKSUM_PREFIX)) != 0)
		return false;
	n = snprintf(out, PF_PAYLOAD_KEY_MAX + 1, "requests/sha256-%s.json", checksum + strlen(CHECKSUM_PREFIX));
	return n >= 0 && n <= PF_PAYLOAD_KEY_MAX;
}
