/*
 * test_clients.c
 *		The network-facing modules without the network: the HTTP client
 *		(concurrency, time-outs, headers) and the container-credentials
 *		provider against a small HTTP server forked on 127.0.0.1, plus the
 *		error classification of SQS, S3, AWS retries and PostgreSQL SQLSTATEs.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "payflow/aws_client.h"
#include "payflow/aws_credentials.h"
#include "payflow/backoff.h"
#include "payflow/digest.h"
#include "payflow/http.h"
#include "payflow/log.h"
#include "payflow/pg.h"
#include "payflow/s3.h"
#include "payflow/sqs.h"
#include "unit.h"

static int	server_port;
static pid_t server_pid;

/* the server writes a byte here for each /creds-held refresh it holds */
static int	held_notify[2];
static int	held_requests;

static void
reply(int fd, int status, const char *body)
{
	char		head[256];
	int			n = snprintf(head, sizeof(head),
							 "HTTP/1.1 %d X\r\nContent-Type: application/json\r\nX-Test: yes \r\n"
							 "Content-Length: %zu\r\nConnection: close\r\n\r\n", status, strlen(body));

	if (write(fd, head, (size_t) n) < 0 || write(fd, body, strlen(body)) < 0)
		return;
}

/* Container credentials AKID<n>, expiring in lifetime seconds; 401 without the token. */
static void
creds_reply(int fd, const char *req, int n, int lifetime)
{
	char		body[512];
	char		exp[32];
	time_t		t = time(NULL) + lifetime;
	struct tm	tm;

	if (strstr(req, "Authorization: tok-123\r\n") == NULL)
	{
		reply(fd, 401, "{\"message\":\"no token\"}");
		return;
	}
	gmtime_r(&t, &tm);
	strftime(exp, sizeof(exp), "%Y-%m-%dT%H:%M:%SZ", &tm);
	snprintf(body, sizeof(body),
			 "{\"AccessKeyId\":\"AKID%d\",\"SecretAccessKey\":\"secret-%d-abcdef\","
			 "\"Token\":\"token-%d-abcdef\",\"Expiration\":\"%s\"}", n, n, n, exp);
	reply(fd, 200, body);
}

/*
 * One request per connection. /slow, /hang and held /creds-held refreshes
 * are served by a child each so that they overlap; the rest in the server
 * process, which counts them.
 */
static void
serve(int lfd)
{
	int			served = 0;

	for (;;)
	{
		int			fd = accept(lfd, NULL, NULL);
		char		req[4096] = {0};
		ssize_t		n;

		if (fd < 0)
			continue;
		n = read(fd, req, sizeof(req) - 1);
		if (n <= 0)
		{
			close(fd);
			continue;
		}
		if (strncmp(req, "GET /creds-held", 15) == 0 && held_requests++ > 0)
		{
			/* every refresh after the first: announced, then answered 3 s late */
			if (write(held_notify[1], "r", 1) != 1)
				abort();
			if (fork() == 0)
			{
				usleep(3000000);
				creds_reply(fd, req, 1000 + held_requests, 3600);
				_exit(0);
			}
			close(fd);
			continue;
		}
		if (strncmp(req, "GET /slow", 9) == 0 || strncmp(req, "GET /hang", 9) == 0)
		{
			if (fork() == 0)
			{
				usleep(strncmp(req, "GET /slow", 9) == 0 ? 300000 : 5000000);
				reply(fd, 200, "{\"ok\":true}");
				_exit(0);
			}
			close(fd);
			continue;
		}
		served++;
		if (strncmp(req, "POST /sqs/", 10) == 0)
		{
			/* a receive whose first body holds U+0000, with the MD5 of its real bytes */
			unsigned char digest[PF_MD5_LEN];
			char		nul_md5[2 * PF_MD5_LEN + 1];
			char		plain_md5[2 * PF_MD5_LEN + 1];
			char		body[1024];

			pf_md5("ab\0cd", 5, digest);
			pf_hex_encode(digest, sizeof(digest), nul_md5);
			pf_md5("hello", 5, digest);
			pf_hex_encode(digest, sizeof(digest), plain_md5);
			snprintf(body, sizeof(body),
					 "{\"Messages\":["
					 "{\"MessageId\":\"m-nul\",\"ReceiptHandle\":\"r1\",\"MD5OfBody\":\"%s\",\"Body\":\"ab\\u0000cd\","
					 "\"Attributes\":{\"ApproximateReceiveCount\":\"1\"}},"
					 "{\"MessageId\":\"m-plain\",\"ReceiptHandle\":\"r2\",\"MD5OfBody\":\"%s\",\"Body\":\"hello\"},"
					 "{\"MessageId\":\"m-bad\",\"ReceiptHandle\":\"r3\",\"MD5OfBody\":\"%s\",\"Body\":\"hellp\"}]}",
					 nul_md5, plain_md5, plain_md5);
			reply(fd, 200, body);
		}
		else if (strncmp(req, "GET /creds", 10) == 0)
			creds_reply(fd, req, served, strstr(req, "/creds-held") ? PF_CREDENTIALS_REFRESH_MARGIN + 1 :
						strstr(req, "/creds-soon") ? PF_CREDENTIALS_REFRESH_MARGIN + 2 : 3600);
		else
			reply(fd, 404, "{}");
		close(fd);
	}
}

