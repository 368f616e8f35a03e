/*
 * test_worker_invoice.c
 *		The HTTP side of the invoice and post-processing roles without the
 *		worker: what each answer means for the step (statuses, Retry-After in
 *		both forms, bodies that are not what they should be, the invoice id),
 *		the interruptible call against a local socket (headers and body sent,
 *		the answer read, time-out, refused, interrupt mid-call and before it),
 *		loopback detection and the TLS and time-out settings.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "payflow/backoff.h"
#include "payflow/config.h"
#include "payflow/http_call.h"
#include "payflow/http_outcome.h"
#include "unit.h"

/* ---- classification ---- */

static void
test_status_verdicts(void)
{
	static const long done[] = {200, 201, 202, 204, 299};
	static const long retryable[] = {408, 409, 425, 429, 500, 502, 503, 504, 507, 599};
	static const long permanent[] = {100, 301, 302, 304, 400, 401, 403, 404, 405, 413, 415, 422, 451, 501, 505};

	for (size_t i = 0; i < sizeof(done) / sizeof(done[0]); i++)
		CHECK(pf_http_status_verdict(done[i]) == PF_HTTP_DONE);
	for (size_t i = 0; i < sizeof(retryable) / sizeof(retryable[0]); i++)
		if (!CHECK(pf_http_status_verdict(retryable[i]) == PF_HTTP_RETRYABLE))
			fprintf(stderr, "  status %ld\n", retryable[i]);
	for (size_t i = 0; i < sizeof(permanent) / sizeof(permanent[0]); i++)
		if (!CHECK(pf_http_status_verdict(permanent[i]) == PF_HTTP_PERMANENT))
			fprintf(stderr, "  status %ld\n", permanent[i]);
	CHECK_STR(pf_http_verdict_name(PF_HTTP_RETRYABLE), "retryable");
}

static void
test_retry_after(void)
{
	/* Sun, 06 Nov 1994 08:49:37 GMT, RFC 9110's example */
	time_t		now = 784111777;
	double		s = -1;

	CHECK(pf_http_retry_after_seconds("2", now, &s) && s == 2);
	CHECK(pf_http_retry_after_seconds(" 120 ", now, &s) && s == 120);
	CHECK(pf_http_retry_after_seconds("0", now, &s) && s == 0);
	CHECK(pf_http_retry_after_seconds("99999999999", now, &s) && s == 86400);
	CHECK(pf_http_retry_after_seconds("Sun, 06 Nov 1994 08:49:47 GMT", now, &s) && s == 10);
	CHECK(pf_http_retry_after_seconds("Sunday, 06-Nov-94 08:50:37 GMT", now, &s) && s == 60);
	CHECK(pf_http_retry_after_seconds("Sun Nov  6 08:49:40 1994", now, &s) && s == 3);
	/* a date already past: now */
	CHECK(pf_http_retry_after_seconds("Sat, 05 Nov 1994 08:49:37 GMT", now, &s) && s == 0);
	CHECK(!pf_http_retry_after_seconds(NULL, now, &s));
	CHECK(!pf_http_retry_after_seconds("", now, &s));
	CHECK(!pf_http_retry_after_seconds("  ", now, &s));
	CHECK(!pf_http_retry_after_seconds("-5", now, &s));
	CHECK(!pf_http_retry_after_seconds("1.5", now, &s));
	CHECK(!pf_http_retry_after_seconds("soon", now, &s));
}

static void
fake_response(pf_http_response *resp, long status, const char *body, const char *retry_after)
{
	memset(resp, 0, sizeof(*resp));
	pf_buf_init(&resp->body);
	resp->status = status;
	if (body)
		pf_buf_append_str(&resp->body, body);
	if (retry_after)
		snprintf(resp->retry_after, sizeof(resp->retry_after), "%s", retry_after);
}

static pf_http_verdict
outcome_of(long status, const char *body, const char *retry_after, json_t **answer, json_t **error)
{
	pf_http_response resp;
	pf_http_verdict v;

	fake_response(&resp, status, body, retry_after);
	v = pf_http_outcome(&resp, PF_OK, NULL, "invoice", 784111777, answer, error);
	pf_http_response_free(&resp);
	return v;
}

static const char *
member(json_t *obj, const char *name)
{
	return json_string_value(json_object_get(obj, name));
}

