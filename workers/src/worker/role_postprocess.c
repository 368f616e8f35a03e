/*
 * role_postprocess.c
 *		--role postprocess: turn the payment result into the invoice input
 *		with the operator's post-processing hook.
 *
 * SQL hook (PAYFLOW_POSTPROCESS_FUNCTION, a regprocedure such as
 * "payflow.default_postprocess(text,jsonb)"): the hook runs inside the
 * statement that completes the step,
 *
 *		SELECT payflow.complete_step($1, 'POST_PROCESS', $2,
 *				payflow.invoke_postprocess($3::regprocedure, $1, $4::jsonb))
 *
 * so whatever it writes commits in the transaction that advances the
 * operation and emits InvoiceRequested, or not at all. Usually the claim
 * is in that transaction too (CLAIM_RUN_COMPLETE, one statement for the
 * whole step); a hook that fails there is run again the usual way (claim,
 * then COMPLETE_WITH_HOOK), where its error is classified and recorded. invoke_postprocess
 * runs it with the worker's rights and checks its signature and answer
 * (22023). The answer is stored by the extension in its own (pg) store,
 * whatever PAYFLOW_STORE says: it never passes through the worker. A hook
 * error is the step's error: a SQLSTATE the pg module retries (classes 08
 * and 40, 57014, 55P03, 53300, …) is retryable once its retries are spent,
 * any other (22023 a bad signature or answer, 22*, 23*, P0001 a RAISE, 42883
 * a hook that does not exist) fails the operation. PF004 means another
 * worker took the step over: nothing is recorded.
 *
 * HTTP hook (PAYFLOW_POSTPROCESS_URL): POST
 * {"operationId":…,"paymentResult":{…}} with "Idempotency-Key:
 * <operation id>:post_process"; the 2xx answer, a JSON object, is the
 * invoice input and is stored as it came (amounts keep their digits). The
 * answer is classified like the invoice API's (http_outcome.h); time-outs
 * PAYFLOW_HTTP_CONNECT_TIMEOUT_MS and PAYFLOW_POSTPROCESS_TIMEOUT_MS, TLS
 * verified unless PAYFLOW_POSTPROCESS_TLS_VERIFY=false (loopback only).
 * PAYFLOW_POSTPROCESS_AUTHORIZATION, when set, is sent as the Authorization
 * header (a secret setting: from Secrets Manager, redacted from logs).
 */
#include "worker.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "payflow/buf.h"
#include "payflow/downstream_error.h"
#include "payflow/http_call.h"
#include "payflow/http_outcome.h"

#define COMPLETE_WITH_HOOK \
	"SELECT payflow.complete_step($1, 'POST_PROCESS', $2, " \
	"payflow.invoke_postprocess($3::regprocedure, $1, $4::jsonb))"

/*
 * With a SQL hook and a "pg" input (the usual case) the step is claimed,
 * its hook run and the step completed by one statement, in one
 * transaction. The hook runs as the worker, as in COMPLETE_WITH_HOOK.
 */
#define CLAIM_RUN_COMPLETE \
	"WITH c AS MATERIALIZED (SELECT payflow.claim_step($1, 'POST_PROCESS', $2, $4::int) AS a), " \
	"i AS MATERIALIZED (SELECT c.a, CASE WHEN c.a ->> 'action' = 'run' AND c.a -> 'input' ->> 'store' = 'pg' " \
	"THEN convert_from(payflow.payload_get(c.a -> 'input'), 'UTF8')::jsonb END AS input FROM c) " \
	"SELECT i.a, CASE WHEN jsonb_typeof(i.input) = 'object' THEN payflow.complete_step($1, 'POST_PROCESS', $2, " \
	"payflow.invoke_postprocess($3::regprocedure, $1, i.input)) END, " \
	"extract(epoch FROM (i.a ->> 'leaseExpiresAt')::timestamptz - now()) FROM i"

typedef struct postprocess_role_state
{
	const pf_config *cfg;
	const char *function;		/* the SQL hook, or NULL */
	const char *url;			/* the HTTP hook, or NULL */
	char	   *authorization;	/* "Authorization: <value>", or NULL */
} postprocess_role_state;

typedef struct postprocess_thread
{
	postprocess_role_state *role;
	pf_http_call *http;			/* HTTP hook only */
} postprocess_thread;