static void
start_server(void)
{
	int			lfd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in addr;
	socklen_t	len = sizeof(addr);
	int			one = 1;

	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	memset(&addr, 0, sizeof(addr));
	addr.sin_family = AF_INET;
	addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	addr.sin_port = 0;
	if (bind(lfd, (struct sockaddr *) &addr, sizeof(addr)) != 0 || listen(lfd, 64) != 0)
		abort();
	getsockname(lfd, (struct sockaddr *) &addr, &len);
	server_port = ntohs(addr.sin_port);
	server_pid = fork();
	if (server_pid == 0)
	{
		signal(SIGCHLD, SIG_IGN);	/* no zombies from /slow children */
		serve(lfd);
		_exit(0);
	}
	close(lfd);
}

static void
stop_server(void)
{
	kill(server_pid, SIGTERM);
	waitpid(server_pid, NULL, 0);
}

static char *
url(const char *path)
{
	static char buf[128];

	snprintf(buf, sizeof(buf), "http://127.0.0.1:%d%s", server_port, path);
	return buf;
}

static void
test_http_concurrency(void)
{
	enum
	{
		N = 8
	};
	pf_http    *http = pf_http_create();
	pf_http_request reqs[N];
	pf_error	err;
	int64_t		t0 = pf_now_ms();
	int			done = 0;
	int64_t		elapsed;
	char		value[64];

	for (int i = 0; i < N; i++)
	{
		pf_http_request_init(&reqs[i], "GET", url("/slow"));
		CHECK(pf_http_start(http, &reqs[i], &err) == PF_OK);
	}
	CHECK(pf_http_in_flight(http) == N);
	while (done < N)
	{
		pf_http_request *r = pf_http_wait(http, 5000, -1);

		if (!CHECK(r != NULL))
			break;
		CHECK(r->status == 200 && strcmp(pf_buf_str(&r->response), "{\"ok\":true}") == 0);
		done++;
	}
	elapsed = pf_now_ms() - t0;
	/* eight 300 ms answers in well under 8 x 300 ms: they overlapped */
	CHECK(elapsed < 1500);
	printf("http: %d concurrent 300 ms requests took %lld ms\n", N, (long long) elapsed);
	CHECK(pf_http_response_header(&reqs[0], "x-test", value, sizeof(value)) && strcmp(value, "yes") == 0);
	CHECK(!pf_http_response_header(&reqs[0], "x-missing", value, sizeof(value)));
	for (int i = 0; i < N; i++)
		pf_http_request_free(&reqs[i]);

	/* a total time-out ends a request that hangs */
	{
		pf_http_request r;

		pf_http_request_init(&r, "GET", url("/hang"));
		r.timeout_ms = 300;
		t0 = pf_now_ms();
		CHECK(pf_http_perform(http, &r, &err) == PF_ERR_TRANSIENT);
		CHECK(r.curl_code == CURLE_OPERATION_TIMEDOUT);
		CHECK(pf_now_ms() - t0 < 2000);
		pf_http_request_free(&r);
	}
	/* a refused connection is a transport failure, not an HTTP status */
	{
		pf_http_request r;

		pf_http_request_init(&r, "GET", "http://127.0.0.1:1/");
		CHECK(pf_http_perform(http, &r, &err) == PF_ERR_TRANSIENT);
		CHECK(pf_http_transport_failed(&r));
		pf_http_request_free(&r);
	}
	pf_http_destroy(http);
}

