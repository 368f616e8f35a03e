/*
 * role_generic.c
 *		--role http --step NAME and --role sql --step NAME: run a step added
 *		to the pipeline by SQL (payflow.add_step) without code of its own.
 *
 * The step's request event and input member are read from the database
 * at start-up (pipeline_check.c, which logs them): the worker refuses to
 * start (exit 2) for a step the newest pipeline version does not have.
 *
 * http: POST the step's input (a JSON object, as stored) to
 * PAYFLOW_STEP_URL with "Idempotency-Key: <operation id>:<step>", the
 * Authorization header PAYFLOW_STEP_AUTHORIZATION when set; time-outs
 * PAYFLOW_HTTP_CONNECT_TIMEOUT_MS and PAYFLOW_STEP_TIMEOUT_MS; TLS verified
 * unless PAYFLOW_STEP_TLS_VERIFY=false (loopback only). The 2xx answer, a
 * JSON object, is the step's result as it came; other answers are
 * classified like the invoice API's, and an error answer's body is
 * redacted (PAYFLOW_RAW_ERROR_TEXT keeps it, masked).
 *
 * sql: run PAYFLOW_STEP_FUNCTION (a function (operation_id text, input
 * jsonb) returning jsonb, named with its argument types) in the
 * transaction that completes the step; its answer is the step's result.
 * The login needs the payflow_postprocess_worker role (claim, complete,
 * invoke_postprocess) and EXECUTE on the function.
 */
#include "step_hook.h"

#include <ctype.h>
#include <stdio.h>

/* "RISK_CHECK" → "risk_check" (the errors' source) and "the input of step RISK_CHECK" */
static void
names_of(const char *step, char *source, size_t source_len, char *input_name, size_t input_name_len)
{
	snprintf(source, source_len, "%s", step);
	for (char *c = source; *c; c++)
		*c = (char) tolower((unsigned char) *c);
	snprintf(input_name, input_name_len, "the input of step %s", step);
}

static void *
http_step_init(const role_ops *role, const pf_config *cfg, char *why, size_t why_len)
{
	char		source[80];
	char		input_name[120];
	step_hook  *hook;

	(void) why;
	(void) why_len;
	names_of(role->step, source, sizeof(source), input_name, sizeof(input_name));
	hook = step_hook_http(cfg, source, input_name, cfg->step_url, "PAYFLOW_STEP_URL", cfg->step_authorization,
						  cfg->step_timeout_ms, cfg->step_tls_verify != 0);
	hook->redact_errors = true;
	return hook;
}

static void *
sql_step_init(const role_ops *role, const pf_config *cfg, char *why, size_t why_len)
{
	char		source[80];
	char		input_name[120];

	names_of(role->step, source, sizeof(source), input_name, sizeof(input_name));
	return step_hook_sql(cfg, source, input_name, cfg->step_function, "PAYFLOW_STEP_FUNCTION", why, why_len);
}

const role_ops http_step_role = {
	.name = "http",
	.program = PF_PROGRAM_HTTP_STEP,
	.event_type = PF_EVENT_STEP_REQUESTED,
	.step_from_argv = true,
	.init = http_step_init,
	STEP_HOOK_OPS,
};

const role_ops sql_step_role = {
	.name = "sql",
	.program = PF_PROGRAM_SQL_STEP,
	.event_type = PF_EVENT_STEP_REQUESTED,
	.step_from_argv = true,
	.init = sql_step_init,
	STEP_HOOK_OPS,
};
