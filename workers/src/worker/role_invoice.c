/*
 * role_invoice.c
 *		--role invoice: create the operation's invoice at the invoice API,
 *		an HTTP hook step (step_hook.h).
 *
 * The step's input, the invoice input the post-processing hook made, is
 * POSTed byte for byte as it is stored (amounts keep their digits) to
 * PAYFLOW_INVOICE_URL with "Idempotency-Key: <operation id>:create_invoice",
 * so the API creates one invoice per operation and answers a retry, a
 * takeover or a duplicate message with the same one. A 2xx answer names
 * the invoice in "id" or "invoiceId"; the step's result is
 * {"invoiceId":…,"httpStatus":…}, and a 2xx without an id is a permanent
 * error (no_invoice_id): the API did something the worker cannot name.
 *
 * Time-outs PAYFLOW_HTTP_CONNECT_TIMEOUT_MS and PAYFLOW_INVOICE_TIMEOUT_MS
 * (the whole call), TLS verified unless PAYFLOW_INVOICE_TLS_VERIFY=false
 * (loopback URLs only). PAYFLOW_INVOICE_AUTHORIZATION, when set, is sent as
 * the Authorization header (a secret setting, redacted from logs).
 */
#include "step_hook.h"

static void *
invoice_init(const role_ops *role, const pf_config *cfg, char *why, size_t why_len)
{
	static const char *const id_members[] = {"id", "invoiceId", NULL};
	step_hook  *hook;

	(void) role;
	(void) why;
	(void) why_len;
	hook = step_hook_http(cfg, "invoice", "the invoice input", cfg->invoice_url, "PAYFLOW_INVOICE_URL",
						  cfg->invoice_authorization, cfg->invoice_timeout_ms, cfg->invoice_tls_verify != 0);
	hook->id_members = id_members;
	hook->result_id = "invoiceId";
	hook->missing_id_code = "no_invoice_id";
	hook->answer_noun = "invoice";
	return hook;
}

const role_ops invoice_role = {
	.name = "invoice",
	.program = PF_PROGRAM_INVOICE,
	.event_type = PF_EVENT_INVOICE_REQUESTED,
	.step = "CREATE_INVOICE",
	.init = invoice_init,
	STEP_HOOK_OPS,
};