static void *
interrupt_after_200ms(void *http)
{
	pf_sleep_ms(200);
	pf_http_interrupt(http);
	return NULL;
}

/* What the step roles' calls need of the client: a capped body, an interrupt from another thread. */
static void
test_http_cap_and_interrupt(void)
{
	pf_http    *http = pf_http_create();
	pf_http_request r;
	pf_error	err;
	pthread_t	t;
	int64_t		t0;

	/* a body past max_response is cut and flagged, the answer still an answer */
	pf_http_request_init(&r, "GET", url("/slow"));
	r.max_response = 4;
	CHECK(pf_http_perform(http, &r, &err) == PF_OK);
	CHECK(r.status == 200 && r.response_truncated);
	CHECK_STR(pf_buf_str(&r.response), "{\"ok");
	pf_http_request_free(&r);

	/* interrupted mid-request from another thread: back at once, not after the 30 s time-out */
	pf_http_request_init(&r, "GET", url("/hang"));
	r.timeout_ms = 30000;
	pthread_create(&t, NULL, interrupt_after_200ms, http);
	t0 = pf_now_ms();
	CHECK(pf_http_perform(http, &r, &err) == PF_ERR_TRANSIENT);
	pthread_join(t, NULL);
	CHECK_STR(err.code, "interrupted");
	CHECK(r.interrupted && r.status == 0);
	CHECK(pf_now_ms() - t0 < 1500);
	CHECK(pf_http_in_flight(http) == 0);
	/* still interrupted: the next request does not start */
	t0 = pf_now_ms();
	CHECK(pf_http_perform(http, &r, &err) == PF_ERR_TRANSIENT && r.interrupted);
	CHECK(pf_now_ms() - t0 < 100);
	pf_http_request_free(&r);
	/* cleared: requests run again */
	pf_http_clear_interrupt(http);
	pf_http_request_init(&r, "GET", url("/slow"));
	CHECK(pf_http_perform(http, &r, &err) == PF_OK && r.status == 200 && !r.response_truncated);
	pf_http_request_free(&r);
	pf_http_destroy(http);
}

/* Poll without waiting until the access key differs from before (the refresher took over); false after 15 s. */
static bool
key_changes(pf_aws_credentials_provider *p, const char *before)
{
	const pf_aws_credentials *c;
	pf_error	err;
	int64_t		deadline = pf_now_ms() + 15000;

	while (pf_now_ms() < deadline)
	{
		if (pf_aws_credentials_get(p, false, &c, &err) == PF_OK && strcmp(c->access_key_id, before) != 0)
			return true;
		pf_sleep_ms(50);
	}
	return false;
}

