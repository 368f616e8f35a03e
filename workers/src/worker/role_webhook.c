/*
 * role_webhook.c
 *		--role webhook: POST each terminal event on operation-events
 *		(OperationCompleted, OperationFailed) to the webhook URL its tenant
 *		registered with payflow.set_webhook, signed with the tenant's secret.
 *
 * No step is claimed: a delivery is not part of the operation, which has
 * already ended. The queue message is the delivery's whole state.
 *
 *   - payflow.webhook_target(operation id, event id, body) names the URL
 *     and the secret at every attempt, so a URL fixed with set_webhook
 *     counts from the next attempt on. NULL (the tenant has no webhook): the
 *     message is deleted. It answers PF008 for an event payflow did not
 *     publish to operation-events with exactly this body: anyone who may
 *     send to the queue could otherwise have payflow sign "completed" for
 *     an operation that failed. Such a message is never delivered: it is
 *     logged, recorded as a dead letter (forged_event) and deleted; the
 *     check cannot change its mind, since payflow records an event in the
 *     transaction that writes it to the outbox.
 *   - The body is the event exactly as the message carries it (no wrapper):
 *     what is signed is what the receiver reads, and a replay re-sends the
 *     same bytes. Headers: Content-Type: application/json, Payflow-Event-Id,
 *     Payflow-Event-Type and Payflow-Signature (webhook_signature.h).
 *   - 2xx: delivered, the message is deleted. Anything else (another status,
 *     a redirect, a time-out, no connection) is tried again: the message is
 *     hidden for the back-off delay (ChangeMessageVisibility), and its
 *     ApproximateReceiveCount numbers the attempts, so a crash in between
 *     costs nothing but an attempt. The delay of attempt n is
 *     min(max, base * 2^(n-1)) with equal jitter (backoff.h), never less
 *     than a 429's or 503's Retry-After, at most SQS's 12 hours.
 *   - The last attempt (PAYFLOW_WEBHOOK_MAX_ATTEMPTS, or the queue's
 *     maxReceiveCount when that is lower, so the DLQ never gets a delivery
 *     first) records the event with payflow.record_webhook_failure, where
 *     operators list it (payflow.webhook_failures) and replay it
 *     (payflow.replay_webhook), then deletes the message.
 *   - A URL the worker will not call (plain http:// unless
 *     PAYFLOW_WEBHOOK_ALLOW_HTTP=true, and then to a loopback host only) is
 *     recorded as a failure at once: waiting does not change it, a new URL
 *     and a replay do.
 *   - Other event types on the queue are deleted (logged at debug); bad
 *     messages and unknown operations go the way of every role's
 *     (step_bad_message).
 *
 * Delivery is at least once: a crash after the receiver answered, or two
 * copies of an event from the relay, deliver it again with the same
 * Payflow-Event-Id, by which receivers deduplicate. TLS is always verified.
 * Logs name the event, the tenant and the URL's origin, never the secret,
 * the URL's path (it may hold a token) or the body.
 */
#include "worker.h"

#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <libpq-fe.h>

#include "payflow/backoff.h"
#include "payflow/buf.h"
#include "payflow/http_call.h"
#include "payflow/http_outcome.h"
#include "payflow/webhook_signature.h"

/* SQS's largest visibility timeout */
#define MAX_DELAY_SECONDS 43200
/* How much of a refusing receiver's answer the failure record keeps. */
#define ANSWER_KEEP 256

typedef struct webhook_role_state
{
	const pf_config *cfg;
	atomic_bool warned_redrive; /* the queue's DLQ threshold is below max attempts */
} webhook_role_state;

typedef struct webhook_thread
{
	webhook_role_state *role;
	pf_http_call *http;
} webhook_thread;

/* What webhook_target said. */
typedef struct webhook_target
{
	char	   *tenant;
	char	   *url;
	char	   *secret;
	char	   *previous_secret;	/* a rotated secret that still signs, or NULL */
	char	   *origin;			/* scheme://host[:port], for logs */
} webhook_target;

