/*
 * http.h
 *		HTTP client on libcurl's multi interface: many requests in flight on one
 *		thread, connections kept and reused between requests, connect and total
 *		time-outs on every request.
 *
 * Start any number of requests with pf_http_start(), then collect them one
 * by one with pf_http_wait(); pf_http_perform() runs a single request to
 * completion (requests of others that finish meanwhile wait for the next
 * pf_http_wait()). Not thread-safe: one pf_http per thread, except
 * pf_http_interrupt(), which any thread may call.
 *
 * This is payflow's one HTTP client: the AWS clients, the container
 * credentials, ECS task protection, and (through http_call.h, a JSON POST
 * on top of it) the invoice API, the HTTP post-processing hook and the
 * webhooks. Every request gets the same transport rules: http and https
 * only, redirects never followed (a moved endpoint is a setting to fix),
 * TLS peer and host verified unless the request asks otherwise (the
 * settings allow that for loopback URLs only), no "Expect: 100-continue".
 *
 * CURLOPT_NOSIGNAL is set on every request; programs must ignore SIGPIPE
 * (pf_http_create does not change signal dispositions behind their back).
 */
#ifndef PAYFLOW_HTTP_H
#define PAYFLOW_HTTP_H

#include <stdbool.h>
#include <stddef.h>

#include <curl/curl.h>

#include "payflow/buf.h"
#include "payflow/error.h"

#define PF_HTTP_DEFAULT_CONNECT_TIMEOUT_MS 3000
#define PF_HTTP_DEFAULT_TIMEOUT_MS 30000

typedef struct pf_http pf_http;

typedef struct pf_http_request
{
	/* set by the caller (pf_http_request_init and the setters) */
	char	   *method;
	char	   *url;
	struct curl_slist *headers;
	const void *body;			/* not copied: must live until completion */
	size_t		body_len;
	long		connect_timeout_ms; /* 0: default */
	long		timeout_ms;		/* 0: default */
	bool		no_tls_verify;	/* skip peer and host checks: loopback stand-ins only */
	const char *user_agent;		/* NULL: no User-Agent; not copied */
	size_t		max_response;	/* 0: no limit; the body is cut there */
	void	   *user;			/* for the caller */

	/* filled on completion */
	long		status;			/* HTTP status, 0 when none was received */
	CURLcode	curl_code;
	char		curl_error[CURL_ERROR_SIZE];
	pf_buf		response;
	pf_buf		response_headers;	/* the final response's header lines */
	bool		response_truncated; /* the body exceeded max_response */
	bool		interrupted;	/* pf_http_interrupt() ended it (pf_http_perform) */
	double		seconds;		/* total time */

	/* private */
	CURL	   *easy;
	bool		in_flight;
	struct pf_http_request *next_done;
} pf_http_request;

pf_http    *pf_http_create(void);
void		pf_http_destroy(pf_http *http);

void		pf_http_request_init(pf_http_request *req, const char *method, const char *url);
void		pf_http_request_add_header(pf_http_request *req, const char *name, const char *value);

/* A whole header line "Name: value" (e.g. a webhook's signature). */
void		pf_http_request_add_header_line(pf_http_request *req, const char *line);
void		pf_http_request_set_body(pf_http_request *req, const void *body, size_t len);

/* Forget the results so the same request can be started again (a retry). */
void		pf_http_request_clear_results(pf_http_request *req);
void		pf_http_request_free(pf_http_request *req);

/* Add a request to the transfer set. Fails only when curl refuses it. */
pf_result	pf_http_start(pf_http *http, pf_http_request *req, pf_error *err);

/*
 * Wait up to timeout_ms (-1: no limit) for a started request to finish and
 * return it, or NULL on time-out or when nothing is in flight. extra_fd, when
 * >= 0, is polled too (e.g. PQsocket for LISTEN): if it becomes readable,
 * pf_http_wait returns NULL early.
 */
pf_http_request *pf_http_wait(pf_http *http, int timeout_ms, int extra_fd);

/*
 * Start req and wait for it alone. Returns PF_OK when a response (any
 * status) came; PF_ERR_TRANSIENT with code "curl" when none did, or
 * "interrupted" (req->interrupted set) when pf_http_interrupt() ended it
 * or had been called before it started.
 */
pf_result	pf_http_perform(pf_http *http, pf_http_request *req, pf_error *err);

/*
 * Any thread: make the pf_http_perform or pf_http_wait in progress return
 * at once (curl_multi_wakeup, no waiting for a time-out), and every later
 * one, until pf_http_clear_interrupt() (which the owning thread calls
 * before a new piece of work, so a stale interrupt hits nothing). A worker's
 * drain and its watchdog rely on it.
 */
void		pf_http_interrupt(pf_http *http);
void		pf_http_clear_interrupt(pf_http *http);

/* Abandon a request in flight (shutdown, a caller that gave up). */
void		pf_http_cancel(pf_http *http, pf_http_request *req);
int			pf_http_in_flight(const pf_http *http);

/* Requests completed and new connections they opened: reuse is their ratio. */
void		pf_http_stats(const pf_http *http, long *requests, long *connections);

/* A response header's value (case-insensitive name, trimmed); false if absent. */
bool		pf_http_response_header(const pf_http_request *req, const char *name,
									char *out, size_t outlen);

/* The transport failed (no HTTP response): connection refused, time-out, reset... */
bool		pf_http_transport_failed(const pf_http_request *req);

/* Is the URL's host loopback: localhost, 127.0.0.0/8 or ::1? */
bool		pf_url_is_loopback(const char *url);

#endif							/* PAYFLOW_HTTP_H */