static void
test_container_credentials(void)
{
	pf_config	cfg;
	pf_error	err;
	pf_aws_credentials_provider *p;
	const pf_aws_credentials *c;
	char		token_file[] = "/tmp/payflow-token-XXXXXX";
	int			fd = mkstemp(token_file);
	char		first[32];

	CHECK(fd >= 0 && write(fd, "tok-123\n", 8) == 8);
	close(fd);

	memset(&cfg, 0, sizeof(cfg));
	cfg.aws_container_credentials_full_uri = url("/creds-soon");
	cfg.aws_container_authorization_token_file = token_file;
	p = pf_aws_credentials_provider_create(&cfg, &err);
	if (CHECK(p != NULL))
	{
		/* the first call may wait for the first fetch */
		CHECK(pf_aws_credentials_get(p, true, &c, &err) == PF_OK);
		snprintf(first, sizeof(first), "%s", c->access_key_id);
		CHECK(strncmp(first, "AKID", 4) == 0 && c->session_token && c->expiration > time(NULL));
		/* valid: handed out at once, however soon they are due */
		CHECK(pf_aws_credentials_get(p, false, &c, &err) == PF_OK);
		CHECK(strcmp(c->access_key_id, first) == 0);
		/* they expire within the refresh margin: the refresher fetches new ones by itself */
		CHECK(key_changes(p, first));
		pf_aws_credentials_provider_destroy(p);
	}

	cfg.aws_container_credentials_full_uri = url("/creds");
	cfg.aws_container_authorization_token_file = NULL;
	cfg.aws_container_authorization_token = "tok-123";
	p = pf_aws_credentials_provider_create(&cfg, &err);
	if (CHECK(p != NULL))
	{
		/* nothing fetched yet and no waiting: pending, or already there */
		pf_result	r = pf_aws_credentials_get(p, false, &c, &err);

		CHECK(r == PF_OK || (r == PF_ERR_TRANSIENT && strcmp(err.code, "CredentialsPending") == 0));
		/* an hour ahead: cached */
		CHECK(pf_aws_credentials_get(p, true, &c, &err) == PF_OK);
		snprintf(first, sizeof(first), "%s", c->access_key_id);
		CHECK(pf_aws_credentials_get(p, true, &c, &err) == PF_OK);
		CHECK(strcmp(c->access_key_id, first) == 0);
		/* AWS said the token expired: fetched anew */
		pf_aws_credentials_invalidate(p);
		CHECK(pf_aws_credentials_get(p, true, &c, &err) == PF_OK);
		CHECK(strcmp(c->access_key_id, first) != 0);
		pf_aws_credentials_provider_destroy(p);
	}

	/* a wrong token is refused and reported, waiting or not */
	cfg.aws_container_authorization_token = "wrong-token";
	p = pf_aws_credentials_provider_create(&cfg, &err);
	if (CHECK(p != NULL))
	{
		CHECK(pf_aws_credentials_get(p, true, &c, &err) == PF_ERR_FINAL);
		CHECK(strstr(err.message, "401") != NULL);
		CHECK(pf_aws_credentials_get(p, false, &c, &err) == PF_ERR_FINAL);
		pf_aws_credentials_provider_destroy(p);
	}

	/* plain http only to loopback or the container agent */
	cfg.aws_container_credentials_full_uri = "http://192.0.2.10/creds";
	CHECK(pf_aws_credentials_provider_create(&cfg, &err) == NULL);
	cfg.aws_container_credentials_full_uri = "https://creds.example.com/creds";
	p = pf_aws_credentials_provider_create(&cfg, &err);
	CHECK(p != NULL);
	pf_aws_credentials_provider_destroy(p);

	/* environment credentials need no endpoint and never expire */
	memset(&cfg, 0, sizeof(cfg));
	cfg.aws_access_key_id = "AKIDENV";
	cfg.aws_secret_access_key = "secret-env-abcdef";
	cfg.aws_session_token = "session-env-abcdef";
	p = pf_aws_credentials_provider_create(&cfg, &err);
	CHECK(p && pf_aws_credentials_get(p, false, &c, &err) == PF_OK && strcmp(c->access_key_id, "AKIDENV") == 0 &&
		  strcmp(c->session_token, "session-env-abcdef") == 0 && c->expiration == 0);
	pf_aws_credentials_provider_destroy(p);
	unlink(token_file);
}

