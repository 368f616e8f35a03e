/*
 * http.c
 *		libcurl multi-interface client.
 */
#include "payflow/http.h"

#include <ctype.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "payflow/clock.h"

/* Idle easy handles kept for reuse (each keeps its TLS session cache). */
#define EASY_POOL_MAX 64
/* The longest a wait sleeps in curl before it looks at its deadline again. */
#define POLL_SLICE_MS 1000

struct pf_http
{
	CURLM	   *multi;
	int			in_flight;
	CURL	   *pool[EASY_POOL_MAX];
	int			n_pool;
	long		requests;		/* completed */
	long		connections;	/* opened by them */
	pf_http_request *done_head; /* finished, not yet handed out */
	pf_http_request *done_tail;
	atomic_bool interrupted;	/* set from any thread: pf_http_interrupt */
};

pf_http *
pf_http_create(void)
{
	pf_http    *http = pf_calloc(1, sizeof(pf_http));

	/* idempotent since curl 7.84 and cheap; the first call sets up TLS */
	curl_global_init(CURL_GLOBAL_DEFAULT);
	http->multi = curl_multi_init();
	if (http->multi == NULL)
		abort();
	/* connections kept open for reuse across requests */
	curl_multi_setopt(http->multi, CURLMOPT_MAXCONNECTS, 32L);
	atomic_init(&http->interrupted, false);
	return http;
}

void
pf_http_destroy(pf_http *http)
{
	if (http == NULL)
		return;
	for (int i = 0; i < http->n_pool; i++)
		curl_easy_cleanup(http->pool[i]);
	curl_multi_cleanup(http->multi);
	free(http);
}

void
pf_http_request_init(pf_http_request *req, const char *method, const char *url)
{
	memset(req, 0, sizeof(*req));
	req->method = pf_strdup(method);
	req->url = pf_strdup(url);
	pf_buf_init(&req->response);
	pf_buf_init(&req->response_headers);
	/* curl would add "Expect: 100-continue" to large bodies: one wasted round trip */
	req->headers = curl_slist_append(req->headers, "Expect:");
}

void
pf_http_request_add_header(pf_http_request *req, const char *name, const char *value)
{
	pf_buf		line = PF_BUF_INIT;

	pf_buf_appendf(&line, "%s: %s", name, value);
	req->headers = curl_slist_append(req->headers, line.data);
	pf_buf_free(&line);
	if (req->headers == NULL)
		abort();
}

void
pf_http_request_add_header_line(pf_http_request *req, const char *line)
{
	req->headers = curl_slist_append(req->headers, line);
	if (req->headers == NULL)
		abort();
}

void
pf_http_request_set_body(pf_http_request *req, const void *body, size_t len)
{
	req->body = body;
	req->body_len = len;
}

void
pf_http_request_clear_results(pf_http_request *req)
{
	req->status = 0;
	req->curl_code = CURLE_OK;
	req->curl_error[0] = '\0';
	req->seconds = 0;
	req->response_truncated = false;
	req->interrupted = false;
	pf_buf_reset(&req->response);
	pf_buf_reset(&req->response_headers);
}

void
pf_http_request_free(pf_http_request *req)
{
	free(req->method);
	free(req->url);
	curl_slist_free_all(req->headers);
	pf_buf_free(&req->response);
	pf_buf_free(&req->response_headers);
	req->method = req->url = NULL;
	req->headers = NULL;
}

static size_t
on_body(char *data, size_t size, size_t n, void *arg)
{
	pf_http_request *req = arg;
	size_t		len = size * n;

	/* past the cap the rest is read and dropped: the connection stays usable */
	if (req->max_response > 0 && req->response.len + len > req->max_response)
	{
		req->response_truncated = true;
		len = req->response.len < req->max_response ? req->max_response - req->response.len : 0;
	}
	pf_buf_append(&req->response, data, len);
	return size * n;
}

static size_t
on_header(char *data, size_t size, size_t n, void *arg)
{
	pf_http_request *req = arg;
	size_t		len = size * n;

	/* a new status line (after 100 Continue, say) starts a new header set */
	if (len >= 5 && strncmp(data, "HTTP/", 5) == 0)
		pf_buf_reset(&req->response_headers);
	pf_buf_append(&req->response_headers, data, len);
	return len;
}

