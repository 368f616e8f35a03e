/*
 * http_call.h
 *		One blocking HTTP call at a time on a thread of its own, that another
 *		thread can cut short: what a worker's executor needs to call an
 *		external API (the invoice API, an HTTP post-processing hook, a
 *		webhook).
 *
 * A layer on the one HTTP client (http.h), which does the transfer, the
 * time-outs, TLS and the interruption; this adds the JSON POST with its
 * Idempotency-Key, the answer's size cap, Retry-After and
 * Idempotent-Replayed, and the step-level error codes.
 *
 * Each executor owns one pf_http_call (a pf_http and its connections, kept
 * between calls). The call blocks its thread until an answer, a time-out
 * (connect and total, on every call) or pf_http_call_interrupt() from any
 * other thread, which wakes the call at once instead of waiting for the
 * time-out: the worker's drain and its watchdog rely on that.
 *
 * TLS peer and host verification are on unless the caller turns them off;
 * the settings allow that only for loopback URLs (pf_url_is_loopback).
 */
#ifndef PAYFLOW_HTTP_CALL_H
#define PAYFLOW_HTTP_CALL_H

#include <stdbool.h>
#include <stddef.h>

#include <curl/curl.h>

#include "payflow/buf.h"
#include "payflow/error.h"
#include "payflow/http.h"
#include "payflow/trace_context.h"

/* A larger answer is cut here (and then no longer parses as JSON). */
#define PF_HTTP_CALL_MAX_BODY (1024 * 1024)

typedef struct pf_http_call pf_http_call;

typedef struct pf_http_call_options
{
	long		connect_timeout_ms;
	long		timeout_ms;		/* the whole call, connect included */
	bool		verify_tls;
	const char *user_agent;		/* NULL: "payflow" */
} pf_http_call_options;

typedef struct pf_http_response
{
	long		status;			/* 0 when no HTTP answer came */
	CURLcode	curl_code;
	char		curl_error[CURL_ERROR_SIZE];
	bool		interrupted;	/* pf_http_call_interrupt() ended it */
	bool		truncated;		/* the body exceeded PF_HTTP_CALL_MAX_BODY */
	pf_buf		body;
	char		retry_after[128];	/* the Retry-After header; "" when absent */
	bool		replayed;		/* Idempotent-Replayed: true (a key seen before) */
	double		seconds;
} pf_http_response;

pf_http_call *pf_http_call_create(const pf_http_call_options *options);
void		pf_http_call_destroy(pf_http_call *call);

/*
 * Any thread: end the call in progress at once, or the next one before it
 * starts, until pf_http_call_clear_interrupt() (which the owning thread
 * calls before a new piece of work, so a stale interrupt hits nothing).
 */
void		pf_http_call_interrupt(pf_http_call *call);
void		pf_http_call_clear_interrupt(pf_http_call *call);

/*
 * POST a JSON body with "Idempotency-Key: key" (when key is not NULL).
 * PF_OK when an HTTP answer came, whatever its status (resp filled);
 * PF_ERR_TRANSIENT when none did: code "curl:<n>" (curl:28 is a time-out)
 * or "interrupted". resp is always initialised: pf_http_response_free it.
 */
pf_result	pf_http_call_post_json(pf_http_call *call, const char *url, const char *key,
								   const char *body, size_t body_len, pf_http_response *resp,
								   pf_error *err);

/*
 * The same with extra header lines "Name: value" (a NULL-terminated list,
 * or NULL), e.g. a webhook's signature; key may be NULL.
 */
pf_result	pf_http_call_post_json_with(pf_http_call *call, const char *url, const char *key,
										const char *const *extra_headers, const char *body, size_t body_len,
										pf_http_response *resp, pf_error *err);
void		pf_http_response_free(pf_http_response *resp);

/*
 * The next POST's parent span (tracer.h): the POST is a span of its own
 * under it, and sends its traceparent to the server. Once: a POST takes it.
 */
void		pf_http_call_set_trace(pf_http_call *call, const pf_trace_context *parent);

/* Connections this handle opened and calls it made: reuse is their ratio. */
void		pf_http_call_stats(const pf_http_call *call, long *calls, long *connections);

#endif							/* PAYFLOW_HTTP_CALL_H */