/*
 * A slow endpoint never holds a caller up while the cached credentials are
 * valid. The server answers the first fetch at once with credentials due
 * for refresh a second later, and holds that refresh 3 s. A caller that
 * keeps asking, as the relay's and the worker's loops do, gets the cached
 * key at once every time, also while the refresh is held (before, the call
 * that found them due waited for the refresh and came back with the new
 * key); the new key is taken up once the refresh answers.
 */
static void
test_credentials_slow_endpoint(void)
{
	pf_config	cfg;
	pf_error	err;
	pf_aws_credentials_provider *p;
	const pf_aws_credentials *c;
	struct pollfd held = {held_notify[0], POLLIN, 0};
	char		first[32];
	char		byte;
	bool		cached = true;
	bool		was_held = false;
	int64_t		t0;

	memset(&cfg, 0, sizeof(cfg));
	cfg.aws_container_credentials_full_uri = url("/creds-held");
	cfg.aws_container_authorization_token = "tok-123";
	p = pf_aws_credentials_provider_create(&cfg, &err);
	if (!CHECK(p != NULL))
		return;
	CHECK(pf_aws_credentials_get(p, true, &c, &err) == PF_OK);
	snprintf(first, sizeof(first), "%s", c->access_key_id);
	for (t0 = pf_now_ms(); pf_now_ms() - t0 < 10000 && cached && !was_held; pf_sleep_ms(20))
	{
		cached = pf_aws_credentials_get(p, false, &c, &err) == PF_OK && strcmp(c->access_key_id, first) == 0;
		was_held = poll(&held, 1, 0) == 1 && read(held_notify[0], &byte, 1) == 1;
	}
	CHECK(cached);
	if (CHECK(was_held))
	{
		/* the refresh is held now: still the cached key, at once, waiting or not */
		CHECK(pf_aws_credentials_get(p, false, &c, &err) == PF_OK);
		CHECK_STR(c->access_key_id, first);
		CHECK(pf_aws_credentials_get(p, true, &c, &err) == PF_OK);
		CHECK_STR(c->access_key_id, first);
		CHECK(key_changes(p, first));
	}
	pf_aws_credentials_provider_destroy(p);

	/* a provider destroyed while its fetch is held does not wait for the answer */
	p = pf_aws_credentials_provider_create(&cfg, &err);
	if (CHECK(p != NULL))
	{
		if (CHECK(poll(&held, 1, 10000) == 1 && read(held_notify[0], &byte, 1) == 1))
		{
			t0 = pf_now_ms();
			pf_aws_credentials_provider_destroy(p);
			CHECK(pf_now_ms() - t0 < 2000);
		}
		else
			pf_aws_credentials_provider_destroy(p);
	}
}

/* Settings with environment credentials, for clients that need no endpoint. */
static void
test_aws_config(pf_config *cfg, int max_attempts)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->aws_access_key_id = "AKIDTEST";
	cfg->aws_secret_access_key = "secret-test-abcdef";
	cfg->aws_region = "us-east-1";
	cfg->aws_max_attempts = max_attempts;
}

/*
 * A body holding U+0000 (SQS refuses one at SendMessage, SNS raw delivery
 * passes it on) is received whole, measured by its real length and checked
 * against its MD5; it spoils neither the answer nor the other messages.
 */