static void
test_outcomes(void)
{
	static const char *const ids[] = {"id", "invoiceId", NULL};
	json_t	   *answer;
	json_t	   *error;
	pf_http_response resp;
	pf_error	err;
	char	   *id;

	/* 201 with the stand-in's invoice */
	CHECK(outcome_of(201, "{\"id\":\"inv_000001\",\"invoiceId\":\"inv_000001\",\"status\":\"issued\"}", NULL,
					 &answer, &error) == PF_HTTP_DONE);
	CHECK(error == NULL);
	id = pf_json_id_member(answer, ids);
	CHECK_STR(id, "inv_000001");
	free(id);
	json_decref(answer);

	/* only invoiceId; an integer id; an empty id does not count */
	CHECK(outcome_of(200, "{\"invoiceId\":\"INV-7\"}", NULL, &answer, &error) == PF_HTTP_DONE);
	id = pf_json_id_member(answer, ids);
	CHECK_STR(id, "INV-7");
	free(id);
	json_decref(answer);
	CHECK(outcome_of(200, "{\"id\":\"\",\"invoiceId\":42}", NULL, &answer, &error) == PF_HTTP_DONE);
	id = pf_json_id_member(answer, ids);
	CHECK_STR(id, "42");
	free(id);
	json_decref(answer);
	CHECK(outcome_of(200, "{\"status\":\"ok\",\"id\":null}", NULL, &answer, &error) == PF_HTTP_DONE);
	CHECK(pf_json_id_member(answer, ids) == NULL);
	json_decref(answer);

	/* a 2xx that is not a JSON object: permanent, with the start of the body */
	CHECK(outcome_of(200, "<html>ok</html>", NULL, &answer, &error) == PF_HTTP_PERMANENT);
	CHECK(answer == NULL);
	CHECK_STR(member(error, "code"), "invalid_answer");
	CHECK_STR(member(error, "body"), "<html>ok</html>");
	CHECK(json_integer_value(json_object_get(error, "httpStatus")) == 200);
	json_decref(error);
	CHECK(outcome_of(204, "", NULL, &answer, &error) == PF_HTTP_PERMANENT);
	json_decref(error);
	CHECK(outcome_of(200, "[1,2]", NULL, &answer, &error) == PF_HTTP_PERMANENT);
	CHECK_STR(member(error, "message"), "the answer is not a JSON object");
	json_decref(error);

	/* 429 with Retry-After: retryable, retryAfterSeconds for fail_step */
	CHECK(outcome_of(429, "{\"error\":{\"type\":\"rate_limit\",\"message\":\"slow down\"}}", "3", &answer,
					 &error) == PF_HTTP_RETRYABLE);
	CHECK_STR(member(error, "code"), "http_429");
	CHECK_STR(member(error, "message"), "invoice answered HTTP 429: slow down");
	CHECK_STR(member(error, "source"), "invoice");
	CHECK(json_integer_value(json_object_get(error, "retryAfterSeconds")) == 3);
	CHECK(json_integer_value(json_object_get(error, "httpStatus")) == 429);
	json_decref(error);

	/* 503 with an HTTP date */
	CHECK(outcome_of(503, "busy", "Sun, 06 Nov 1994 08:49:42 GMT", &answer, &error) == PF_HTTP_RETRYABLE);
	CHECK(json_integer_value(json_object_get(error, "retryAfterSeconds")) == 5);
	CHECK_STR(member(error, "message"), "invoice answered HTTP 503: busy");
	json_decref(error);

	/* 502 without Retry-After: no retryAfterSeconds, the database's back-off */
	CHECK(outcome_of(502, NULL, NULL, &answer, &error) == PF_HTTP_RETRYABLE);
	CHECK(json_object_get(error, "retryAfterSeconds") == NULL);
	CHECK(json_object_get(error, "body") == NULL);
	CHECK_STR(member(error, "message"), "invoice answered HTTP 502");
	json_decref(error);

	/* 400: permanent, Retry-After ignored */
	CHECK(outcome_of(400, "{\"error\":{\"type\":\"invalid_request_error\",\"message\":\"no amount\"}}", "5",
					 &answer, &error) == PF_HTTP_PERMANENT);
	CHECK_STR(member(error, "code"), "http_400");
	CHECK(json_object_get(error, "retryAfterSeconds") == NULL);
	json_decref(error);

	/* 500 retryable, 501 permanent (documented) */
	CHECK(outcome_of(500, NULL, NULL, &answer, &error) == PF_HTTP_RETRYABLE);
	json_decref(error);
	CHECK(outcome_of(501, NULL, NULL, &answer, &error) == PF_HTTP_PERMANENT);
	json_decref(error);

	/* no answer at all: retryable with the transport's code */
	fake_response(&resp, 0, NULL, NULL);
	pf_error_set(&err, PF_ERR_TRANSIENT, "curl:28", "POST http://x/invoices: Operation timed out");
	CHECK(pf_http_outcome(&resp, PF_ERR_TRANSIENT, &err, "invoice", time(NULL), &answer, &error) ==
		  PF_HTTP_RETRYABLE);
	CHECK_STR(member(error, "code"), "curl:28");
	CHECK(json_object_get(error, "httpStatus") == NULL);
	json_decref(error);
	pf_http_response_free(&resp);

	/* a huge error body is cut in the step's error */
	{
		char	   *big = malloc(5001);

		memset(big, 'x', 5000);
		big[5000] = '\0';
		CHECK(outcome_of(503, big, NULL, &answer, &error) == PF_HTTP_RETRYABLE);
		CHECK(strlen(member(error, "body")) == 300);
		CHECK(strlen(member(error, "message")) < 200);
		json_decref(error);
		free(big);
	}
}

