/*
 * test_clients.c
 *		The network-facing modules without the network: the HTTP client
 *		(concurrency, time-outs, headers) and the container-credentials
 *		provider against a small HTTP server forked on 127.0.0.1, plus the
 *		error classification of SQS, S3, AWS retries and PostgreSQL SQLSTATEs.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
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
#include "payflow/http.h"
#include "payflow/log.h"
#include "payflow/pg.h"
#include "payflow/s3.h"
#include "payflow/sqs.h"
#include "unit.h"

static int	server_port;
static pid_t server_pid;

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

/*
 * One request per connection. /slow and /hang are served by a child each so
 * that they overlap; the rest in the server process, which counts them.
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
		if (strncmp(req, "GET /creds", 10) == 0)
		{
			char		body[512];
			char		exp[32];
			time_t		t = time(NULL) + (strstr(req, "/creds-soon") ? 100 : 3600);
			struct tm	tm;

			if (strstr(req, "Authorization: tok-123\r\n") == NULL)
			{
				reply(fd, 401, "{\"message\":\"no token\"}");
				close(fd);
				continue;
			}
			gmtime_r(&t, &tm);
			strftime(exp, sizeof(exp), "%Y-%m-%dT%H:%M:%SZ", &tm);
			snprintf(body, sizeof(body),
					 "{\"AccessKeyId\":\"AKID%d\",\"SecretAccessKey\":\"secret-%d-abcdef\","
					 "\"Token\":\"token-%d-abcdef\",\"Expiration\":\"%s\"}", served, served, served, exp);
			reply(fd, 200, body);
		}
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
		/* credentials that expire within the refresh margin are fetched again */
		CHECK(pf_aws_credentials_get(p, &c, &err) == PF_OK);
		snprintf(first, sizeof(first), "%s", c->access_key_id);
		CHECK(strncmp(first, "AKID", 4) == 0 && c->session_token && c->expiration > time(NULL));
		CHECK(pf_aws_credentials_get(p, &c, &err) == PF_OK);
		CHECK(strcmp(c->access_key_id, first) != 0);
		pf_aws_credentials_provider_destroy(p);
	}

	cfg.aws_container_credentials_full_uri = url("/creds");
	cfg.aws_container_authorization_token_file = NULL;
	cfg.aws_container_authorization_token = "tok-123";
	p = pf_aws_credentials_provider_create(&cfg, &err);
	if (CHECK(p != NULL))
	{
		/* an hour ahead: cached */
		CHECK(pf_aws_credentials_get(p, &c, &err) == PF_OK);
		snprintf(first, sizeof(first), "%s", c->access_key_id);
		CHECK(pf_aws_credentials_get(p, &c, &err) == PF_OK);
		CHECK(strcmp(c->access_key_id, first) == 0);
		/* AWS said the token expired: fetched anew */
		pf_aws_credentials_invalidate(p);
		CHECK(pf_aws_credentials_get(p, &c, &err) == PF_OK);
		CHECK(strcmp(c->access_key_id, first) != 0);
		pf_aws_credentials_provider_destroy(p);
	}

	/* a wrong token is refused and reported */
	cfg.aws_container_authorization_token = "wrong-token";
	p = pf_aws_credentials_provider_create(&cfg, &err);
	if (CHECK(p != NULL))
	{
		CHECK(pf_aws_credentials_get(p, &c, &err) != PF_OK);
		CHECK(strstr(err.message, "401") != NULL);
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
	CHECK(p && pf_aws_credentials_get(p, &c, &err) == PF_OK && strcmp(c->access_key_id, "AKIDENV") == 0 &&
		  strcmp(c->session_token, "session-env-abcdef") == 0 && c->expiration == 0);
	pf_aws_credentials_provider_destroy(p);
	unlink(token_file);
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
	CHECK(pf_pg_sqlstate_retryable(NULL));	/* connection gone */
	CHECK(!pf_pg_sqlstate_retryable("PF001"));
	CHECK(!pf_pg_sqlstate_retryable("PF005"));
	CHECK(!pf_pg_sqlstate_retryable("22023"));
	CHECK(!pf_pg_sqlstate_retryable("23505"));
	CHECK(!pf_pg_sqlstate_retryable("42883"));
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
	pf_pg_options opts = {"payflow-test", 1, 0, 3, 10, 20, NULL};
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

	memset(&cfg, 0, sizeof(cfg));
	cfg.aws_access_key_id = "AKIDTEST";
	cfg.aws_secret_access_key = "secret-test-abcdef";
	cfg.aws_region = "us-east-1";
	cfg.aws_max_attempts = 2;
	creds = pf_aws_credentials_provider_create(&cfg, &err);
	aws = pf_aws_client_create(&cfg, creds);
	if (!CHECK(pipe(fds) == 0))
		return;

	t0 = pf_now_ms();
	CHECK(pf_aws_wait(aws, 300, fds[0]) == NULL);
	CHECK(pf_now_ms() - t0 >= 250);	/* waited for the time-out */

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
	CHECK(pf_now_ms() - t0 < 2000);	/* woken by the fd, not the time-out */
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
	start_server();
	test_http_concurrency();
	test_container_credentials();
	stop_server();
	test_credentials_parse();
	test_error_classification();
	test_backoff();
	test_pg_unreachable();
	test_aws_wait_extra_fd();
	return unit_finish("test_clients");
}