static void
test_sqs_receive_nul(void)
{
	pf_config	cfg;
	pf_error	err;
	pf_aws_credentials_provider *creds;
	pf_aws_client *aws;
	pf_sqs	   *sqs;
	pf_sqs_receive_options opts = {10, 0, -1};
	pf_sqs_messages msgs;

	test_aws_config(&cfg, 1);
	cfg.aws_endpoint_url_sqs = url("/sqs");
	creds = pf_aws_credentials_provider_create(&cfg, &err);
	aws = pf_aws_client_create(&cfg, creds);
	sqs = pf_sqs_create(aws, &cfg);
	if (CHECK(pf_sqs_receive_message(sqs, "http://127.0.0.1/000000000000/q", &opts, &msgs, &err) == PF_OK))
	{
		/* the third one's body does not match its MD5: skipped */
		if (CHECK(msgs.n == 2))
		{
			CHECK_STR(msgs.items[0].message_id, "m-nul");
			CHECK(msgs.items[0].body_len == 5 && memcmp(msgs.items[0].body, "ab\0cd", 6) == 0);
			CHECK_STR(msgs.items[1].message_id, "m-plain");
			CHECK(msgs.items[1].body_len == 5 && strcmp(msgs.items[1].body, "hello") == 0);
		}
		pf_sqs_messages_free(&msgs);
	}
	else
		fprintf(stderr, "  receive: %s %s\n", err.code, err.message);
	pf_sqs_destroy(sqs);
	pf_aws_client_destroy(aws);
	pf_aws_credentials_provider_destroy(creds);
}

static void
test_credentials_parse(void)
{
	pf_aws_credentials c;
	pf_error	err;

	CHECK(pf_aws_credentials_parse("{\"AccessKeyId\":\"A\",\"SecretAccessKey\":\"S\",\"Token\":\"T\","
								   "\"Expiration\":\"2030-01-02T03:04:05Z\"}", &c, &err) == PF_OK);
	CHECK(c.expiration == 1893553445);
	pf_aws_credentials_free(&c);
	CHECK(pf_aws_credentials_parse("{\"AccessKeyId\":\"A\",\"SecretAccessKey\":\"S\","
								   "\"Expiration\":\"2030-01-02T03:04:05.123+01:00\"}", &c, &err) == PF_OK);
	CHECK(c.expiration == 1893553445 - 3600 && c.session_token == NULL);
	pf_aws_credentials_free(&c);
	CHECK(pf_aws_credentials_parse("{\"AccessKeyId\":\"A\"}", &c, &err) != PF_OK);
	CHECK(pf_aws_credentials_parse("<html>", &c, &err) != PF_OK);
	CHECK(pf_aws_credentials_parse("{\"AccessKeyId\":\"A\",\"SecretAccessKey\":\"S\",\"Expiration\":\"soon\"}",
								   &c, &err) != PF_OK);
}

