/*
 * role_postprocess.c
 *		--role postprocess: turn the payment result into the invoice input
 *		with the operator's post-processing hook, a SQL or an HTTP hook
 *		step (step_hook.h).
 *
 * SQL hook (PAYFLOW_POSTPROCESS_FUNCTION, a regprocedure such as
 * "payflow.default_postprocess(text,jsonb)"): it runs inside the statement
 * that completes the step, so whatever it writes commits in the
 * transaction that advances the operation and emits InvoiceRequested, or
 * not at all; its answer is stored by the extension in its own (pg) store,
 * whatever PAYFLOW_STORE says. With neither setting the shipped
 * payflow.default_postprocess(text,jsonb) runs (said at start-up).
 *
 * HTTP hook (PAYFLOW_POSTPROCESS_URL): POST
 * {"operationId":…,"paymentResult":{…}} with "Idempotency-Key:
 * <operation id>:post_process"; the 2xx answer, a JSON object, is the
 * invoice input and is stored as it came (amounts keep their digits).
 * Time-outs PAYFLOW_HTTP_CONNECT_TIMEOUT_MS and
 * PAYFLOW_POSTPROCESS_TIMEOUT_MS, TLS verified unless
 * PAYFLOW_POSTPROCESS_TLS_VERIFY=false (loopback only),
 * PAYFLOW_POSTPROCESS_AUTHORIZATION as the Authorization header (a secret).
 */
#include "step_hook.h"

#define DEFAULT_POSTPROCESS "payflow.default_postprocess(text,jsonb)"

static void *
postprocess_init(const role_ops *role, const pf_config *cfg, char *why, size_t why_len)
{
	step_hook  *hook;

	(void) role;
	/* the settings refuse both at once */
	if (cfg->postprocess_url)
	{
		hook = step_hook_http(cfg, "postprocess", "the payment result", cfg->postprocess_url,
							  "PAYFLOW_POSTPROCESS_URL", cfg->postprocess_authorization,
							  cfg->postprocess_timeout_ms, cfg->postprocess_tls_verify != 0);
		hook->wrap_member = "paymentResult";
		hook->redact_errors = true;
		pf_log_write(PF_LOG_INFO, NULL, json_pack("{s:s}", "url", cfg->postprocess_url),
					 "post-processing hook: HTTP");
		return hook;
	}
	hook = step_hook_sql(cfg, "postprocess", "the payment result",
						 cfg->postprocess_function ? cfg->postprocess_function : DEFAULT_POSTPROCESS,
						 "PAYFLOW_POSTPROCESS_FUNCTION", why, why_len);
	if (hook == NULL)
		return NULL;
	if (cfg->postprocess_function)
		pf_log_write(PF_LOG_INFO, NULL, json_pack("{s:s}", "function", hook->function),
					 "post-processing hook: SQL function");
	else
		pf_log_write(PF_LOG_INFO, NULL, json_pack("{s:s}", "function", hook->function),
					 "post-processing hook: the shipped %s (neither PAYFLOW_POSTPROCESS_FUNCTION nor "
					 "PAYFLOW_POSTPROCESS_URL is set)", DEFAULT_POSTPROCESS);
	return hook;
}

const role_ops postprocess_role = {
	.name = "postprocess",
	.program = PF_PROGRAM_POSTPROCESS,
	.event_type = PF_EVENT_PAYMENT_COMPLETED,
	.step = "POST_PROCESS",
	.init = postprocess_init,
	STEP_HOOK_OPS,
};
