/*
 * test_webhook.c
 *		The webhook signature against values computed independently (Node's
 *		crypto.createHmac), so the worker and any receiver agree on the bytes
 *		signed: "<t>.<body>", the secret's bytes as the key, lower-case hex.
 *		And the webhook role's settings: defaults, bounds, their one rule.
 */
#include <stdlib.h>
#include <string.h>

#include "payflow/config.h"
#include "payflow/webhook_signature.h"
#include "unit.h"

static void
test_signature_vectors(void)
{
	char		sig[PF_WEBHOOK_SIGNATURE_LEN];

	pf_webhook_signature("whsec_test", NULL, 1733011200, "{\"a\":1}", 7, sig);
	CHECK_STR(sig, "t=1733011200,v1=16b6899fcbb85a3b31be830b04adfda8bb10e98840cfd0632631c242c1e77979");
	/* an empty body signs "<t>." */
	pf_webhook_signature("whsec_test", NULL, 0, "", 0, sig);
	CHECK_STR(sig, "t=0,v1=a2fa7a43c6a1cf2e784eaf3327d65c65b3d2b790320ebed9aa5661bc42a8cccd");
	/* during a rotation: the new secret's v1, then the previous one's */
	pf_webhook_signature("whsec_new", "whsec_test", 1733011200, "{\"a\":1}", 7, sig);
	CHECK_STR(sig, "t=1733011200,v1=c1c94e176953c8809b0b1f39c8f0f3f73ee2edce02fd940a8f3cc582621e7c8c,v1=16b6899fcbb85a3b31be830b04adfda8bb10e98840cfd0632631c242c1e77979");
	/* only body_len bytes count: a body is not a C string */
	pf_webhook_signature("whsec_test", NULL, 1733011200, "{\"a\":1}trailing", 7, sig);
	CHECK_STR(sig, "t=1733011200,v1=16b6899fcbb85a3b31be830b04adfda8bb10e98840cfd0632631c242c1e77979");
}

static void
test_signature_changes(void)
{
	char		base[PF_WEBHOOK_SIGNATURE_LEN];
	char		other[PF_WEBHOOK_SIGNATURE_LEN];

	pf_webhook_signature("whsec_test", NULL, 1733011200, "{\"a\":1}", 7, base);
	pf_webhook_signature("whsec_tesT", NULL, 1733011200, "{\"a\":1}", 7, other);
	CHECK(strcmp(base + 16, other + 16) != 0);	/* another secret */
	pf_webhook_signature("whsec_test", NULL, 1733011201, "{\"a\":1}", 7, other);
	CHECK(strcmp(base + 16, other + 16) != 0);	/* another time */
	pf_webhook_signature("whsec_test", NULL, 1733011200, "{\"a\":2}", 7, other);
	CHECK(strcmp(base + 16, other + 16) != 0);	/* another body */
	/* the longest timestamp still fits */
	pf_webhook_signature("k", NULL, (time_t) 9223372036854775807LL, "x", 1, other);
	CHECK(strlen(other) == strlen("t=9223372036854775807,v1=") + 64);
	/* and so do two signatures */
	pf_webhook_signature("k", "k2", (time_t) 9223372036854775807LL, "x", 1, other);
	CHECK(strlen(other) == strlen("t=9223372036854775807,v1=,v1=") + 2 * 64);
}

static bool
load(pf_config *cfg, char *error)
{
	return pf_config_load(cfg, PF_PROGRAM_WORKER | PF_PROGRAM_WEBHOOK, error, 512);
}

