/*
 * aws_client.c
 *		Signing, sending and retrying AWS calls.
 */
#include "payflow/aws_client.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <curl/curl.h>

#include "payflow/backoff.h"
#include "payflow/digest.h"
#include "payflow/log.h"
#include "payflow/sigv4.h"

#define RETRY_BASE_MS 100
#define RETRY_CAP_MS 20000
/* throttling needs more room than a blip */
#define THROTTLE_BASE_MS 500

struct pf_aws_client
{
	pf_http    *http;
	pf_aws_credentials_provider *credentials;
	char	   *region;
	int			max_attempts;
	long		connect_timeout_ms;
	long		timeout_ms;
	int			pending;		/* started, not yet handed back */
	pf_aws_call *retries;		/* waiting for their retry time */
	pf_aws_call *done_head;		/* finished, not yet handed back */
	pf_aws_call *done_tail;
};

pf_aws_client *
pf_aws_client_create(const pf_config *cfg, pf_aws_credentials_provider *credentials)
{
	pf_aws_client *c = pf_calloc(1, sizeof(*c));

	c->http = pf_http_create();
	c->credentials = credentials;
	c->region = pf_strdup(cfg->aws_region ? cfg->aws_region : "us-east-1");
	c->max_attempts = cfg->aws_max_attempts > 0 ? cfg->aws_max_attempts : 5;
	c->connect_timeout_ms = cfg->http_connect_timeout_ms;
	c->timeout_ms = cfg->http_timeout_ms;
	return c;
}

void
pf_aws_client_destroy(pf_aws_client *client)
{
	if (client == NULL)
		return;
	pf_http_destroy(client->http);
	free(client->region);
	free(client);
}

pf_http *
pf_aws_client_http(pf_aws_client *client)
{
	return client->http;
}

const char *
pf_aws_client_region(const pf_aws_client *client)
{
	return client->region;
}

void
pf_aws_call_init(pf_aws_call *call, const char *service, const char *method, const char *url,
				 const void *body, size_t body_len)
{
	memset(call, 0, sizeof(*call));
	call->service = service;
	call->method = pf_strdup(method);
	call->url = pf_strdup(url);
	pf_buf_init(&call->body);
	if (body_len > 0)
		pf_buf_append(&call->body, body, body_len);
	pf_error_clear(&call->error);
}

void
pf_aws_call_add_header(pf_aws_call *call, const char *name, const char *value)
{
	if (call->n_headers == PF_AWS_MAX_CALL_HEADERS)
		abort();				/* a programming error, not a run-time one */
	call->header_names[call->n_headers] = pf_strdup(name);
	call->header_values[call->n_headers] = pf_strdup(value);
	call->n_headers++;
}

void
pf_aws_call_free(pf_aws_call *call)
{
	free(call->method);
	free(call->url);
	pf_buf_free(&call->body);
	for (int i = 0; i < call->n_headers; i++)
	{
		free(call->header_names[i]);
		free(call->header_values[i]);
	}
	call->n_headers = 0;
	pf_http_request_free(&call->http);
	call->method = call->url = NULL;
}

bool
pf_aws_retryable(long status, const char *code)
{
	/* the codes the AWS SDKs' standard retry mode treats as transient or throttling */
	static const char *const retry_codes[] = {
		"Throttling", "ThrottlingException", "ThrottledException", "RequestThrottledException",
		"TooManyRequestsException", "ProvisionedThroughputExceededException",
		"TransactionInProgressException", "RequestLimitExceeded", "BandwidthLimitExceeded",
		"LimitExceededException", "RequestThrottled", "SlowDown", "PriorRequestNotComplete",
		"EC2ThrottledException", "RequestTimeout", "RequestTimeoutException", "InternalError",
		"InternalFailure", "ServiceUnavailable", "ExpiredToken", "ExpiredTokenException",
		"RequestExpired", "IDPCommunicationError", "KmsThrottled", "KMS.ThrottlingException",
		"AWS.SimpleQueueService.RequestThrottled", NULL
	};

	if (status == 0 || status >= 500 || status == 429)
		return true;
	for (int i = 0; code && retry_codes[i]; i++)
		if (strcmp(code, retry_codes[i]) == 0)
			return true;
	return false;
}