static void *
webhook_init(const role_ops *role, const pf_config *cfg, char *why, size_t why_len)
{
	webhook_role_state *ws = pf_calloc(1, sizeof(*ws));

	ws->cfg = cfg;
	atomic_init(&ws->warned_redrive, false);
	if (cfg->webhook_allow_http)
		pf_log_warn(NULL, "PAYFLOW_WEBHOOK_ALLOW_HTTP is true: plain http:// webhook URLs are called "
					"when their host is loopback");
	return ws;
}

static void
webhook_cleanup(void *role)
{
	free(role);
}

static void *
webhook_thread_init(void *role)
{
	webhook_role_state *ws = role;
	webhook_thread *wt = pf_calloc(1, sizeof(*wt));
	pf_http_call_options opt = {0};

	wt->role = ws;
	opt.connect_timeout_ms = ws->cfg->http_connect_timeout_ms < ws->cfg->webhook_timeout_ms ?
		ws->cfg->http_connect_timeout_ms : ws->cfg->webhook_timeout_ms;
	opt.timeout_ms = ws->cfg->webhook_timeout_ms;
	opt.verify_tls = true;
	opt.user_agent = "payflow-webhook";
	wt->http = pf_http_call_create(&opt);
	return wt;
}

static void
webhook_thread_cleanup(void *thread)
{
	webhook_thread *wt = thread;

	if (wt == NULL)
		return;
	pf_http_call_destroy(wt->http);
	free(wt);
}

static void
webhook_interrupt(void *thread)
{
	pf_http_call_interrupt(((webhook_thread *) thread)->http);
}

/* ---- the target ---- */

static void
target_free(webhook_target *t)
{
	free(t->tenant);
	free(t->url);
	if (t->secret)
		explicit_bzero(t->secret, strlen(t->secret));
	free(t->secret);
	if (t->previous_secret)
		explicit_bzero(t->previous_secret, strlen(t->previous_secret));
	free(t->previous_secret);
	free(t->origin);
	memset(t, 0, sizeof(*t));
}

/* scheme://host[:port] of a URL: what logs may show of it. */
static char *
url_origin(const char *url)
{
	CURLU	   *u = curl_url();
	char	   *scheme = NULL;
	char	   *host = NULL;
	char	   *port = NULL;
	pf_buf		out = PF_BUF_INIT;

	if (u == NULL)
		abort();
	if (curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
		curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK &&
		curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK)
	{
		pf_buf_appendf(&out, "%s://%s", scheme, host);
		if (curl_url_get(u, CURLUPART_PORT, &port, 0) == CURLUE_OK && port)
			pf_buf_appendf(&out, ":%s", port);
	}
	else
		pf_buf_appendf(&out, "(unparsable URL)");
	curl_free(scheme);
	curl_free(host);
	curl_free(port);
	curl_url_cleanup(u);
	return pf_buf_steal(&out);
}

typedef enum target_status
{
	TARGET_FOUND,
	TARGET_NONE,				/* the tenant has no webhook */
	TARGET_UNKNOWN,				/* PF003: no such operation */
	TARGET_FORGED,				/* PF008: not an event payflow published */
	TARGET_ERROR				/* the database did not answer: try later */
} target_status;

