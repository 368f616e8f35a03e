/*
 * step_hook.h
 *		A step whose work is one call: an HTTP POST or a SQL function in
 *		payflow's own database. The invoice and post-processing roles and
 *		the generic --role http|sql --step NAME are configurations of it.
 *
 * HTTP: the step's input (a JSON object) is POSTed, as it is stored or
 * wrapped as {"operationId":…,"<wrap_member>":<input>}, with
 * "Idempotency-Key: <operation id>:<step>" and the configured
 * Authorization header. The answer is classified by http_outcome.h (2xx
 * done; 408/409/425/429 and 5xx except 501/505 retryable, honouring
 * Retry-After; other 4xx permanent; no answer retryable). A 2xx answer is
 * the step's result as it came (numbers keep their digits), or, with
 * id_members, {"<result_id>":<the id it names>,"httpStatus":…} and a
 * permanent error when it names none.
 *
 * SQL: the function (a regprocedure taking (text, jsonb) and returning
 * jsonb) runs inside the statement that completes the step, through
 * payflow.invoke_postprocess, so what it writes commits with the step's
 * completion or not at all; usually the claim is in that statement too.
 */
#ifndef PAYFLOW_STEP_HOOK_H
#define PAYFLOW_STEP_HOOK_H

#include "worker.h"

#include "payflow/http_call.h"

typedef enum step_hook_kind
{
	STEP_HOOK_HTTP,
	STEP_HOOK_SQL
} step_hook_kind;

typedef struct step_hook
{
	step_hook_kind kind;
	const pf_config *cfg;
	char	   *source;			/* errors' "source", log words: "invoice", "risk_check" */
	char	   *input_name;		/* "the invoice input": a message on a bad input */
	bool		raw_error_text; /* PAYFLOW_RAW_ERROR_TEXT */

	/* STEP_HOOK_HTTP */
	const char *url;
	char	   *authorization;	/* "Authorization: <value>", or NULL */
	int			timeout_ms;
	bool		tls_verify;
	const char *wrap_member;	/* NULL: the input is the body */
	const char *const *id_members;	/* non-NULL: the answer must name an id */
	const char *result_id;		/* the result's member for that id */
	const char *missing_id_code;	/* the error code of a 2xx naming none */
	const char *answer_noun;	/* "invoice": for logs (default "answer") */
	bool		redact_errors;	/* an error answer's body may echo the input */

	/* STEP_HOOK_SQL */
	const char *function;		/* "schema.name(text,jsonb)" */
} step_hook;

/*
 * A hook of each kind, or NULL with why set. url/function and
 * authorization are the settings' values (authorization may be NULL);
 * tls_verify and timeout_ms are the settings of the same family.
 */
step_hook  *step_hook_http(const pf_config *cfg, const char *source, const char *input_name, const char *url,
						   const char *url_setting, const char *authorization, int timeout_ms, bool tls_verify);
step_hook  *step_hook_sql(const pf_config *cfg, const char *source, const char *input_name,
						  const char *function, const char *function_setting, char *why, size_t why_len);

/* role_ops members shared by every hook role */
void		step_hook_cleanup(void *role);
void	   *step_hook_thread_init(void *role);
void		step_hook_thread_cleanup(void *thread);
void		step_hook_interrupt(void *thread);
step_status step_hook_run(void *thread, step_run *run);
const char *step_hook_one_transaction_hook(void *role);

#define STEP_HOOK_OPS \
	.cleanup = step_hook_cleanup, \
	.thread_init = step_hook_thread_init, \
	.thread_cleanup = step_hook_thread_cleanup, \
	.run = step_hook_run, \
	.interrupt = step_hook_interrupt, \
	.one_transaction_hook = step_hook_one_transaction_hook

/* step_hook_http.c, step_hook_sql.c */
step_status step_hook_run_http(step_hook *hook, pf_http_call *http, step_run *run);
step_status step_hook_run_sql(step_hook *hook, step_run *run);

#endif							/* PAYFLOW_STEP_HOOK_H */