static bool
is_throttle(const char *code)
{
	return strstr(code, "hrottl") != NULL || strcmp(code, "SlowDown") == 0 ||
		strcmp(code, "TooManyRequestsException") == 0 || strcmp(code, "RequestLimitExceeded") == 0;
}

static bool
is_expired_token(const char *code)
{
	return strcmp(code, "ExpiredToken") == 0 || strcmp(code, "ExpiredTokenException") == 0 ||
		strcmp(code, "RequestExpired") == 0;
}

/* One more header to sign, at headers[*n]. */
static void
add_header(pf_sigv4_header *headers, size_t *n, const char *name, const char *value)
{
	headers[*n].name = name;
	headers[*n].value = value;
	(*n)++;
}

/* Build, sign and start one attempt. */
static pf_result
start_attempt(pf_aws_client *client, pf_aws_call *call)
{
	const pf_aws_credentials *creds;
	CURLU	   *u = curl_url();
	char	   *host = NULL,
			   *port = NULL,
			   *path = NULL,
			   *query = NULL;
	pf_buf		host_header = PF_BUF_INIT;
	char		amz_date[PF_AMZ_DATE_LEN + 1];
	char		payload_hash[PF_SHA256_HEX_LEN + 1];
	pf_sigv4_header headers[PF_AWS_MAX_CALL_HEADERS + 4];
	size_t		n = 0;
	pf_sigv4_request sreq;
	pf_sigv4_scope scope;
	pf_sigv4_result signature;
	pf_result	r;

	pf_error_clear(&call->error);
	r = pf_aws_credentials_get(client->credentials, call->blocking, &creds, &call->error);
	if (r != PF_OK)
	{
		curl_url_cleanup(u);
		return r;
	}
	if (curl_url_set(u, CURLUPART_URL, call->url, 0) != CURLUE_OK ||
		curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK ||
		curl_url_get(u, CURLUPART_PATH, &path, 0) != CURLUE_OK)
	{
		curl_url_cleanup(u);
		curl_free(host);
		curl_free(path);
		return pf_error_set(&call->error, PF_ERR_INVALID, "url", "cannot parse URL %s", call->url);
	}
	curl_url_get(u, CURLUPART_PORT, &port, 0);	/* only when written in the URL */
	curl_url_get(u, CURLUPART_QUERY, &query, 0);
	pf_buf_appendf(&host_header, "%s%s%s", host, port ? ":" : "", port ? port : "");

	pf_sigv4_amz_date(time(NULL), amz_date);
	pf_sha256_hex(call->body.data ? call->body.data : "", call->body.len, payload_hash);

	add_header(headers, &n, "Host", host_header.data);
	add_header(headers, &n, "X-Amz-Date", amz_date);
	add_header(headers, &n, "X-Amz-Content-Sha256", payload_hash);
	if (creds->session_token)
		add_header(headers, &n, "X-Amz-Security-Token", creds->session_token);
	for (int i = 0; i < call->n_headers; i++)
		add_header(headers, &n, call->header_names[i], call->header_values[i]);

	sreq.method = call->method;
	sreq.path = path;
	sreq.query = query;
	sreq.headers = headers;
	sreq.n_headers = n;
	sreq.payload_hash = payload_hash;
	sreq.s3 = strcmp(call->service, "s3") == 0;
	scope.access_key_id = creds->access_key_id;
	scope.secret_access_key = creds->secret_access_key;
	scope.region = client->region;
	scope.service = call->service;
	scope.amz_date = amz_date;
	r = pf_sigv4_sign(&sreq, &scope, &signature, &call->error);

	if (r == PF_OK)
	{
		pf_http_request_free(&call->http);
		pf_http_request_init(&call->http, call->method, call->url);
		for (size_t i = 0; i < n; i++)
			pf_http_request_add_header(&call->http, headers[i].name, headers[i].value);
		pf_http_request_add_header(&call->http, "Authorization", signature.authorization);
		pf_http_request_set_body(&call->http, call->body.data, call->body.len);
		call->http.connect_timeout_ms = client->connect_timeout_ms;
		call->http.timeout_ms = call->timeout_ms > 0 ? call->timeout_ms : client->timeout_ms;
		call->http.user = call;
		call->attempts++;
		r = pf_http_start(client->http, &call->http, &call->error);
		pf_sigv4_result_free(&signature);
	}

	pf_buf_free(&host_header);
	curl_free(host);
	curl_free(port);
	curl_free(path);
	curl_free(query);
	curl_url_cleanup(u);
	return r;
}