static target_status
lookup_target(step_run *run, webhook_target *t, pf_error *err)
{
	worker	   *w = run->w;
	const char *values[3] = {run->operation_id, run->event->event_id, run->input};
	PGresult   *res = NULL;
	json_t	   *answer = NULL;
	target_status status = TARGET_ERROR;
	pf_pg	   *pg;
	pf_result	r;

	memset(t, 0, sizeof(*t));
	if ((pg = db_acquire(w->db, DB_WAIT_MS)) == NULL)
	{
		pf_error_set(err, PF_ERR_TRANSIENT, "53300", "no database connection free");
		return TARGET_ERROR;
	}
	r = pf_pg_exec(pg, "SELECT payflow.webhook_target($1, $2::uuid, $3)::text", 3, values, &res, err);
	db_release(w->db, pg);
	if (r != PF_OK)
		return strcmp(err->code, "PF003") == 0 ? TARGET_UNKNOWN :
			strcmp(err->code, "PF008") == 0 ? TARGET_FORGED : TARGET_ERROR;

	if (PQntuples(res) != 1)
		pf_error_set(err, PF_ERR_FINAL, "XX000", "webhook_target returned %d rows", PQntuples(res));
	else if (PQgetisnull(res, 0, 0))
		status = TARGET_NONE;
	else if ((answer = json_loads(PQgetvalue(res, 0, 0), 0, NULL)) == NULL ||
			 !json_is_string(json_object_get(answer, "url")) ||
			 !json_is_string(json_object_get(answer, "secret")))
		pf_error_set(err, PF_ERR_FINAL, "XX000", "webhook_target answered without a url and a secret");
	else
	{
		const char *tenant = json_string_value(json_object_get(answer, "tenant"));

		t->tenant = pf_strdup(tenant ? tenant : "");
		t->url = pf_strdup(json_string_value(json_object_get(answer, "url")));
		t->secret = pf_strdup(json_string_value(json_object_get(answer, "secret")));
		if (json_is_string(json_object_get(answer, "previousSecret")))
			t->previous_secret = pf_strdup(json_string_value(json_object_get(answer, "previousSecret")));
		t->origin = url_origin(t->url);
		status = TARGET_FOUND;
	}
	/* the answer held the secret */
	if (PQntuples(res) == 1 && !PQgetisnull(res, 0, 0))
		explicit_bzero(PQgetvalue(res, 0, 0), strlen(PQgetvalue(res, 0, 0)));
	PQclear(res);
	json_decref(answer);
	return status;
}

/* Why the worker will not call this URL, or NULL. */
static const char *
url_refusal(const pf_config *cfg, const char *url)
{
	if (strncasecmp(url, "https://", 8) == 0)
		return NULL;
	if (strncasecmp(url, "http://", 7) != 0)
		return "the webhook URL is not an http(s) URL";
	if (!cfg->webhook_allow_http)
		return "plain http:// webhook URLs are refused (PAYFLOW_WEBHOOK_ALLOW_HTTP is false)";
	if (!pf_url_is_loopback(url))
		return "plain http:// is accepted for loopback hosts only (localhost, 127.0.0.0/8, [::1])";
	return NULL;
}

/* ---- one attempt ---- */

/* A log line about this delivery: the message and its attempt ride along. */
static void log_delivery(pf_log_level level, step_run *run, const webhook_target *t, json_t *fields,
						 const char *fmt,...) __attribute__((format(printf, 5, 6)));

static void
log_delivery(pf_log_level level, step_run *run, const webhook_target *t, json_t *fields, const char *fmt,...)
{
	char		text[512];
	va_list		ap;

	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	if (fields == NULL)
		fields = json_object();
	json_object_set_new(fields, "messageId", json_string(run->job->msg->id));
	json_object_set_new(fields, "attempt", json_integer(run->attempt));
	json_object_set_new(fields, "eventType", json_string(pf_event_type_name(run->event->type)));
	if (t && t->origin)
	{
		json_object_set_new(fields, "tenant", json_string(t->tenant));
		json_object_set_new(fields, "target", json_string(t->origin));
	}
	pf_log_write(level, &run->ids, fields, "%s", text);
}

/*
 * The failure of one attempt, as the failure record keeps it: with the
 * start of the receiver's answer, which logs leave out (a receiver may echo
 * the body).
 */
