/*
 * role_invoice.c
 *		--role invoice: create the operation's invoice at the invoice API.
 *
 * The step's input, the invoice input the post-processing hook made, is
 * POSTed byte for byte as it is stored (amounts keep their digits) to
 * PAYFLOW_INVOICE_URL with "Idempotency-Key: <operation id>:create_invoice".
 * A retry, a takeover after a crash and a duplicate message all send that
 * key, so the API creates one invoice per operation and answers the others
 * with the same one.
 *
 * The answer is classified by http_outcome.h: 2xx done, 408/409/425/429 and
 * 5xx except 501/505 retryable (honouring Retry-After), other 4xx
 * permanent, no answer (refused, reset, time-out) retryable. A 2xx answer
 * names the invoice in "id" or "invoiceId"; the step's result is
 * {"invoiceId":…,"httpStatus":…}. A 2xx without an id is a permanent
 * error: the API did something the worker cannot name.
 *
 * Each executor has its own pf_http_call (connect time-out
 * PAYFLOW_HTTP_CONNECT_TIMEOUT_MS, whole call PAYFLOW_INVOICE_TIMEOUT_MS,
 * TLS verified unless PAYFLOW_INVOICE_TLS_VERIFY=false, which the settings
 * accept for a loopback URL only). The drain and the watchdog interrupt a
 * call at once.
 *
 * PAYFLOW_INVOICE_AUTHORIZATION, when set, is sent as the Authorization
 * header (e.g. "Bearer <token>"): credentials come from a secret, never
 * from the URL. It is a secret setting, so the logger redacts it.
 */
#include "worker.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "payflow/buf.h"
#include "payflow/http_call.h"
#include "payflow/http_outcome.h"

typedef struct invoice_role_state
{
	const pf_config *cfg;
	char	   *authorization;	/* "Authorization: <value>", or NULL */
} invoice_role_state;

typedef struct invoice_thread
{
	invoice_role_state *role;
	pf_http_call *http;
} invoice_thread;

static void *
invoice_init(const pf_config *cfg, char *why, size_t why_len)
{
	invoice_role_state *is = pf_calloc(1, sizeof(*is));

	is->cfg = cfg;
	if (!cfg->invoice_tls_verify)
		pf_log_warn(NULL, "TLS verification is off for PAYFLOW_INVOICE_URL %s (loopback)", cfg->invoice_url);
	else if (strncmp(cfg->invoice_url, "http://", 7) == 0 && !pf_url_is_loopback(cfg->invoice_url))
		pf_log_warn(NULL, "PAYFLOW_INVOICE_URL %s is plain http: invoices travel unencrypted", cfg->invoice_url);
	if (cfg->invoice_authorization)
	{
		pf_buf		line = PF_BUF_INIT;

		pf_buf_appendf(&line, "Authorization: %s", cfg->invoice_authorization);
		is->authorization = line.data;
	}
	return is;
}

static void
invoice_cleanup(void *role)
{
	invoice_role_state *is = role;

	free(is->authorization);
	free(is);
}

static void *
invoice_thread_init(void *role)
{
	invoice_role_state *is = role;
	invoice_thread *it = pf_calloc(1, sizeof(*it));
	pf_http_call_options opt = {0};

	it->role = is;
	opt.connect_timeout_ms = is->cfg->http_connect_timeout_ms;
	opt.timeout_ms = is->cfg->invoice_timeout_ms;
	opt.verify_tls = is->cfg->invoice_tls_verify != 0;
	opt.user_agent = "payflow-worker";
	it->http = pf_http_call_create(&opt);
	return it;
}

static void
invoice_thread_cleanup(void *thread)
{
	invoice_thread *it = thread;

	if (it == NULL)
		return;
	pf_http_call_destroy(it->http);
	free(it);
}

static void
invoice_interrupt(void *thread)
{
	pf_http_call_interrupt(((invoice_thread *) thread)->http);
}

static step_status
invoice_run(void *thread, step_run *run)
{
	static const char *const id_members[] = {"id", "invoiceId", NULL};
	invoice_thread *it = thread;
	const pf_config *cfg = it->role->cfg;
	json_t	   *input = json_loadb(run->input, run->input_len, 0, NULL);
	pf_http_response resp;
	pf_error	err;
	pf_result	r;
	pf_http_verdict verdict;
	json_t	   *answer;
	json_t	   *error;
	char	   *invoice_id;

	/* an interrupt aimed at the previous message must not hit this one */
	pf_http_call_clear_interrupt(it->http);
	if (!json_is_object(input))
	{
		json_decref(input);
		step_set_error(run, "invalid_input", "the invoice input is not a JSON object",
					   json_pack("{s:s}", "source", "invoice"));
		return STEP_PERMANENT;
	}
	json_decref(input);

	step_call_started(run, (int) ((cfg->invoice_timeout_ms + 999) / 1000));
	r = pf_http_call_post_json_with(it->http, cfg->invoice_url, run->idempotency_key,
									(const char *const[]) {it->role->authorization, NULL},
									run->input, run->input_len, &resp, &err);
	step_call_finished(run);
	pf_log_write(PF_LOG_DEBUG, &run->ids,
				 json_pack("{s:i,s:I,s:s,s:b}", "httpStatus", (int) resp.status,
						   "ms", (json_int_t) (resp.seconds * 1000), "code", r == PF_OK ? "" : err.code,
						   "replayed", resp.replayed),
				 "invoice API call %s", r == PF_OK ? "answered" : "failed");
	if (step_stop_requested(run) != STOP_NONE)
	{
		pf_http_response_free(&resp);
		return STEP_ABANDONED;
	}

	verdict = pf_http_outcome(&resp, r, &err, "invoice", time(NULL), &answer, &error);
	if (verdict != PF_HTTP_DONE)
	{
		json_decref(run->error);
		run->error = error;
		pf_http_response_free(&resp);
		return verdict == PF_HTTP_RETRYABLE ? STEP_RETRYABLE : STEP_PERMANENT;
	}
	invoice_id = pf_json_id_member(answer, id_members);
	if (invoice_id == NULL)
	{
		step_set_error(run, "no_invoice_id", "the invoice API answered 2xx without an id or invoiceId",
					   json_pack("{s:s,s:i}", "source", "invoice", "httpStatus", (int) resp.status));
		json_decref(answer);
		pf_http_response_free(&resp);
		return STEP_PERMANENT;
	}
	if (resp.replayed)
		pf_log_write(PF_LOG_INFO, &run->ids, json_pack("{s:s,s:i}", "invoiceId", invoice_id, "attempt", run->attempt),
					 "the invoice API replayed the invoice of an earlier call with the same key");
	run->result = json_pack("{s:s,s:i}", "invoiceId", invoice_id, "httpStatus", (int) resp.status);
	free(invoice_id);
	json_decref(answer);
	pf_http_response_free(&resp);
	return STEP_SUCCEEDED;
}

const role_ops invoice_role = {
	.name = "invoice",
	.program = PF_PROGRAM_INVOICE,
	.event_type = PF_EVENT_INVOICE_REQUESTED,
	.step = "CREATE_INVOICE",
	.init = invoice_init,
	.cleanup = invoice_cleanup,
	.thread_init = invoice_thread_init,
	.thread_cleanup = invoice_thread_cleanup,
	.run = invoice_run,
	.interrupt = invoice_interrupt,
};