static void
test_loopback(void)
{
	CHECK(pf_url_is_loopback("http://127.0.0.1:4580/invoices"));
	CHECK(pf_url_is_loopback("https://127.9.8.7/x"));
	CHECK(pf_url_is_loopback("https://localhost/invoices"));
	CHECK(pf_url_is_loopback("https://LOCALHOST:8443"));
	CHECK(pf_url_is_loopback("https://[::1]:8443/invoices"));
	CHECK(!pf_url_is_loopback("https://invoices.example.com/invoices"));
	CHECK(!pf_url_is_loopback("https://10.0.0.1/invoices"));
	CHECK(!pf_url_is_loopback("https://127.0.0.1.evil.example/invoices"));
	CHECK(!pf_url_is_loopback("https://localhost.evil.example/invoices"));
	CHECK(!pf_url_is_loopback("https://user@evil.example/?h=127.0.0.1"));
	CHECK(!pf_url_is_loopback("not a url"));
}

/* ---- settings ---- */

static void
worker_env(void)
{
	static const char *const vars[] = {
		"PAYFLOW_CONFIG_FILE", "PAYFLOW_POSTPROCESS_FUNCTION", "PAYFLOW_POSTPROCESS_URL", "PAYFLOW_INVOICE_URL",
		"PAYFLOW_INVOICE_TLS_VERIFY", "PAYFLOW_INVOICE_TIMEOUT_MS", "PAYFLOW_POSTPROCESS_TLS_VERIFY",
		"PAYFLOW_POSTPROCESS_TIMEOUT_MS", "PAYFLOW_HTTP_CONNECT_TIMEOUT_MS", "PAYFLOW_STORE", NULL
	};

	for (int i = 0; vars[i]; i++)
		unsetenv(vars[i]);
	setenv("PAYFLOW_DATABASE_URL", "postgresql://payflow@localhost:5432/payflow", 1);
	setenv("PAYFLOW_QUEUE_URL", "http://127.0.0.1:4566/000000000000/invoice-requests", 1);
	setenv("AWS_REGION", "eu-west-1", 1);
	setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE", 1);
	setenv("AWS_SECRET_ACCESS_KEY", "secret-secret-secret", 1);
}

static bool
load(pf_config *cfg, unsigned programs, char *error)
{
	return pf_config_load(cfg, programs, error, 512);
}