static void
test_settings(void)
{
	static const char *const vars[] = {
		"PAYFLOW_CONFIG_FILE", "PAYFLOW_WEBHOOK_MAX_ATTEMPTS", "PAYFLOW_WEBHOOK_TIMEOUT_MS",
		"PAYFLOW_WEBHOOK_BACKOFF_BASE_SECONDS", "PAYFLOW_WEBHOOK_BACKOFF_MAX_SECONDS", "PAYFLOW_WEBHOOK_ALLOW_HTTP",
		"PAYFLOW_STORE", NULL
	};
	pf_config	cfg;
	char		error[512];

	for (int i = 0; vars[i]; i++)
		unsetenv(vars[i]);
	setenv("PAYFLOW_DATABASE_URL", "postgresql://payflow@localhost:5432/payflow", 1);
	setenv("PAYFLOW_QUEUE_URL", "http://127.0.0.1:4566/000000000000/operation-events", 1);
	setenv("AWS_REGION", "eu-west-1", 1);
	setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE", 1);
	setenv("AWS_SECRET_ACCESS_KEY", "secret-secret-secret", 1);

	/* nothing of its own is required; the defaults */
	if (CHECK(load(&cfg, error)))
	{
		CHECK(cfg.webhook_max_attempts == 8);
		CHECK(cfg.webhook_timeout_ms == 10000);
		CHECK(cfg.webhook_backoff_base_s == 30);
		CHECK(cfg.webhook_backoff_max_s == 3600);
		CHECK(cfg.webhook_allow_http == 0);
		pf_config_free(&cfg);
	}
	setenv("PAYFLOW_WEBHOOK_MAX_ATTEMPTS", "3", 1);
	setenv("PAYFLOW_WEBHOOK_BACKOFF_BASE_SECONDS", "2", 1);
	setenv("PAYFLOW_WEBHOOK_BACKOFF_MAX_SECONDS", "8", 1);
	setenv("PAYFLOW_WEBHOOK_ALLOW_HTTP", "true", 1);
	if (CHECK(load(&cfg, error)))
	{
		CHECK(cfg.webhook_max_attempts == 3 && cfg.webhook_backoff_base_s == 2 && cfg.webhook_backoff_max_s == 8);
		CHECK(cfg.webhook_allow_http == 1);
		pf_config_free(&cfg);
	}
	/* SQS hides a message for 12 h at most */
	setenv("PAYFLOW_WEBHOOK_BACKOFF_MAX_SECONDS", "43201", 1);
	CHECK(!load(&cfg, error));
	CHECK_STR(error, "invalid PAYFLOW_WEBHOOK_BACKOFF_MAX_SECONDS: \"43201\" is not an integer from 1 to 43200");
	setenv("PAYFLOW_WEBHOOK_BACKOFF_MAX_SECONDS", "1", 1);
	CHECK(!load(&cfg, error));
	CHECK_STR(error, "invalid PAYFLOW_WEBHOOK_BACKOFF_MAX_SECONDS: below PAYFLOW_WEBHOOK_BACKOFF_BASE_SECONDS");
	unsetenv("PAYFLOW_WEBHOOK_BACKOFF_MAX_SECONDS");
	setenv("PAYFLOW_WEBHOOK_MAX_ATTEMPTS", "0", 1);
	CHECK(!load(&cfg, error));
	CHECK_STR(error, "invalid PAYFLOW_WEBHOOK_MAX_ATTEMPTS: \"0\" is not an integer from 1 to 100");
	setenv("PAYFLOW_WEBHOOK_MAX_ATTEMPTS", "8", 1);
	setenv("PAYFLOW_WEBHOOK_ALLOW_HTTP", "loopback", 1);
	CHECK(!load(&cfg, error));
	CHECK_STR(error, "invalid PAYFLOW_WEBHOOK_ALLOW_HTTP: \"loopback\" is not one of false/true");
	setenv("PAYFLOW_WEBHOOK_ALLOW_HTTP", "false", 1);
	setenv("PAYFLOW_WEBHOOK_TIMEOUT_MS", "50", 1);
	CHECK(!load(&cfg, error));
	CHECK_STR(error, "invalid PAYFLOW_WEBHOOK_TIMEOUT_MS: \"50\" is not an integer from 100 to 600000");
	for (int i = 0; vars[i]; i++)
		unsetenv(vars[i]);
}

int
main(void)
{
	test_signature_vectors();
	test_signature_changes();
	test_settings();
	return unit_finish("test_webhook");
}