static void
test_error_classification(void)
{
	pf_error	err;

	/* SQS JSON errors */
	pf_sqs_parse_error(400, "{\"__type\":\"com.amazonaws.sqs#QueueDoesNotExist\",\"message\":\"gone\"}", NULL, &err);
	CHECK_STR(err.code, "QueueDoesNotExist");
	CHECK_STR(err.message, "gone");
	CHECK(err.result == PF_ERR_NOT_FOUND);
	pf_sqs_parse_error(400, "{\"__type\":\"com.amazon.coral.availability#ThrottlingException\"}", NULL, &err);
	CHECK_STR(err.code, "ThrottlingException");
	CHECK(pf_aws_retryable(400, err.code));
	pf_sqs_parse_error(400, "", "AWS.SimpleQueueService.NonExistentQueue;Sender", &err);
	CHECK_STR(err.code, "AWS.SimpleQueueService.NonExistentQueue");
	CHECK(err.result == PF_ERR_NOT_FOUND);
	pf_sqs_parse_error(500, "oops", NULL, &err);
	CHECK_STR(err.code, "HTTP500");

	/* S3 XML errors */
	pf_s3_parse_error(404, "<?xml version=\"1.0\"?><Error><Code>NoSuchKey</Code><Message>The key</Message></Error>",
					  &err);
	CHECK_STR(err.code, "NoSuchKey");
	CHECK_STR(err.message, "The key");
	CHECK(err.result == PF_ERR_NOT_FOUND);
	pf_s3_parse_error(503, "<Error><Code>SlowDown</Code></Error>", &err);
	CHECK(pf_aws_retryable(503, err.code));
	pf_s3_parse_error(403, "", &err);
	CHECK_STR(err.code, "Forbidden");

	/* what the SDKs retry */
	CHECK(pf_aws_retryable(0, "NetworkError"));
	CHECK(pf_aws_retryable(500, "InternalError"));
	CHECK(pf_aws_retryable(429, "TooManyRequestsException"));
	CHECK(pf_aws_retryable(400, "RequestThrottled"));
	CHECK(pf_aws_retryable(400, "ExpiredToken"));
	CHECK(!pf_aws_retryable(400, "InvalidParameterValue"));
	CHECK(!pf_aws_retryable(403, "SignatureDoesNotMatch"));
	CHECK(!pf_aws_retryable(404, "NoSuchKey"));

	/* PostgreSQL */
	CHECK(pf_pg_sqlstate_retryable("40001"));
	CHECK(pf_pg_sqlstate_retryable("40P01"));
	CHECK(pf_pg_sqlstate_retryable("55P03"));
	CHECK(pf_pg_sqlstate_retryable("57014"));
	CHECK(pf_pg_sqlstate_retryable("08006"));
	CHECK(pf_pg_sqlstate_retryable("08001"));
	CHECK(pf_pg_sqlstate_retryable("57P01"));
	CHECK(pf_pg_sqlstate_retryable("57P02"));
	CHECK(pf_pg_sqlstate_retryable("57P03"));
	CHECK(pf_pg_sqlstate_retryable("25006"));	/* a standby: the next host is writable */
	CHECK(pf_pg_sqlstate_retryable(NULL));	/* connection gone */
	CHECK(!pf_pg_sqlstate_retryable("PF001"));
	CHECK(!pf_pg_sqlstate_retryable("PF005"));
	CHECK(!pf_pg_sqlstate_retryable("22023"));
	CHECK(!pf_pg_sqlstate_retryable("23505"));
	CHECK(!pf_pg_sqlstate_retryable("42883"));
	CHECK(pf_pg_sqlstate_result("57014") == PF_ERR_TRANSIENT);
	/* what runs again at once: rolled back and worth it, or lost after sending when idempotent */
	CHECK(pf_pg_run_again(PF_PG_IDEMPOTENT, "40001", false));
	CHECK(pf_pg_run_again(PF_PG_ONCE, "40001", false));
	CHECK(pf_pg_run_again(PF_PG_ONCE, "40P01", false));
	CHECK(pf_pg_run_again(PF_PG_ONCE, "55P03", false));
	CHECK(pf_pg_run_again(PF_PG_ONCE, "25006", false)); /* a read-only server wrote nothing */

	/* a failure that goes on: logged first, then once per interval */
	{
		int64_t		last = 0;

		CHECK(pf_log_throttled(true, &last, 1000, 60000) && last == 1000);
		CHECK(!pf_log_throttled(false, &last, 30000, 60000) && last == 1000);
		CHECK(pf_log_throttled(false, &last, 61000, 60000) && last == 61000);
		CHECK(pf_log_throttled(true, &last, 62000, 60000)); /* a new run starts at once */
	}
	CHECK(!pf_pg_run_again(PF_PG_IDEMPOTENT, "57014", false));	/* it would time out again */
	CHECK(!pf_pg_run_again(PF_PG_ONCE, "57014", false));
	CHECK(pf_pg_run_again(PF_PG_IDEMPOTENT, "57P01", true));
	CHECK(pf_pg_run_again(PF_PG_IDEMPOTENT, NULL, true));
	CHECK(!pf_pg_run_again(PF_PG_ONCE, "57P01", true)); /* it may have committed */
	CHECK(!pf_pg_run_again(PF_PG_ONCE, NULL, true));
	CHECK(!pf_pg_run_again(PF_PG_IDEMPOTENT, "23505", false));
	CHECK(!pf_pg_run_again(PF_PG_IDEMPOTENT, "PF004", false));
	CHECK(!pf_pg_run_again(PF_PG_IDEMPOTENT, NULL, false));
	CHECK(pf_pg_sqlstate_result("PF005") == PF_ERR_CHECKSUM);
	CHECK(pf_pg_sqlstate_result("PF003") == PF_ERR_NOT_FOUND);
	CHECK(pf_pg_sqlstate_result("PF002") == PF_ERR_FINAL);
	CHECK(pf_pg_sqlstate_result("23505") == PF_ERR_FINAL);
}