static json_t *
attempt_error(const pf_http_response *resp, pf_result r, const pf_error *err)
{
	char		code[16];
	char		message[64];
	json_t	   *e;

	if (r != PF_OK)
		return json_pack("{s:s,s:s}", "code", err->code,
						 "message", resp->curl_error[0] ? resp->curl_error : resp->interrupted ? "interrupted" :
						 "no answer");
	snprintf(code, sizeof(code), "http_%ld", resp->status);
	snprintf(message, sizeof(message), "the receiver answered HTTP %ld", resp->status);
	e = json_pack("{s:s,s:s,s:I}", "code", code, "message", message, "httpStatus", (json_int_t) resp->status);
	if (resp->retry_after[0])
		json_object_set_new(e, "retryAfter", json_string(resp->retry_after));
	if (resp->body.len > 0)
	{
		size_t		n = resp->body.len < ANSWER_KEEP ? resp->body.len : ANSWER_KEEP;
		char	   *answer = pf_strndup(resp->body.data, n);

		pf_utf8_sanitize(answer, strlen(answer));
		json_object_set_new(e, "answer", json_string(answer));
		free(answer);
	}
	return e;
}

/* The error for a log line: without the receiver's answer. */
static json_t *
loggable_error(json_t *error)
{
	json_t	   *copy = json_copy(error);

	json_object_del(copy, "answer");
	return copy;
}

/*
 * Seconds until the next attempt after failed attempt number attempt (1, 2,
 * …); *backoff_ms is the back-off's own draw, before it is rounded up to
 * whole seconds (what ChangeMessageVisibility takes) or a Retry-After
 * lengthens it: the log shows it, so that its growth can be checked.
 */
static int
retry_delay_s(const pf_config *cfg, int attempt, const pf_http_response *resp, double *retry_after, int *backoff_ms)
{
	int			ms = pf_backoff_ms(attempt - 1, cfg->webhook_backoff_base_s * 1000, cfg->webhook_backoff_max_s * 1000);
	int			s = (ms + 999) / 1000;

	*backoff_ms = ms;

	*retry_after = -1;
	if ((resp->status == 429 || resp->status == 503) &&
		pf_http_retry_after_seconds(resp->retry_after, time(NULL), retry_after) && ceil(*retry_after) > s)
		s = (int) ceil(*retry_after);
	if (s < 1)
		s = 1;
	return s > MAX_DELAY_SECONDS ? MAX_DELAY_SECONDS : s;
}

/* payflow.record_webhook_failure: the delivery's dead letter. */
static pf_result
record_failure(step_run *run, json_t *error, json_int_t *failure_id, pf_error *err)
{
	worker	   *w = run->w;
	char		attempts[16];
	char	   *error_text = json_dumps(error, JSON_COMPACT);
	char	   *body = pf_strndup(run->input, run->input_len);
	const char *values[5] = {run->event->event_id, run->operation_id, body, attempts, error_text};
	PGresult   *res = NULL;
	pf_pg	   *pg;
	pf_result	r;

	snprintf(attempts, sizeof(attempts), "%d", run->attempt);
	pf_utf8_sanitize(body, strlen(body));
	if ((pg = db_acquire(w->db, DB_WAIT_MS)) == NULL)
		r = pf_error_set(err, PF_ERR_TRANSIENT, "53300", "no database connection free");
	else
	{
		r = pf_pg_exec(pg, "SELECT payflow.record_webhook_failure($1::uuid, $2, $3, $4::int, $5::jsonb)", 5,
					   values, &res, err);
		db_release(w->db, pg);
	}
	if (r == PF_OK)
	{
		*failure_id = PQntuples(res) == 1 && !PQgetisnull(res, 0, 0) ? strtoll(PQgetvalue(res, 0, 0), NULL, 10) : 0;
		PQclear(res);
	}
	free(body);
	free(error_text);
	return r;
}

/* The last attempt failed, or cannot be made: the failure goes to the database. */
static job_outcome
dead_letter(step_run *run, const webhook_target *t, json_t *error)
{
	json_int_t	failure_id = 0;
	pf_error	err;

	if (record_failure(run, error, &failure_id, &err) != PF_OK)
	{
		/* it comes back after its visibility timeout and is recorded then */
		log_delivery(PF_LOG_ERROR, run, t, json_pack("{s:s,s:o}", "code", err.code, "error", loggable_error(error)),
					 "cannot record the failed delivery, message left: %s", err.message);
		return OUTCOME_LEAVE;
	}
	log_delivery(PF_LOG_WARN, run, t, json_pack("{s:I,s:o}", "failureId", failure_id, "error", loggable_error(error)),
				 "webhook not delivered: recorded in payflow.webhook_failures (replay with "
				 "payflow.replay_webhook), message deleted");
	return OUTCOME_DELETE;
}