/* "schema.name(type, type)": a regprocedure needs the argument types. */
static bool
looks_like_regprocedure(const char *text)
{
	const char *open = strchr(text, '(');
	const char *end = text + strlen(text);

	while (end > text && isspace((unsigned char) end[-1]))
		end--;
	return open != NULL && open > text && end > open && end[-1] == ')';
}

static void *
postprocess_init(const pf_config *cfg, char *why, size_t why_len)
{
	postprocess_role_state *ps;

	/* the settings require exactly one of the two */
	if (cfg->postprocess_function && !looks_like_regprocedure(cfg->postprocess_function))
	{
		snprintf(why, why_len, "invalid PAYFLOW_POSTPROCESS_FUNCTION: expected a function with its argument "
				 "types, e.g. payflow.default_postprocess(text,jsonb)");
		return NULL;
	}
	ps = pf_calloc(1, sizeof(*ps));
	ps->cfg = cfg;
	ps->function = cfg->postprocess_function;
	ps->url = cfg->postprocess_function ? NULL : cfg->postprocess_url;
	if (ps->url && !cfg->postprocess_tls_verify)
		pf_log_warn(NULL, "TLS verification is off for PAYFLOW_POSTPROCESS_URL %s (loopback)", ps->url);
	if (ps->url && cfg->postprocess_authorization)
	{
		pf_buf		line = PF_BUF_INIT;

		pf_buf_appendf(&line, "Authorization: %s", cfg->postprocess_authorization);
		ps->authorization = line.data;
	}
	pf_log_write(PF_LOG_INFO, NULL, json_pack("{s:s}", ps->function ? "function" : "url",
											  ps->function ? ps->function : ps->url),
				 "post-processing hook: %s", ps->function ? "SQL function" : "HTTP");
	return ps;
}

static void
postprocess_cleanup(void *role)
{
	postprocess_role_state *ps = role;

	free(ps->authorization);
	free(ps);
}

static void *
postprocess_thread_init(void *role)
{
	postprocess_role_state *ps = role;
	postprocess_thread *pt = pf_calloc(1, sizeof(*pt));

	pt->role = ps;
	if (ps->url)
	{
		pf_http_call_options opt = {0};

		opt.connect_timeout_ms = ps->cfg->http_connect_timeout_ms;
		opt.timeout_ms = ps->cfg->postprocess_timeout_ms;
		opt.verify_tls = ps->cfg->postprocess_tls_verify != 0;
		opt.user_agent = "payflow-worker";
		pt->http = pf_http_call_create(&opt);
	}
	return pt;
}

static void
postprocess_thread_cleanup(void *thread)
{
	postprocess_thread *pt = thread;

	if (pt == NULL)
		return;
	pf_http_call_destroy(pt->http);
	free(pt);
}

static void
postprocess_interrupt(void *thread)
{
	postprocess_thread *pt = thread;

	/* a SQL hook is bounded by the pool's statement_timeout instead */
	if (pt->http)
		pf_http_call_interrupt(pt->http);
}

static step_status
run_sql_hook(postprocess_thread *pt, step_run *run)
{
	const char *function = pt->role->function;
	char	   *payment_result = pf_strndup(run->input, run->input_len);
	const char *extra[2] = {function, payment_result};
	pf_error	err;
	pf_result	r;

	if (step_stop_requested(run) != STOP_NONE)
	{
		free(payment_result);
		return STEP_ABANDONED;
	}
	r = step_complete_with_sql(run, COMPLETE_WITH_HOOK, 2, extra, &err);
	free(payment_result);
	if (r == PF_OK)
		return STEP_COMMITTED;
	if (strcmp(err.code, "PF004") == 0)
	{
		pf_log_warn(&run->ids, "lease lost before the hook's result could be committed: %s", err.message);
		return STEP_ABANDONED;
	}
	{
		/*
		 * A hook's error text echoes its input: code, class and a safe
		 * message (downstream_error.h); invoke_postprocess's own checks of
		 * the hook ("post-processing hook … must …") keep their words.
		 */
		bool		own = strcmp(err.code, "22023") == 0 && strncmp(err.message, "post-processing hook ", 21) == 0;
		json_t	   *e = pf_downstream_sql_error("postprocess", err.code[0] ? err.code : "08006", err.message,
												pt->role->cfg->raw_error_text != 0);

		if (own)
			json_object_set_new(e, "message", json_string(err.message));

		json_object_set_new(e, "source", json_string("postprocess"));
		json_object_set_new(e, "hook", json_string(function));
		step_set_error(run, json_string_value(json_object_get(e, "code")),
					   json_string_value(json_object_get(e, "message")), e);
	}
	/* pf_pg already retried a retryable SQLSTATE a few times: the database schedules the next */
	return r == PF_ERR_TRANSIENT || pf_pg_sqlstate_retryable(err.code) ? STEP_RETRYABLE : STEP_PERMANENT;
}