static void
push_done(pf_aws_client *client, pf_aws_call *call)
{
	call->next = NULL;
	if (client->done_tail)
		client->done_tail->next = call;
	else
		client->done_head = call;
	client->done_tail = call;
}

static pf_aws_call *
pop_done(pf_aws_client *client, pf_aws_call *want)
{
	pf_aws_call *prev = NULL;

	for (pf_aws_call *c = client->done_head; c; prev = c, c = c->next)
	{
		if (want && c != want)
			continue;
		if (prev)
			prev->next = c->next;
		else
			client->done_head = c->next;
		if (client->done_tail == c)
			client->done_tail = prev;
		c->next = NULL;
		c->active = false;
		client->pending--;
		return c;
	}
	return NULL;
}

static void
schedule_retry(pf_aws_client *client, pf_aws_call *call)
{
	bool		throttled = is_throttle(call->error.code);
	int			delay = pf_backoff_ms(call->attempts - 1, throttled ? THROTTLE_BASE_MS : RETRY_BASE_MS,
									  RETRY_CAP_MS);

	pf_log_debug(NULL, "%s %s attempt %d failed (%s), retrying in %d ms", call->service, call->method,
				 call->attempts, call->error.code, delay);
	call->retry_at_ms = pf_now_ms() + delay;
	call->next = client->retries;
	client->retries = call;
}

/* Judge a finished attempt: done (either way) or retry later. */
static void
finish_attempt(pf_aws_client *client, pf_aws_call *call)
{
	pf_http_request *h = &call->http;

	if (pf_http_transport_failed(h))
		pf_error_set(&call->error, PF_ERR_TRANSIENT, "NetworkError", "%s %s: %s", call->method, call->url,
					 h->curl_error[0] ? h->curl_error : "no response");
	else if (h->status >= 200 && h->status <= 299)
	{
		pf_error_clear(&call->error);
		call->error.http_status = h->status;
		push_done(client, call);
		return;
	}
	else
	{
		pf_error_set(&call->error, PF_ERR_FINAL, "", "HTTP %ld", h->status);
		if (call->parse_error)
			call->parse_error(call);
		if (call->error.code[0] == '\0')
			snprintf(call->error.code, sizeof(call->error.code), "HTTP%ld", h->status);
		if (pf_aws_retryable(h->status, call->error.code))
			call->error.result = PF_ERR_TRANSIENT;
		else if (call->error.result == PF_ERR_TRANSIENT)
			call->error.result = PF_ERR_FINAL;
	}
	call->error.http_status = h->status;
	if (is_expired_token(call->error.code))
		pf_aws_credentials_invalidate(client->credentials);

	if (call->error.result == PF_ERR_TRANSIENT && call->attempts < client->max_attempts)
		schedule_retry(client, call);
	else
		push_done(client, call);
}