/*
 * An event payflow did not publish: a dead letter, and the message goes.
 * Left to come back if the dead letter cannot be written.
 */
static job_outcome
forged(step_run *run, const char *why)
{
	worker	   *w = run->w;
	json_t	   *error = json_pack("{s:s,s:s}", "code", "forged_event", "message", why);
	pf_pg	   *pg = db_acquire(w->db, DB_WAIT_MS);
	pf_error	err;
	job_outcome outcome = OUTCOME_LEAVE;

	if (pg == NULL)
		pf_error_set(&err, PF_ERR_TRANSIENT, "53300", "no database connection free");
	else if (db_record_dead_letter(pg, w->transport->queue_name, run->input, error, run->operation_id,
								   &err) == PF_OK)
		outcome = OUTCOME_DELETE;
	db_release(w->db, pg);
	if (outcome == OUTCOME_DELETE)
		log_delivery(PF_LOG_WARN, run, NULL, json_pack("{s:s}", "code", "forged_event"),
					 "not an event payflow published: not delivered, recorded as a dead letter, message deleted");
	else
		log_delivery(PF_LOG_ERROR, run, NULL, json_pack("{s:s}", "code", err.code),
					 "not an event payflow published, and the dead letter cannot be written (message left): %s",
					 err.message);
	json_decref(error);
	return outcome;
}

/* The most attempts this message gets: the queue's DLQ must not take it first. */
static int
max_attempts(step_run *run, webhook_role_state *ws)
{
	int			max = ws->cfg->webhook_max_attempts;
	int			dlq = run->w->transport->max_receive_count;

	if (dlq > 0 && dlq < max)
	{
		if (!atomic_exchange(&ws->warned_redrive, true))
			pf_log_warn(NULL, "the queue moves a message to its DLQ after %d receives, before "
						"PAYFLOW_WEBHOOK_MAX_ATTEMPTS=%d: deliveries get %d attempts", dlq, max, dlq);
		max = dlq;
	}
	return max;
}