static step_status
run_http_hook(postprocess_thread *pt, step_run *run)
{
	const pf_config *cfg = pt->role->cfg;
	json_t	   *op = json_string(run->operation_id);
	char	   *op_text = json_dumps(op, JSON_ENCODE_ANY);
	pf_buf		body = PF_BUF_INIT;
	pf_http_response resp;
	pf_http_verdict verdict;
	pf_error	err;
	pf_result	r;
	json_t	   *answer;
	json_t	   *error;

	/* the payment result goes as stored: its numbers keep their digits */
	pf_buf_appendf(&body, "{\"operationId\":%s,\"paymentResult\":", op_text);
	pf_buf_append(&body, run->input, run->input_len);
	pf_buf_append_char(&body, '}');
	free(op_text);
	json_decref(op);

	step_call_started(run, (int) ((cfg->postprocess_timeout_ms + 999) / 1000));
	r = pf_http_call_post_json_with(pt->http, pt->role->url, run->idempotency_key,
									(const char *const[]) {pt->role->authorization, NULL},
									body.data, body.len, &resp, &err);
	step_call_finished(run);
	pf_buf_free(&body);
	pf_log_write(PF_LOG_DEBUG, &run->ids,
				 json_pack("{s:i,s:I,s:s}", "httpStatus", (int) resp.status,
						   "ms", (json_int_t) (resp.seconds * 1000), "code", r == PF_OK ? "" : err.code),
				 "post-processing hook call %s", r == PF_OK ? "answered" : "failed");
	if (step_stop_requested(run) != STOP_NONE)
	{
		pf_http_response_free(&resp);
		return STEP_ABANDONED;
	}
	verdict = pf_http_outcome(&resp, r, &err, "postprocess", time(NULL), &answer, &error);
	if (verdict != PF_HTTP_DONE)
	{
		/* the hook's own error message stays (masked); its body may echo the payment result */
		if (resp.status > 0)
			pf_downstream_error_redact(error, resp.status >= 500 ? "unavailable" : "rejected", NULL,
									   pt->role->cfg->raw_error_text != 0);
		json_decref(run->error);
		run->error = error;
		pf_http_response_free(&resp);
		return verdict == PF_HTTP_RETRYABLE ? STEP_RETRYABLE : STEP_PERMANENT;
	}
	run->result = answer;
	run->result_text = pf_strndup(resp.body.data, resp.body.len);
	pf_http_response_free(&resp);
	return STEP_SUCCEEDED;
}

static step_status
postprocess_run(void *thread, step_run *run)
{
	postprocess_thread *pt = thread;
	json_t	   *payment_result = json_loadb(run->input, run->input_len, 0, NULL);
	bool		is_object = json_is_object(payment_result);

	json_decref(payment_result);
	if (pt->http)
		pf_http_call_clear_interrupt(pt->http);
	if (!is_object)
	{
		step_set_error(run, "invalid_input", "the payment result is not a JSON object",
					   json_pack("{s:s}", "source", "postprocess"));
		return STEP_PERMANENT;
	}
	return pt->role->function ? run_sql_hook(pt, run) : run_http_hook(pt, run);
}

static const char *
postprocess_one_transaction_sql(void *role, const char **extra)
{
	postprocess_role_state *ps = role;

	if (ps->function == NULL)
		return NULL;			/* an HTTP hook runs outside the database */
	*extra = ps->function;
	return CLAIM_RUN_COMPLETE;
}

const role_ops postprocess_role = {
	.name = "postprocess",
	.program = PF_PROGRAM_POSTPROCESS,
	.event_type = PF_EVENT_PAYMENT_COMPLETED,
	.step = "POST_PROCESS",
	.init = postprocess_init,
	.cleanup = postprocess_cleanup,
	.thread_init = postprocess_thread_init,
	.thread_cleanup = postprocess_thread_cleanup,
	.run = postprocess_run,
	.interrupt = postprocess_interrupt,
	.one_transaction_sql = postprocess_one_transaction_sql,
};
