/*
 * http_call.c
 *		A blocking, interruptible HTTP call on one curl multi handle.
 */
#include "payflow/http_call.h"

#include <ctype.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* The longest curl sleeps before it looks at the interrupt flag again. */
#define POLL_SLICE_MS 1000

struct pf_http_call
{
	CURLM	   *multi;
	CURL	   *easy;			/* kept between calls: its connection and TLS session */
	pf_http_call_options opt;
	char	   *user_agent;
	atomic_bool interrupted;
	long		calls;
	long		connections;
};

pf_http_call *
pf_http_call_create(const pf_http_call_options *options)
{
	pf_http_call *call = pf_calloc(1, sizeof(*call));

	curl_global_init(CURL_GLOBAL_DEFAULT);
	call->multi = curl_multi_init();
	call->easy = curl_easy_init();
	if (call->multi == NULL || call->easy == NULL)
		abort();
	call->opt = *options;
	call->user_agent = pf_strdup(options->user_agent ? options->user_agent : "payflow");
	call->opt.user_agent = call->user_agent;
	atomic_init(&call->interrupted, false);
	return call;
}

void
pf_http_call_destroy(pf_http_call *call)
{
	if (call == NULL)
		return;
	curl_easy_cleanup(call->easy);
	curl_multi_cleanup(call->multi);
	free(call->user_agent);
	free(call);
}

void
pf_http_call_interrupt(pf_http_call *call)
{
	atomic_store(&call->interrupted, true);
	/* wakes a curl_multi_poll in progress, or makes the next one return at once */
	curl_multi_wakeup(call->multi);
}

void
pf_http_call_clear_interrupt(pf_http_call *call)
{
	atomic_store(&call->interrupted, false);
}

static size_t
on_body(char *data, size_t size, size_t n, void *arg)
{
	pf_http_response *resp = arg;
	size_t		len = size * n;

	if (resp->body.len + len > PF_HTTP_CALL_MAX_BODY)
	{
		resp->truncated = true;
		len = resp->body.len < PF_HTTP_CALL_MAX_BODY ? PF_HTTP_CALL_MAX_BODY - resp->body.len : 0;
	}
	pf_buf_append(&resp->body, data, len);
	return size * n;
}

/* A header line "Name: value\r\n" when its name is name: the trimmed value into out. */
static bool
header_value(const char *line, size_t len, const char *name, char *out, size_t outlen)
{
	size_t		nlen = strlen(name);
	const char *v;
	const char *end = line + len;

	if (len <= nlen || strncasecmp(line, name, nlen) != 0 || line[nlen] != ':')
		return false;
	v = line + nlen + 1;
	while (v < end && (*v == ' ' || *v == '\t'))
		v++;
	while (end > v && isspace((unsigned char) end[-1]))
		end--;
	snprintf(out, outlen, "%.*s", (int) (end - v), v);
	return true;
}

static size_t
on_header(char *data, size_t size, size_t n, void *arg)
{
	pf_http_response *resp = arg;
	size_t		len = size * n;
	char		value[16];

	/* a new status line (after 100 Continue, say) starts a new header set */
	if (len >= 5 && strncmp(data, "HTTP/", 5) == 0)
	{
		resp->retry_after[0] = '\0';
		resp->replayed = false;
	}
	else if (!header_value(data, len, "Retry-After", resp->retry_after, sizeof(resp->retry_after)) &&
			 header_value(data, len, "Idempotent-Replayed", value, sizeof(value)))
		resp->replayed = strcasecmp(value, "true") == 0;
	return len;
}