static job_outcome
webhook_handle(void *thread, step_run *run, int *hide_s)
{
	webhook_thread *wt = thread;
	const pf_config *cfg = wt->role->cfg;
	const pf_event *ev = run->event;
	int			last = max_attempts(run, wt->role);
	webhook_target t;
	pf_error	err;
	pf_result	r;
	pf_http_response resp;
	char		signature[PF_WEBHOOK_SIGNATURE_LEN];
	char		h_id[64];
	char		h_type[64];
	char		h_sig[32 + PF_WEBHOOK_SIGNATURE_LEN];
	const char *headers[4] = {h_id, h_type, h_sig, NULL};
	const char *refusal;
	json_t	   *error;
	job_outcome outcome;
	int			delay;
	double		retry_after;
	int			backoff_ms;

	if (ev->type != PF_EVENT_OPERATION_COMPLETED && ev->type != PF_EVENT_OPERATION_FAILED)
	{
		log_delivery(PF_LOG_DEBUG, run, NULL, NULL, "not a terminal event: no webhook, message deleted");
		return OUTCOME_DELETE;
	}

	switch (lookup_target(run, &t, &err))
	{
		case TARGET_NONE:
			log_delivery(PF_LOG_DEBUG, run, NULL, NULL, "the operation's tenant has no webhook: message deleted");
			return OUTCOME_DELETE;
		case TARGET_UNKNOWN:
			step_bad_message(run, "unknown_operation", err.message);
			return OUTCOME_LEAVE;
		case TARGET_FORGED:
			return forged(run, err.message);
		case TARGET_ERROR:
			log_delivery(PF_LOG_WARN, run, NULL, json_pack("{s:s}", "code", err.code),
						 "webhook_target failed, message left: %s", err.message);
			return OUTCOME_LEAVE;
		case TARGET_FOUND:
			break;
	}

	if ((refusal = url_refusal(cfg, t.url)) != NULL)
	{
		error = json_pack("{s:s,s:s}", "code", "url_not_allowed", "message", refusal);
		outcome = dead_letter(run, &t, error);
		json_decref(error);
		target_free(&t);
		return outcome;
	}

	pf_webhook_signature(t.secret, t.previous_secret, time(NULL), run->input, run->input_len, signature);
	snprintf(h_id, sizeof(h_id), "Payflow-Event-Id: %s", ev->event_id);
	snprintf(h_type, sizeof(h_type), "Payflow-Event-Type: %s", pf_event_type_name(ev->type));
	snprintf(h_sig, sizeof(h_sig), "Payflow-Signature: %s", signature);

	/* an interrupt aimed at the previous message must not hit this one */
	pf_http_call_clear_interrupt(wt->http);
	step_call_started(run, (cfg->webhook_timeout_ms + 999) / 1000);
	pf_http_call_set_trace(wt->http, run->trace);
	r = pf_http_call_post_json_with(wt->http, t.url, NULL, headers, run->input, run->input_len, &resp, &err);
	step_call_finished(run);

	if (r == PF_OK && resp.status >= 200 && resp.status < 300)
	{
		log_delivery(PF_LOG_INFO, run, &t,
					 json_pack("{s:i,s:I}", "httpStatus", (int) resp.status, "ms", (json_int_t) (resp.seconds * 1000)),
					 "webhook delivered");
		pf_http_response_free(&resp);
		target_free(&t);
		return OUTCOME_DELETE;
	}

	error = attempt_error(&resp, r, &err);
	if (step_stop_requested(run) != STOP_NONE)
	{
		/* cut short at shutdown: not the receiver's fault, the next worker tries */
		log_delivery(PF_LOG_WARN, run, &t, NULL, "webhook call interrupted at shutdown; message made visible again");
		outcome = OUTCOME_RELEASE;
	}
	else if (run->attempt >= last)
	{
		json_object_set_new(error, "attempts", json_integer(run->attempt));
		outcome = dead_letter(run, &t, error);
	}
	else
	{
		delay = retry_delay_s(cfg, run->attempt, &resp, &retry_after, &backoff_ms);
		log_delivery(PF_LOG_WARN, run, &t,
					 json_pack("{s:s,s:i,s:i,s:i,s:i,s:o*}", "code", json_string_value(json_object_get(error, "code")),
							   "httpStatus", (int) resp.status, "retryInSeconds", delay, "backoffMs", backoff_ms,
							   "maxAttempts", last,
							   "retryAfterSeconds", retry_after >= 0 ? json_real(retry_after) : NULL),
					 "webhook not delivered, attempt %d of %d; retry in %d s", run->attempt, last, delay);
		*hide_s = delay;
		outcome = OUTCOME_HIDE;
	}
	json_decref(error);
	pf_http_response_free(&resp);
	target_free(&t);
	return outcome;
}

static step_status
webhook_run(void *thread, step_run *run)
{
	/* never called: webhook_handle takes every event */
	step_set_error(run, "no_step", "the webhook role runs no step", NULL);
	return STEP_PERMANENT;
}

const role_ops webhook_role = {
	.name = "webhook",
	.program = PF_PROGRAM_WEBHOOK,
	.event_type = PF_EVENT_OPERATION_COMPLETED, /* and OperationFailed: webhook_handle sorts them */
	.step = "WEBHOOK",			/* a name no step has: nothing is ever claimed or heart-beaten */
	.init = webhook_init,
	.cleanup = webhook_cleanup,
	.thread_init = webhook_thread_init,
	.thread_cleanup = webhook_thread_cleanup,
	.run = webhook_run,
	.interrupt = webhook_interrupt,
	.handle_event = webhook_handle,
};