static void
test_settings(void)
{
	unsigned	invoice = PF_PROGRAM_WORKER | PF_PROGRAM_INVOICE;
	unsigned	postprocess = PF_PROGRAM_WORKER | PF_PROGRAM_POSTPROCESS;
	pf_config	cfg;
	char		error[512];

	worker_env();
	CHECK(!load(&cfg, invoice, error));
	CHECK_STR(error, "missing PAYFLOW_INVOICE_URL");

	setenv("PAYFLOW_INVOICE_URL", "https://invoices.example.com/v1/invoices", 1);
	if (CHECK(load(&cfg, invoice, error)))
	{
		CHECK(cfg.invoice_tls_verify == 1);
		CHECK(cfg.invoice_timeout_ms == 30000);
		CHECK(cfg.http_connect_timeout_ms == 3000);
		pf_config_free(&cfg);
	}

	/* unverified TLS: refused for a remote URL, in one line naming the setting */
	setenv("PAYFLOW_INVOICE_TLS_VERIFY", "false", 1);
	CHECK(!load(&cfg, invoice, error));
	CHECK_STR(error, "invalid PAYFLOW_INVOICE_TLS_VERIFY: false is accepted only for a loopback "
			  "PAYFLOW_INVOICE_URL (localhost, 127.0.0.0/8, [::1])");
	/* other roles sharing the settings are not concerned */
	setenv("PAYFLOW_POSTPROCESS_FUNCTION", "payflow.default_postprocess(text,jsonb)", 1);
	if (CHECK(load(&cfg, postprocess, error)))
		pf_config_free(&cfg);
	unsetenv("PAYFLOW_POSTPROCESS_FUNCTION");
	setenv("PAYFLOW_INVOICE_URL", "https://127.0.0.1:8443/invoices", 1);
	setenv("PAYFLOW_INVOICE_TIMEOUT_MS", "1500", 1);
	if (CHECK(load(&cfg, invoice, error)))
	{
		CHECK(cfg.invoice_tls_verify == 0);
		CHECK(cfg.invoice_timeout_ms == 1500);
		pf_config_free(&cfg);
	}
	setenv("PAYFLOW_INVOICE_TLS_VERIFY", "maybe", 1);
	CHECK(!load(&cfg, invoice, error));
	CHECK_STR(error, "invalid PAYFLOW_INVOICE_TLS_VERIFY: \"maybe\" is not one of false/true");
	setenv("PAYFLOW_INVOICE_TLS_VERIFY", "TRUE", 1);
	setenv("PAYFLOW_INVOICE_TIMEOUT_MS", "5", 1);
	CHECK(!load(&cfg, invoice, error));
	CHECK_STR(error, "invalid PAYFLOW_INVOICE_TIMEOUT_MS: \"5\" is not an integer from 100 to 3600000");
	unsetenv("PAYFLOW_INVOICE_TIMEOUT_MS");

	/* the post-processing hook: at most one of the two (neither: the shipped default), the same TLS rule */
	if (CHECK(load(&cfg, postprocess, error)))
		pf_config_free(&cfg);
	setenv("PAYFLOW_POSTPROCESS_URL", "https://hooks.example.com/postprocess", 1);
	setenv("PAYFLOW_POSTPROCESS_TLS_VERIFY", "false", 1);
	CHECK(!load(&cfg, postprocess, error));
	CHECK_STR(error, "invalid PAYFLOW_POSTPROCESS_TLS_VERIFY: false is accepted only for a loopback "
			  "PAYFLOW_POSTPROCESS_URL (localhost, 127.0.0.0/8, [::1])");
	setenv("PAYFLOW_POSTPROCESS_URL", "http://localhost:9000/postprocess", 1);
	setenv("PAYFLOW_POSTPROCESS_TIMEOUT_MS", "2500", 1);
	if (CHECK(load(&cfg, postprocess, error)))
	{
		CHECK(cfg.postprocess_tls_verify == 0);
		CHECK(cfg.postprocess_timeout_ms == 2500);
		pf_config_free(&cfg);
	}
	worker_env();
}

/* ---- the call, against a socket of our own ---- */

typedef enum server_mode
{
	SERVE_ANSWER,				/* read the request, send the canned answer */
	SERVE_HANG					/* read the request, never answer */
} server_mode;

typedef struct server
{
	int			fd;
	int			port;
	server_mode mode;
	const char *answer;
	char request[8192];
	size_t		request_len;
	volatile int stop;
	pthread_t	thread;
} server;

/* Read one request: headers, then Content-Length bytes of body. */
static void
read_request(server *s, int conn)
{
	size_t		want = 0;
	char	   *end = NULL;

	s->request_len = 0;
	while (s->request_len < sizeof(s->request) - 1)
	{
		ssize_t		n = recv(conn, s->request +s->request_len, sizeof(s->request) - 1 - s->request_len, 0);

		if (n <= 0)
			break;
		s->request_len += (size_t) n;
		s->request[s->request_len] = '\0';
		if (end == NULL && (end = strstr(s->request, "\r\n\r\n")) != NULL)
		{
			const char *cl = strcasestr(s->request, "Content-Length:");

			want = (size_t) (end + 4 - s->request) +(cl ? (size_t) atol(cl + 15) : 0);
		}
		if (end != NULL && s->request_len >= want)
			break;
	}
}

