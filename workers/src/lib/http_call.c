/*
 * http_call.c
 *		A step's blocking JSON POST, on the one HTTP client (http.c): this
 *		file adds only what a call to an external API needs on top of it
 *		(JSON and Idempotency-Key headers, the answer's size cap, Retry-After
 *		and Idempotent-Replayed, the step-level error codes).
 */
#include "payflow/http_call.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "payflow/http.h"
#include "payflow/tracer.h"

struct pf_http_call
{
	pf_http    *http;			/* its connections and TLS sessions, kept between calls */
	pf_http_call_options opt;
	char	   *user_agent;
	pf_trace_context trace;		/* the next call's parent span (trace_id "" for none) */
};

pf_http_call *
pf_http_call_create(const pf_http_call_options *options)
{
	pf_http_call *call = pf_calloc(1, sizeof(*call));

	call->http = pf_http_create();
	call->opt = *options;
	call->user_agent = pf_strdup(options->user_agent ? options->user_agent : "payflow");
	call->opt.user_agent = call->user_agent;
	return call;
}

void
pf_http_call_destroy(pf_http_call *call)
{
	if (call == NULL)
		return;
	pf_http_destroy(call->http);
	free(call->user_agent);
	free(call);
}

void
pf_http_call_interrupt(pf_http_call *call)
{
	pf_http_interrupt(call->http);
}

void
pf_http_call_clear_interrupt(pf_http_call *call)
{
	pf_http_clear_interrupt(call->http);
}

void
pf_http_response_free(pf_http_response *resp)
{
	pf_buf_free(&resp->body);
}

pf_result
pf_http_call_post_json(pf_http_call *call, const char *url, const char *key, const char *body, size_t body_len,
					   pf_http_response *resp, pf_error *err)
{
	return pf_http_call_post_json_with(call, url, key, NULL, body, body_len, resp, err);
}

/* The answer of a finished request into resp (its body moved, not copied). */
static void
take_answer(pf_http_request *req, pf_http_response *resp)
{
	char		replayed[16];

	resp->status = req->status;
	resp->curl_code = req->curl_code;
	snprintf(resp->curl_error, sizeof(resp->curl_error), "%s", req->curl_error);
	resp->interrupted = req->interrupted;
	resp->truncated = req->response_truncated;
	resp->seconds = req->seconds;
	pf_buf_free(&resp->body);
	resp->body = req->response;
	pf_buf_init(&req->response);
	if (!pf_http_response_header(req, "Retry-After", resp->retry_after, sizeof(resp->retry_after)))
		resp->retry_after[0] = '\0';
	resp->replayed = pf_http_response_header(req, "Idempotent-Replayed", replayed, sizeof(replayed)) &&
		strcasecmp(replayed, "true") == 0;
}

pf_result
pf_http_call_post_json_with(pf_http_call *call, const char *url, const char *key, const char *const *extra_headers,
							const char *body, size_t body_len, pf_http_response *resp, pf_error *err)
{
	pf_http_request req;
	pf_error	perform_err;
	pf_result	r;
	pf_span		span;
	char		traceparent[PF_TRACEPARENT_LEN + 1];
	bool		traced = call->trace.trace_id[0] != '\0';

	memset(resp, 0, sizeof(*resp));
	memset(&span, 0, sizeof(span));
	pf_buf_init(&resp->body);

	/*
	 * Under an operation's trace, a span of its own, whose context the
	 * server gets (W3C traceparent); without one, neither.
	 */
	if (traced)
		pf_span_begin(&span, "POST", PF_SPAN_CLIENT, &call->trace);
	call->trace.trace_id[0] = '\0';
	pf_span_set_str(&span, "http.request.method", "POST");
	pf_http_request_init(&req, "POST", url);
	if (traced)
	{
		pf_traceparent_format(&span.ctx, traceparent);
		pf_http_request_add_header(&req, "traceparent", traceparent);
	}
	pf_http_request_add_header(&req, "Content-Type", "application/json");
	pf_http_request_add_header(&req, "Accept", "application/json");
	if (key != NULL)
		pf_http_request_add_header(&req, "Idempotency-Key", key);
	for (int i = 0; extra_headers && extra_headers[i]; i++)
		pf_http_request_add_header_line(&req, extra_headers[i]);
	pf_http_request_set_body(&req, body ? body : "", body_len);
	req.connect_timeout_ms = call->opt.connect_timeout_ms;
	req.timeout_ms = call->opt.timeout_ms;
	req.no_tls_verify = !call->opt.verify_tls;
	req.user_agent = call->opt.user_agent;
	req.max_response = PF_HTTP_CALL_MAX_BODY;

	r = pf_http_perform(call->http, &req, &perform_err);
	take_answer(&req, resp);
	pf_http_request_free(&req);
	if (resp->status != 0)
		pf_span_set_int(&span, "http.response.status_code", resp->status);
	if (resp->status == 0 || resp->status >= 500)
		pf_span_set_error(&span, resp->status == 0 ? "no answer" : "server error");
	pf_span_end(&span);

	if (resp->interrupted)
	{
		resp->status = 0;
		return pf_error_set(err, PF_ERR_TRANSIENT, "interrupted", "%s", perform_err.message);
	}
	if (r != PF_OK && resp->curl_code == CURLE_OK && resp->status == 0)
		/* curl did not take the request: no transfer was made */
		return pf_error_set(err, PF_ERR_TRANSIENT, perform_err.code, "POST %s: %s", url, perform_err.message);
	if (resp->curl_code != CURLE_OK || resp->status == 0)
	{
		char		code[16];

		/* a status with a failed transfer (cut short by the time-out) is no answer either */
		if (resp->curl_error[0] == '\0')
			snprintf(resp->curl_error, sizeof(resp->curl_error), "%s", curl_easy_strerror(resp->curl_code));
		snprintf(code, sizeof(code), "curl:%d", (int) resp->curl_code);
		resp->status = 0;
		return pf_error_set(err, PF_ERR_TRANSIENT, code, "POST %s: %s", url, resp->curl_error);
	}
	return PF_OK;
}

void
pf_http_call_set_trace(pf_http_call *call, const pf_trace_context *parent)
{
	if (parent != NULL)
		call->trace = *parent;
	else
		call->trace.trace_id[0] = '\0';
}

void
pf_http_call_stats(const pf_http_call *call, long *calls, long *connections)
{
	pf_http_stats(call->http, calls, connections);
}
