/*
 * step_hook_http.c
 *		A hook step's HTTP call: POST, classify, take the result
 *		(step_hook.h). A retry, a takeover after a crash and a duplicate
 *		message all send the same Idempotency-Key, so the service acts
 *		once per operation and step and answers the others alike.
 */
#include "step_hook.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "payflow/buf.h"
#include "payflow/downstream_error.h"
#include "payflow/http_outcome.h"

/* The request body: the input as stored (its numbers keep their digits), or wrapped. */
static void
request_body(const step_hook *hook, const step_run *run, pf_buf *body)
{
	json_t	   *op;
	char	   *op_text;

	if (hook->wrap_member == NULL)
	{
		pf_buf_append(body, run->input, run->input_len);
		return;
	}
	op = json_string(run->operation_id);
	op_text = json_dumps(op, JSON_ENCODE_ANY);
	pf_buf_appendf(body, "{\"operationId\":%s,\"%s\":", op_text, hook->wrap_member);
	pf_buf_append(body, run->input, run->input_len);
	pf_buf_append_char(body, '}');
	free(op_text);
	json_decref(op);
}

/* A 2xx answer as the step's result; false (the error set) when it lacks the id it must name. */
static bool
take_answer(const step_hook *hook, step_run *run, const pf_http_response *resp, json_t *answer)
{
	char	   *id;

	/* Idempotent-Replayed: an earlier attempt's call did get through */
	if (resp->replayed)
		pf_log_write(PF_LOG_INFO, &run->ids, json_pack("{s:i}", "attempt", run->attempt),
					 "the %s service replayed the %s of an earlier call with the same key", hook->source,
					 hook->answer_noun ? hook->answer_noun : "answer");
	if (hook->id_members == NULL)
	{
		run->result = answer;
		run->result_text = pf_strndup(resp->body.data, resp->body.len);
		return true;
	}
	id = pf_json_id_member(answer, hook->id_members);
	if (id == NULL)
	{
		pf_buf		message = PF_BUF_INIT;

		pf_buf_appendf(&message, "the %s call answered 2xx without", hook->source);
		for (int i = 0; hook->id_members[i]; i++)
			pf_buf_appendf(&message, "%s %s", i == 0 ? "" : " or", hook->id_members[i]);
		step_set_error(run, hook->missing_id_code, message.data,
					   json_pack("{s:s,s:i}", "source", hook->source, "httpStatus", (int) resp->status));
		pf_buf_free(&message);
		json_decref(answer);
		return false;
	}
	run->result = json_pack("{s:s,s:i}", hook->result_id, id, "httpStatus", (int) resp->status);
	free(id);
	json_decref(answer);
	return true;
}

step_status
step_hook_run_http(step_hook *hook, pf_http_call *http, step_run *run)
{
	pf_buf		body = PF_BUF_INIT;
	const char *headers[] = {NULL, NULL};	/* the Authorization line, if any */
	pf_http_response resp;
	pf_http_verdict verdict;
	pf_error	err;
	pf_result	r;
	json_t	   *answer;
	json_t	   *error;

	request_body(hook, run, &body);
	step_call_started(run, (hook->timeout_ms + 999) / 1000);
	headers[0] = hook->authorization;
	pf_http_call_set_trace(http, run->trace);	/* a span under the attempt's, and its traceparent sent */
	r = pf_http_call_post_json_with(http, hook->url, run->idempotency_key, headers,
									body.data, body.len, &resp, &err);
	step_call_finished(run);
	pf_buf_free(&body);
	pf_log_write(PF_LOG_DEBUG, &run->ids,
				 json_pack("{s:i,s:I,s:s,s:b}", "httpStatus", (int) resp.status,
						   "ms", (json_int_t) (resp.seconds * 1000), "code", r == PF_OK ? "" : err.code,
						   "replayed", resp.replayed),
				 "%s call %s", hook->source, r == PF_OK ? "answered" : "failed");
	if (step_stop_requested(run) != STOP_NONE)
	{
		pf_http_response_free(&resp);
		return STEP_ABANDONED;
	}
	verdict = pf_http_outcome(&resp, r, &err, hook->source, time(NULL), &answer, &error);
	if (verdict != PF_HTTP_DONE)
	{
		/* the service's own error message stays (masked); its body may echo the input */
		if (hook->redact_errors && resp.status > 0)
			pf_downstream_error_redact(error, resp.status >= 500 ? "unavailable" : "rejected", NULL,
									   hook->raw_error_text);
		json_decref(run->error);
		run->error = error;
		pf_http_response_free(&resp);
		return verdict == PF_HTTP_RETRYABLE ? STEP_RETRYABLE : STEP_PERMANENT;
	}
	if (!take_answer(hook, run, &resp, answer))
	{
		pf_http_response_free(&resp);
		return STEP_PERMANENT;
	}
	pf_http_response_free(&resp);
	return STEP_SUCCEEDED;
}