pf_result
pf_http_start(pf_http *http, pf_http_request *req, pf_error *err)
{
	CURL	   *easy;
	CURLMcode	mc;

	if (req->in_flight)
		return pf_error_set(err, PF_ERR_INVALID, "http", "request already in flight");
	pf_http_request_clear_results(req);
	easy = http->n_pool > 0 ? http->pool[--http->n_pool] : curl_easy_init();
	if (easy == NULL)
		return pf_error_set(err, PF_ERR_TRANSIENT, "http", "curl_easy_init failed");

	curl_easy_setopt(easy, CURLOPT_URL, req->url);
	curl_easy_setopt(easy, CURLOPT_PRIVATE, req);
	curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(easy, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(easy, CURLOPT_TCP_KEEPALIVE, 1L);
	/* curl's defaults, stated: redirects are not followed, TLS is verified */
	curl_easy_setopt(easy, CURLOPT_FOLLOWLOCATION, 0L);
	curl_easy_setopt(easy, CURLOPT_SSL_VERIFYPEER, req->no_tls_verify ? 0L : 1L);
	curl_easy_setopt(easy, CURLOPT_SSL_VERIFYHOST, req->no_tls_verify ? 0L : 2L);
	if (req->user_agent != NULL)
		curl_easy_setopt(easy, CURLOPT_USERAGENT, req->user_agent);
	curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS,
					 req->connect_timeout_ms > 0 ? req->connect_timeout_ms : (long) PF_HTTP_DEFAULT_CONNECT_TIMEOUT_MS);
	curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS,
					 req->timeout_ms > 0 ? req->timeout_ms : (long) PF_HTTP_DEFAULT_TIMEOUT_MS);
	curl_easy_setopt(easy, CURLOPT_HTTPHEADER, req->headers);
	curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(easy, CURLOPT_WRITEDATA, req);
	curl_easy_setopt(easy, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(easy, CURLOPT_HEADERDATA, req);
	curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, req->curl_error);

	if (strcmp(req->method, "GET") == 0)
		curl_easy_setopt(easy, CURLOPT_HTTPGET, 1L);
	else if (strcmp(req->method, "HEAD") == 0)
		curl_easy_setopt(easy, CURLOPT_NOBODY, 1L);
	else
	{
		/* POST machinery carries the body; the method line is ours */
		curl_easy_setopt(easy, CURLOPT_POST, 1L);
		curl_easy_setopt(easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t) req->body_len);
		curl_easy_setopt(easy, CURLOPT_POSTFIELDS, req->body ? req->body : "");
		if (strcmp(req->method, "POST") != 0)
			curl_easy_setopt(easy, CURLOPT_CUSTOMREQUEST, req->method);
	}

	mc = curl_multi_add_handle(http->multi, easy);
	if (mc != CURLM_OK)
	{
		curl_easy_cleanup(easy);
		return pf_error_set(err, PF_ERR_TRANSIENT, "http", "curl_multi_add_handle: %s", curl_multi_strerror(mc));
	}
	req->easy = easy;
	req->in_flight = true;
	http->in_flight++;
	return PF_OK;
}

/* Detach a request's easy handle and keep the handle for reuse. */
static void
release_easy(pf_http *http, pf_http_request *req)
{
	curl_multi_remove_handle(http->multi, req->easy);
	if (http->n_pool < EASY_POOL_MAX)
	{
		curl_easy_reset(req->easy);
		http->pool[http->n_pool++] = req->easy;
	}
	else
		curl_easy_cleanup(req->easy);
	req->easy = NULL;
	req->in_flight = false;
	http->in_flight--;
}

static void
collect_finished(pf_http *http)
{
	CURLMsg    *msg;
	int			left;

	while ((msg = curl_multi_info_read(http->multi, &left)) != NULL)
	{
		pf_http_request *req = NULL;

		if (msg->msg != CURLMSG_DONE)
			continue;
		curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **) &req);
		req->curl_code = msg->data.result;
		curl_easy_getinfo(msg->easy_handle, CURLINFO_RESPONSE_CODE, &req->status);
		curl_easy_getinfo(msg->easy_handle, CURLINFO_TOTAL_TIME, &req->seconds);
		{
			long		opened = 0;

			curl_easy_getinfo(msg->easy_handle, CURLINFO_NUM_CONNECTS, &opened);
			http->connections += opened;
			http->requests++;
		}
		if (req->curl_code != CURLE_OK && req->curl_error[0] == '\0')
			snprintf(req->curl_error, sizeof(req->curl_error), "%s", curl_easy_strerror(req->curl_code));
		release_easy(http, req);

		req->next_done = NULL;
		if (http->done_tail)
			http->done_tail->next_done = req;
		else
			http->done_head = req;
		http->done_tail = req;
	}
}

static pf_http_request *
pop_done(pf_http *http, pf_http_request *want)
{
	pf_http_request *prev = NULL;

	for (pf_http_request *r = http->done_head; r; prev = r, r = r->next_done)
	{
		if (want != NULL && r != want)
			continue;
		if (prev)
			prev->next_done = r->next_done;
		else
			http->done_head = r->next_done;
		if (http->done_tail == r)
			http->done_tail = prev;
		r->next_done = NULL;
		return r;
	}
	return NULL;
}


