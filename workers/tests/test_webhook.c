/*
 * test_webhook.c
 *		The webhook signature against values computed independently (Node's
 *		crypto.createHmac), so the worker and any receiver agree on the bytes
 *		signed: "<t>.<body>", the secret's bytes as the key, lower-case hex.
 */
#include <string.h>

#include "payflow/webhook_signature.h"
#include "unit.h"

static void
test_signature_vectors(void)
{
	char		sig[PF_WEBHOOK_SIGNATURE_LEN];

	pf_webhook_signature("whsec_test", 1733011200, "{\"a\":1}", 7, sig);
	CHECK_STR(sig, "t=1733011200,v1=16b6899fcbb85a3b31be830b04adfda8bb10e98840cfd0632631c242c1e77979");
	/* an empty body signs "<t>." */
	pf_webhook_signature("whsec_test", 0, "", 0, sig);
	CHECK_STR(sig, "t=0,v1=a2fa7a43c6a1cf2e784eaf3327d65c65b3d2b790320ebed9aa5661bc42a8cccd");
	/* only body_len bytes count: a body is not a C string */
	pf_webhook_signature("whsec_test", 1733011200, "{\"a\":1}trailing", 7, sig);
	CHECK_STR(sig, "t=1733011200,v1=16b6899fcbb85a3b31be830b04adfda8bb10e98840cfd0632631c242c1e77979");
}

static void
test_signature_changes(void)
{
	char		base[PF_WEBHOOK_SIGNATURE_LEN];
	char		other[PF_WEBHOOK_SIGNATURE_LEN];

	pf_webhook_signature("whsec_test", 1733011200, "{\"a\":1}", 7, base);
	pf_webhook_signature("whsec_tesT", 1733011200, "{\"a\":1}", 7, other);
	CHECK(strcmp(base + 16, other + 16) != 0);	/* another secret */
	pf_webhook_signature("whsec_test", 1733011201, "{\"a\":1}", 7, other);
	CHECK(strcmp(base + 16, other + 16) != 0);	/* another time */
	pf_webhook_signature("whsec_test", 1733011200, "{\"a\":2}", 7, other);
	CHECK(strcmp(base + 16, other + 16) != 0);	/* another body */
	/* the longest timestamp still fits */
	pf_webhook_signature("k", (time_t) 9223372036854775807LL, "x", 1, other);
	CHECK(strlen(other) == strlen("t=9223372036854775807,v1=") + 64);
}

int
main(void)
{
	test_signature_vectors();
	test_signature_changes();
	return unit_finish("test_webhook");
}