static void *
server_main(void *arg)
{
	server	   *s = arg;
	int			conn = accept(s->fd, NULL, NULL);

	if (conn < 0)
		return NULL;
	read_request(s, conn);
	if (s->mode == SERVE_ANSWER)
	{
		ssize_t		n = send(conn, s->answer, strlen(s->answer), MSG_NOSIGNAL);

		(void) n;
	}
	else
		while (!s->stop)
			pf_sleep_ms(20);
	close(conn);
	return NULL;
}

static void
server_start(server *s, server_mode mode, const char *answer)
{
	struct sockaddr_in addr;
	socklen_t	len = sizeof(addr);
	int			one = 1;

	memset(s, 0, sizeof(*s));
	s->mode = mode;
	s->answer = answer;
	s->fd = socket(AF_INET, SOCK_STREAM, 0);
	setsockopt(s->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	memset(&addr, 0, sizeof(addr));
	addr.sin_family = AF_INET;
	addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(s->fd, (struct sockaddr *) &addr, sizeof(addr)) != 0 || listen(s->fd, 4) != 0)
		abort();
	getsockname(s->fd, (struct sockaddr *) &addr, &len);
	s->port = ntohs(addr.sin_port);
	pthread_create(&s->thread, NULL, server_main, s);
}

static void
server_stop(server *s)
{
	s->stop = 1;
	shutdown(s->fd, SHUT_RDWR);
	pthread_join(s->thread, NULL);
	close(s->fd);
}

static pf_http_call *
new_call(long timeout_ms)
{
	pf_http_call_options opt = {0};

	opt.connect_timeout_ms = 1000;
	opt.timeout_ms = timeout_ms;
	opt.verify_tls = true;
	opt.user_agent = "payflow-test";
	return pf_http_call_create(&opt);
}

static void
test_call_answer(void)
{
	server		s;
	pf_http_call *call = new_call(5000);
	pf_http_response resp;
	pf_error	err;
	char		url[64];
	const char *body = "{\"operationId\":\"pay_X\",\"amount\":12.50}";
	long		calls;
	long		connections;

	server_start(&s, SERVE_ANSWER,
				 "HTTP/1.1 429 Too Many Requests\r\nRetry-After: 7\r\nIdempotent-Replayed: true\r\n"
				 "Content-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}");
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/invoices", s.port);
	CHECK(pf_http_call_post_json(call, url, "pay_X:create_invoice", body, strlen(body), &resp, &err) == PF_OK);
	server_stop(&s);
	CHECK(resp.status == 429);
	CHECK_STR(resp.retry_after, "7");
	CHECK(resp.replayed);
	CHECK_STR(pf_buf_str(&resp.body), "{}");
	CHECK(strncmp(s.request, "POST /invoices HTTP/1.1\r\n", 25) == 0);
	CHECK(strstr(s.request, "\r\nIdempotency-Key: pay_X:create_invoice\r\n") != NULL);
	CHECK(strstr(s.request, "\r\nContent-Type: application/json\r\n") != NULL);
	CHECK(strstr(s.request, "\r\nUser-Agent: payflow-test\r\n") != NULL);
	CHECK(strstr(s.request, "Expect:") == NULL);
	/* the body byte for byte: 12.50 stays 12.50 */
	CHECK(s.request_len > strlen(body) && strcmp(s.request +s.request_len - strlen(body), body) == 0);
	pf_http_call_stats(call, &calls, &connections);
	CHECK(calls == 1 && connections == 1);
	pf_http_response_free(&resp);
	pf_http_call_destroy(call);
}

static void
test_call_timeout(void)
{
	server		s;
	pf_http_call *call = new_call(300);
	pf_http_response resp;
	pf_error	err;
	char		url[64];
	int64_t		t0;
	int64_t		ms;

	server_start(&s, SERVE_HANG, NULL);
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/invoices", s.port);
	t0 = pf_now_ms();
	CHECK(pf_http_call_post_json(call, url, "k", "{}", 2, &resp, &err) == PF_ERR_TRANSIENT);
	ms = pf_now_ms() - t0;
	server_stop(&s);
	CHECK_STR(err.code, "curl:28");
	CHECK(resp.status == 0 && !resp.interrupted);
	if (!CHECK(ms >= 250 && ms < 2000))
		fprintf(stderr, "  time-out after %lld ms\n", (long long) ms);
	pf_http_response_free(&resp);
	pf_http_call_destroy(call);
}