pf_result
pf_aws_start(pf_aws_client *client, pf_aws_call *call)
{
	pf_result	r;

	if (call->active)
		abort();				/* started twice: its transfer would be freed in flight */
	call->attempts = 0;
	call->active = true;
	client->pending++;
	r = start_attempt(client, call);
	if (r != PF_OK)
	{
		/* reported through pf_aws_wait like any other outcome */
		if (r == PF_ERR_TRANSIENT && call->attempts < client->max_attempts)
		{
			call->attempts++;
			schedule_retry(client, call);
		}
		else
			push_done(client, call);
	}
	return PF_OK;
}

/* Start the retries whose time has come; return ms until the next one (or -1). */
static int
start_due_retries(pf_aws_client *client)
{
	int64_t		now = pf_now_ms();
	int64_t		next = -1;
	pf_aws_call **link = &client->retries;

	while (*link)
	{
		pf_aws_call *c = *link;

		if (c->retry_at_ms <= now)
		{
			*link = c->next;
			c->next = NULL;
			if (start_attempt(client, c) != PF_OK)
			{
				if (c->error.result == PF_ERR_TRANSIENT && c->attempts < client->max_attempts)
				{
					c->attempts++;
					schedule_retry(client, c);
				}
				else
					push_done(client, c);
				link = &client->retries;	/* the list changed under us */
			}
			continue;
		}
		if (next < 0 || c->retry_at_ms - now < next)
			next = c->retry_at_ms - now;
		link = &c->next;
	}
	return (int) next;
}

static bool
fd_readable(int fd)
{
	struct pollfd p = {fd, POLLIN, 0};

	return poll(&p, 1, 0) > 0;
}

static pf_aws_call *
wait_for(pf_aws_client *client, pf_aws_call *want, int timeout_ms, int extra_fd)
{
	int64_t		deadline = timeout_ms >= 0 ? pf_now_ms() + timeout_ms : -1;

	for (;;)
	{
		pf_aws_call *c;
		pf_http_request *h;
		int			until_retry;
		int			wait_ms;

		if ((c = pop_done(client, want)) != NULL)
			return c;
		until_retry = start_due_retries(client);
		if ((c = pop_done(client, want)) != NULL)
			return c;
		if ((client->pending == 0 && extra_fd < 0) || (want && !want->active))
			return NULL;

		/*
		 * Transfers that already finished come first, without waiting: one
		 * pf_http_wait may have collected several, and once none is left in
		 * flight nothing below would ever hand the others over.
		 */
		if ((h = pf_http_wait(client->http, 0, -1)) != NULL)
		{
			finish_attempt(client, (pf_aws_call *) h->user);
			continue;
		}

		wait_ms = until_retry >= 0 ? until_retry : 1000;
		if (deadline >= 0)
		{
			int64_t		left = deadline - pf_now_ms();

			if (left <= 0)
				return NULL;
			if (left < wait_ms)
				wait_ms = (int) left;
		}
		if (pf_http_in_flight(client->http) == 0 && extra_fd < 0)
		{
			/* only retries pending: sleep until the first is due */
			pf_sleep_ms(wait_ms);
			continue;
		}
		h = pf_http_wait(client->http, wait_ms, extra_fd);
		if (h != NULL)
			finish_attempt(client, (pf_aws_call *) h->user);
		else if (extra_fd >= 0 && fd_readable(extra_fd))
			return NULL;
	}
}

pf_aws_call *
pf_aws_wait(pf_aws_client *client, int timeout_ms, int extra_fd)
{
	return wait_for(client, NULL, timeout_ms, extra_fd);
}

int
pf_aws_pending(const pf_aws_client *client)
{
	return client->pending;
}

pf_result
pf_aws_perform(pf_aws_client *client, pf_aws_call *call)
{
	call->blocking = true;
	if (!call->active)
		pf_aws_start(client, call);
	while (call->active)
	{
		if (wait_for(client, call, -1, -1) == call)
			break;
	}
	return call->error.result;
}