static void
test_backoff(void)
{
	for (int attempt = 0; attempt < 12; attempt++)
	{
		int			d = pf_backoff_ms(attempt, 100, 5000);
		int			full = attempt >= 6 ? 5000 : 100 << attempt;

		if (full > 5000)
			full = 5000;
		CHECK(d >= full / 2 && d <= full);
	}
}

/* An unreachable database: a bounded number of attempts, then a transient error. */
static void
test_pg_unreachable(void)
{
	pf_pg_options opts = {.application_name = "payflow-test",.connect_timeout_s = 1,.max_attempts = 3,
	.backoff_base_ms = 10,.backoff_cap_ms = 20};
	pf_pg	   *pg = pf_pg_create("host=127.0.0.1 port=1 dbname=none user=none", &opts);
	const char *values[1] = {"1"};
	pf_error	err;
	volatile sig_atomic_t stop = 1;

	CHECK(pf_pg_exec(pg, "SELECT $1::int", 1, values, NULL, &err) == PF_ERR_TRANSIENT);
	CHECK(strncmp(err.code, "08", 2) == 0);
	pf_pg_destroy(pg);

	/* a raised stop flag ends the reconnect loop at once */
	opts.stop = &stop;
	pg = pf_pg_create("host=127.0.0.1 port=1 dbname=none user=none", &opts);
	CHECK(pf_pg_connect(pg, &err) == PF_ERR_TRANSIENT);
	pf_pg_destroy(pg);
}

/* pf_aws_wait watches a caller's fd (a relay's LISTEN socket) even with no call pending. */
static void
test_aws_wait_extra_fd(void)
{
	pf_config	cfg;
	pf_error	err;
	pf_aws_credentials_provider *creds;
	pf_aws_client *aws;
	int			fds[2];
	int64_t		t0;
	pid_t		child;

	test_aws_config(&cfg, 2);
	creds = pf_aws_credentials_provider_create(&cfg, &err);
	aws = pf_aws_client_create(&cfg, creds);
	if (!CHECK(pipe(fds) == 0))
		return;

	t0 = pf_now_ms();
	CHECK(pf_aws_wait(aws, 300, fds[0]) == NULL);
	CHECK(pf_now_ms() - t0 >= 250); /* waited for the time-out */

	child = fork();
	if (child == 0)
	{
		usleep(200000);
		if (write(fds[1], "x", 1) != 1)
			_exit(1);
		_exit(0);
	}
	t0 = pf_now_ms();
	CHECK(pf_aws_wait(aws, 5000, fds[0]) == NULL);
	CHECK(pf_now_ms() - t0 < 2000); /* woken by the fd, not the time-out */
	waitpid(child, NULL, 0);
	CHECK(pf_aws_wait(aws, 1000, -1) == NULL);	/* nothing pending, no fd: at once */
	close(fds[0]);
	close(fds[1]);
	pf_aws_client_destroy(aws);
	pf_aws_credentials_provider_destroy(creds);
}

int
main(void)
{
	signal(SIGPIPE, SIG_IGN);
	pf_log_init("test_clients", PF_LOG_ERROR);	/* the expected reconnect warnings */
	if (pipe(held_notify) != 0)
		abort();
	start_server();
	test_http_concurrency();
	test_http_cap_and_interrupt();
	test_container_credentials();
	test_credentials_slow_endpoint();
	test_sqs_receive_nul();
	stop_server();
	test_credentials_parse();
	test_error_classification();
	test_backoff();
	test_pg_unreachable();
	test_aws_wait_extra_fd();
	return unit_finish("test_clients");
}