static pf_http_request *
wait_for(pf_http *http, pf_http_request *want, int timeout_ms, int extra_fd)
{
	long		deadline = timeout_ms >= 0 ? pf_now_ms() + timeout_ms : 0;

	for (;;)
	{
		int			running;
		int			numfds = 0;
		long		left;
		pf_http_request *r;
		struct curl_waitfd extra;

		curl_multi_perform(http->multi, &running);
		collect_finished(http);
		if ((r = pop_done(http, want)) != NULL)
			return r;
		if (atomic_load(&http->interrupted))
			return NULL;
		if (http->in_flight == 0 && extra_fd < 0)
			return NULL;
		if (want != NULL && !want->in_flight)
			return NULL;		/* cancelled */

		left = timeout_ms >= 0 ? deadline - pf_now_ms() : POLL_SLICE_MS;
		if (left <= 0)
			return NULL;
		extra.fd = extra_fd;
		extra.events = CURL_WAIT_POLLIN;
		extra.revents = 0;
		curl_multi_poll(http->multi, extra_fd >= 0 ? &extra : NULL, extra_fd >= 0 ? 1 : 0,
						(int) (left > POLL_SLICE_MS ? POLL_SLICE_MS : left), &numfds);
		if (extra_fd >= 0 && extra.revents != 0)
		{
			curl_multi_perform(http->multi, &running);
			collect_finished(http);
			return pop_done(http, want);
		}
	}
}

pf_http_request *
pf_http_wait(pf_http *http, int timeout_ms, int extra_fd)
{
	pf_http_request *r = pop_done(http, NULL);

	return r ? r : wait_for(http, NULL, timeout_ms, extra_fd);
}

pf_result
pf_http_perform(pf_http *http, pf_http_request *req, pf_error *err)
{
	pf_result	r;

	if (atomic_load(&http->interrupted))
	{
		pf_http_request_clear_results(req);
		req->interrupted = true;
		return pf_error_set(err, PF_ERR_TRANSIENT, "interrupted", "%s %s: interrupted before it started",
							req->method, req->url);
	}
	r = pf_http_start(http, req, err);
	if (r != PF_OK)
		return r;
	/* the request's own time-out bounds this wait */
	if (wait_for(http, req, -1, -1) == NULL)
	{
		if (req->in_flight)
		{
			/* interrupted: a request left in the transfer set would go on */
			release_easy(http, req);
			req->status = 0;
			req->interrupted = true;
			return pf_error_set(err, PF_ERR_TRANSIENT, "interrupted", "%s %s: interrupted", req->method, req->url);
		}
		return pf_error_set(err, PF_ERR_TRANSIENT, "http", "request abandoned");
	}
	if (pf_http_transport_failed(req))
		return pf_error_set(err, PF_ERR_TRANSIENT, "curl", "%s %s: %s", req->method, req->url, req->curl_error);
	return PF_OK;
}

void
pf_http_interrupt(pf_http *http)
{
	atomic_store(&http->interrupted, true);
	/* wakes a curl_multi_poll in progress, or makes the next one return at once */
	curl_multi_wakeup(http->multi);
}

void
pf_http_clear_interrupt(pf_http *http)
{
	atomic_store(&http->interrupted, false);
}

void
pf_http_cancel(pf_http *http, pf_http_request *req)
{
	if (req->in_flight)
		release_easy(http, req);
	else
		(void) pop_done(http, req);
}

void
pf_http_stats(const pf_http *http, long *requests, long *connections)
{
	*requests = http->requests;
	*connections = http->connections;
}

int
pf_http_in_flight(const pf_http *http)
{
	return http->in_flight;
}

bool
pf_http_transport_failed(const pf_http_request *req)
{
	return req->curl_code != CURLE_OK || req->status == 0;
}

bool
pf_http_response_header(const pf_http_request *req, const char *name, char *out, size_t outlen)
{
	const char *p = pf_buf_str(&req->response_headers);
	size_t		nlen = strlen(name);

	while (*p)
	{
		const char *eol = strchr(p, '\n');
		size_t		len = eol ? (size_t) (eol - p) : strlen(p);

		if (len > nlen && strncasecmp(p, name, nlen) == 0 && p[nlen] == ':')
		{
			const char *v = p + nlen + 1;
			const char *end = p + len;

			while (v < end && (*v == ' ' || *v == '\t'))
				v++;
			while (end > v && isspace((unsigned char) end[-1]))
				end--;
			snprintf(out, outlen, "%.*s", (int) (end - v), v);
			return true;
		}
		if (!eol)
			break;
		p = eol + 1;
	}
	return false;
}

bool
pf_url_is_loopback(const char *url)
{
	CURLU	   *u = curl_url();
	char	   *host = NULL;
	bool		loopback = false;

	if (u == NULL)
		abort();
	if (curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
		curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK && host != NULL)
	{
		unsigned	a,
					b,
					c,
					d;
		char		tail;

		if (strcasecmp(host, "localhost") == 0 || strcmp(host, "[::1]") == 0)
			loopback = true;
		else if (sscanf(host, "%u.%u.%u.%u%c", &a, &b, &c, &d, &tail) == 4)
			loopback = a == 127 && b <= 255 && c <= 255 && d <= 255;
	}
	curl_free(host);
	curl_url_cleanup(u);
	return loopback;
}
