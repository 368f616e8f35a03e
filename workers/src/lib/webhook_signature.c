/*
 * webhook_signature.c
 *		Signing a webhook delivery (the scheme is described in the header).
 */
#include "payflow/webhook_signature.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "payflow/buf.h"
#include "payflow/digest.h"

void
pf_webhook_signature(const char *secret, time_t t, const char *body, size_t body_len,
					 char out[PF_WEBHOOK_SIGNATURE_LEN])
{
	pf_buf		signed_text = PF_BUF_INIT;
	unsigned char mac[PF_SHA256_LEN];
	char		hex[PF_SHA256_HEX_LEN + 1];

	pf_buf_appendf(&signed_text, "%lld.", (long long) t);
	pf_buf_append(&signed_text, body, body_len);
	pf_hmac_sha256(secret, strlen(secret), signed_text.data, signed_text.len, mac);
	pf_hex_encode(mac, sizeof(mac), hex);
	snprintf(out, PF_WEBHOOK_SIGNATURE_LEN, "t=%lld,v1=%s", (long long) t, hex);
	pf_buf_free(&signed_text);
}