static void
test_call_refused(void)
{
	server		s;
	pf_http_call *call = new_call(2000);
	pf_http_response resp;
	pf_error	err;
	char		url[64];

	/* a port that was just free */
	server_start(&s, SERVE_HANG, NULL);
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/invoices", s.port);
	server_stop(&s);
	CHECK(pf_http_call_post_json(call, url, "k", "{}", 2, &resp, &err) == PF_ERR_TRANSIENT);
	CHECK_STR(err.code, "curl:7");
	pf_http_response_free(&resp);
	pf_http_call_destroy(call);
}

typedef struct interrupter
{
	pf_http_call *call;
	int			after_ms;
} interrupter;

static void *
interrupt_later(void *arg)
{
	interrupter *in = arg;

	pf_sleep_ms(in->after_ms);
	pf_http_call_interrupt(in->call);
	return NULL;
}

static void
test_call_interrupt(void)
{
	server		s;
	pf_http_call *call = new_call(30000);
	interrupter in = {call, 200};
	pthread_t	t;
	pf_http_response resp;
	pf_error	err;
	char		url[64];
	int64_t		t0;
	int64_t		ms;

	/* mid-call, from another thread: returns at once, not after 30 s */
	server_start(&s, SERVE_HANG, NULL);
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/invoices", s.port);
	pthread_create(&t, NULL, interrupt_later, &in);
	t0 = pf_now_ms();
	CHECK(pf_http_call_post_json(call, url, "k", "{}", 2, &resp, &err) == PF_ERR_TRANSIENT);
	ms = pf_now_ms() - t0;
	pthread_join(t, NULL);
	server_stop(&s);
	CHECK_STR(err.code, "interrupted");
	CHECK(resp.interrupted);
	if (!CHECK(ms >= 150 && ms < 1000))
		fprintf(stderr, "  interrupted after %lld ms\n", (long long) ms);
	pf_http_response_free(&resp);

	/* still interrupted: the next call does not start */
	t0 = pf_now_ms();
	CHECK(pf_http_call_post_json(call, url, "k", "{}", 2, &resp, &err) == PF_ERR_TRANSIENT);
	CHECK_STR(err.code, "interrupted");
	CHECK(pf_now_ms() - t0 < 100);
	pf_http_response_free(&resp);

	/* cleared: the handle works again */
	pf_http_call_clear_interrupt(call);
	server_start(&s, SERVE_ANSWER, "HTTP/1.1 201 Created\r\nContent-Length: 13\r\n\r\n{\"id\":\"inv1\"}");
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/invoices", s.port);
	CHECK(pf_http_call_post_json(call, url, "k", "{}", 2, &resp, &err) == PF_OK);
	server_stop(&s);
	CHECK(resp.status == 201);
	CHECK(!resp.replayed && resp.retry_after[0] == '\0');
	CHECK_STR(pf_buf_str(&resp.body), "{\"id\":\"inv1\"}");
	pf_http_response_free(&resp);
	pf_http_call_destroy(call);
}

static void
test_call_tls_verified(void)
{
	server		s;
	pf_http_call *call = new_call(2000);
	pf_http_response resp;
	pf_error	err;
	char		url[64];

	/* https to something that is not a TLS server with a trusted certificate: no answer */
	server_start(&s, SERVE_ANSWER, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}");
	snprintf(url, sizeof(url), "https://127.0.0.1:%d/invoices", s.port);
	CHECK(pf_http_call_post_json(call, url, "k", "{}", 2, &resp, &err) == PF_ERR_TRANSIENT);
	server_stop(&s);
	CHECK(strncmp(err.code, "curl:", 5) == 0);
	CHECK(resp.status == 0);
	pf_http_response_free(&resp);
	pf_http_call_destroy(call);
}

int
main(void)
{
	test_status_verdicts();
	test_retry_after();
	test_outcomes();
	test_loopback();
	test_settings();
	test_call_answer();
	test_call_timeout();
	test_call_refused();
	test_call_interrupt();
	test_call_tls_verified();
	return unit_finish("test_worker_invoice");
}
