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

/* v1 of one secret: hex HMAC-SHA256 over "<t>.<body>" */
static void
signature_v1(const char *secret, const pf_buf *signed_text, char hex[PF_SHA256_HEX_LEN + 1])
{
	unsigned char mac[PF_SHA256_LEN];

	pf_hmac_sha256(secret, strlen(secret), signed_text->data, signed_text->len, mac);
	pf_hex_encode(mac, sizeof(mac), hex);
}

void
pf_webhook_signature(const char *secret, const char *previous, time_t t, const char *body, size_t body_len,
					 char out[PF_WEBHOOK_SIGNATURE_LEN])
{
	pf_buf		signed_text = PF_BUF_INIT;
	char		hex[PF_SHA256_HEX_LEN + 1];
	char		previous_hex[PF_SHA256_HEX_LEN + 1];

	pf_buf_appendf(&signed_text, "%lld.", (long long) t);
	pf_buf_append(&signed_text, body, body_len);
	signature_v1(secret, &signed_text, hex);
	if (previous == NULL)
		snprintf(out, PF_WEBHOOK_SIGNATURE_LEN, "t=%lld,v1=%s", (long long) t, hex);
	else
	{
		signature_v1(previous, &signed_text, previous_hex);
		snprintf(out, PF_WEBHOOK_SIGNATURE_LEN, "t=%lld,v1=%s,v1=%s", (long long) t, hex, previous_hex);
	}
	pf_buf_free(&signed_text);
}
