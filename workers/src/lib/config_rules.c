/*
 * config_rules.c
 *		Rules that one row of the settings table cannot state: settings that
 *		go together or exclude each other, requirements that depend on
 *		another value (a bucket for the s3 store, the statements of the
 *		legacy mode) or on the program (AWS credentials for the programs that
 *		call AWS, one post-processing hook for that role).
 */
#include "config_table.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "payflow/http.h"
#include "payflow/sqlstate_rules.h"

bool
pf_config_check_rules(const pf_config *cfg, unsigned programs, char *error, size_t error_len)
{
	bool		uses_aws = (programs & PF_PROGRAM_USES_AWS) != 0 || cfg->store == PF_STORE_S3;

	if (cfg->store == PF_STORE_S3 && cfg->s3_bucket == NULL)
		return pf_config_failf(error, error_len, "missing PAYFLOW_S3_BUCKET: PAYFLOW_STORE is s3");
	if ((cfg->aws_access_key_id == NULL) != (cfg->aws_secret_access_key == NULL))
		return pf_config_failf(error, error_len, "missing %s: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY go together",
							   cfg->aws_access_key_id ? "AWS_SECRET_ACCESS_KEY" : "AWS_ACCESS_KEY_ID");
	if (cfg->aws_container_credentials_relative_uri &&
		cfg->aws_container_credentials_relative_uri[0] != '/')
		return pf_config_failf(error, error_len, "invalid AWS_CONTAINER_CREDENTIALS_RELATIVE_URI: expected a path starting with /");
	if (uses_aws)
	{
		if (cfg->aws_region == NULL)
			return pf_config_failf(error, error_len, "missing AWS_REGION");
		if (cfg->aws_access_key_id == NULL && cfg->aws_container_credentials_relative_uri == NULL &&
			cfg->aws_container_credentials_full_uri == NULL)
			return pf_config_failf(error, error_len, "missing AWS_ACCESS_KEY_ID: no AWS credentials (set AWS_ACCESS_KEY_ID and "
								   "AWS_SECRET_ACCESS_KEY, or run where AWS_CONTAINER_CREDENTIALS_* is set)");
	}
	/* neither hook: the role runs the shipped payflow.default_postprocess (role_postprocess.c) */
	if ((programs & PF_PROGRAM_POSTPROCESS) && cfg->postprocess_function && cfg->postprocess_url)
		return pf_config_failf(error, error_len, "invalid PAYFLOW_POSTPROCESS_URL: set PAYFLOW_POSTPROCESS_FUNCTION or PAYFLOW_POSTPROCESS_URL, not both");
	/* unverified TLS only where no network lies between (a local proxy or stand-in) */
	if ((programs & PF_PROGRAM_INVOICE) && !cfg->invoice_tls_verify && cfg->invoice_url &&
		!pf_url_is_loopback(cfg->invoice_url))
		return pf_config_failf(error, error_len, "invalid PAYFLOW_INVOICE_TLS_VERIFY: false is accepted only for a loopback "
							   "PAYFLOW_INVOICE_URL (localhost, 127.0.0.0/8, [::1])");
	if ((programs & PF_PROGRAM_API) && cfg->api_max_streams >= cfg->api_max_connections)
		return pf_config_failf(error, error_len, "invalid PAYFLOW_API_MAX_CONNECTIONS: %d is not above PAYFLOW_API_MAX_STREAMS (%d): "
							   "every event stream holds a connection", cfg->api_max_connections, cfg->api_max_streams);
	if (cfg->webhook_backoff_max_s < cfg->webhook_backoff_base_s)
		return pf_config_failf(error, error_len, "invalid PAYFLOW_WEBHOOK_BACKOFF_MAX_SECONDS: below PAYFLOW_WEBHOOK_BACKOFF_BASE_SECONDS");
	if ((programs & PF_PROGRAM_HTTP_STEP) && !cfg->step_tls_verify && cfg->step_url &&
		!pf_url_is_loopback(cfg->step_url))
		return pf_config_failf(error, error_len, "invalid PAYFLOW_STEP_TLS_VERIFY: false is accepted only for a loopback "
							   "PAYFLOW_STEP_URL (localhost, 127.0.0.0/8, [::1])");
	if ((programs & PF_PROGRAM_POSTPROCESS) && !cfg->postprocess_tls_verify && cfg->postprocess_url &&
		!pf_url_is_loopback(cfg->postprocess_url))
		return pf_config_failf(error, error_len, "invalid PAYFLOW_POSTPROCESS_TLS_VERIFY: false is accepted only for a loopback "
							   "PAYFLOW_POSTPROCESS_URL (localhost, 127.0.0.0/8, [::1])");
	if (programs & PF_PROGRAM_PAYMENT)
	{
		if (cfg->legacy_mode == PF_LEGACY_BLOCKING && cfg->legacy_call == NULL)
			return pf_config_failf(error, error_len, "missing PAYFLOW_LEGACY_CALL: PAYFLOW_LEGACY_MODE is blocking");
		if (cfg->legacy_mode == PF_LEGACY_SUBMIT_POLL && cfg->legacy_submit == NULL)
			return pf_config_failf(error, error_len, "missing PAYFLOW_LEGACY_SUBMIT: PAYFLOW_LEGACY_MODE is submit-poll");
		if (cfg->legacy_mode == PF_LEGACY_SUBMIT_POLL && cfg->legacy_status == NULL)
			return pf_config_failf(error, error_len, "missing PAYFLOW_LEGACY_STATUS: PAYFLOW_LEGACY_MODE is submit-poll");
	}
	{
		pf_sqlstate_rules rules;
		char		why[256];

		if (!pf_sqlstate_rules_init(&rules, cfg->legacy_retryable_sqlstates, cfg->legacy_permanent_sqlstates,
									why, sizeof(why)))
			return pf_config_failf(error, error_len, "invalid %s: %s",
								   strncmp(why, "retryable", 9) == 0 ? "PAYFLOW_LEGACY_RETRYABLE_SQLSTATES"
								   : "PAYFLOW_LEGACY_PERMANENT_SQLSTATES", why);
		pf_sqlstate_rules_free(&rules);
	}
	/* header values: a line break would let them add headers of their own */
	{
		const char *const names[] = {"PAYFLOW_INVOICE_AUTHORIZATION", "PAYFLOW_POSTPROCESS_AUTHORIZATION",
		"PAYFLOW_STEP_AUTHORIZATION"};
		const char *const values[] = {cfg->invoice_authorization, cfg->postprocess_authorization,
		cfg->step_authorization};

		for (int i = 0; i < 3; i++)
			for (const char *c = values[i]; c && *c; c++)
				if (iscntrl((unsigned char) *c))
					return pf_config_failf(error, error_len, "invalid %s: holds a control character", names[i]);
	}
	return true;
}