static void
response_init(pf_http_response *resp)
{
	memset(resp, 0, sizeof(*resp));
	pf_buf_init(&resp->body);
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

pf_result
pf_http_call_post_json_with(pf_http_call *call, const char *url, const char *key, const char *const *extra_headers,
							const char *body, size_t body_len, pf_http_response *resp, pf_error *err)
{
	CURL	   *easy = call->easy;
	struct curl_slist *headers = NULL;
	pf_buf		line = PF_BUF_INIT;
	bool		done = false;
	CURLMcode	mc;

	response_init(resp);
	if (atomic_load(&call->interrupted))
	{
		resp->interrupted = true;
		return pf_error_set(err, PF_ERR_TRANSIENT, "interrupted", "POST %s: interrupted before it started", url);
	}

	headers = curl_slist_append(headers, "Content-Type: application/json");
	headers = curl_slist_append(headers, "Accept: application/json");
	/* curl would add "Expect: 100-continue" to large bodies: one wasted round trip */
	headers = curl_slist_append(headers, "Expect:");
	if (key != NULL)
	{
		pf_buf_appendf(&line, "Idempotency-Key: %s", key);
		headers = curl_slist_append(headers, line.data);
		pf_buf_free(&line);
	}
	for (int i = 0; extra_headers && extra_headers[i]; i++)
		headers = curl_slist_append(headers, extra_headers[i]);
	if (headers == NULL)
		abort();

	/* a reset keeps the connection cache and TLS sessions, drops the last call's options */
	curl_easy_reset(easy);
	curl_easy_setopt(easy, CURLOPT_URL, url);
	curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(easy, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(easy, CURLOPT_TCP_KEEPALIVE, 1L);
	curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS, call->opt.connect_timeout_ms);
	curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, call->opt.timeout_ms);
	curl_easy_setopt(easy, CURLOPT_SSL_VERIFYPEER, call->opt.verify_tls ? 1L : 0L);
	curl_easy_setopt(easy, CURLOPT_SSL_VERIFYHOST, call->opt.verify_tls ? 2L : 0L);
	curl_easy_setopt(easy, CURLOPT_USERAGENT, call->opt.user_agent);
	curl_easy_setopt(easy, CURLOPT_HTTPHEADER, headers);
	curl_easy_setopt(easy, CURLOPT_POST, 1L);
	curl_easy_setopt(easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t) body_len);
	curl_easy_setopt(easy, CURLOPT_POSTFIELDS, body ? body : "");
	curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(easy, CURLOPT_WRITEDATA, resp);
	curl_easy_setopt(easy, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(easy, CURLOPT_HEADERDATA, resp);
	curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, resp->curl_error);

	mc = curl_multi_add_handle(call->multi, easy);
	if (mc != CURLM_OK)
	{
		curl_slist_free_all(headers);
		return pf_error_set(err, PF_ERR_TRANSIENT, "curl", "curl_multi_add_handle: %s", curl_multi_strerror(mc));
	}
	while (!done)
	{
		int			running;
		int			left;
		CURLMsg    *msg;

		if (atomic_load(&call->interrupted))
		{
			resp->interrupted = true;
			break;
		}
		curl_multi_perform(call->multi, &running);
		while ((msg = curl_multi_info_read(call->multi, &left)) != NULL)
		{
			if (msg->msg == CURLMSG_DONE && msg->easy_handle == easy)
			{
				resp->curl_code = msg->data.result;
				done = true;
			}
		}
		if (!done)
			curl_multi_poll(call->multi, NULL, 0, POLL_SLICE_MS, NULL);
	}
	if (done)
	{
		long		opened = 0;

		curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &resp->status);
		curl_easy_getinfo(easy, CURLINFO_TOTAL_TIME, &resp->seconds);
		curl_easy_getinfo(easy, CURLINFO_NUM_CONNECTS, &opened);
		call->connections += opened;
		call->calls++;
	}
	curl_multi_remove_handle(call->multi, easy);
	curl_slist_free_all(headers);

	if (resp->interrupted)
	{
		resp->status = 0;
		return pf_error_set(err, PF_ERR_TRANSIENT, "interrupted", "POST %s: interrupted", url);
	}
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
pf_http_call_stats(const pf_http_call *call, long *calls, long *connections)
{
	*calls = call->calls;
	*connections = call->connections;
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
