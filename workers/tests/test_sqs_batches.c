/*
 * test_sqs_batches.c
 *		The worker's SQS transport against a fake SQS on 127.0.0.1 that
 *		counts calls: deletes and visibility changes queued together leave in
 *		batches of ten (10 deletes in one call, 25 in three), a partial batch
 *		leaves after PAYFLOW_SQS_BATCH_WAIT_MS, a failed entry does not fail
 *		its neighbours and is retried alone when SQS says it may help, a call
 *		that fails as a whole is sent again, and a final visibility wins over
 *		a renewal waiting beside it. The transport's source is compiled in
 *		here: it is private to payflow-worker.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../src/worker/transport_sqs.c"
#include "unit.h"

/* ---- a fake SQS: one request per connection, answers per entry ---- */

static int	server_port;
static pthread_mutex_t server_lock = PTHREAD_MUTEX_INITIALIZER;
static int	calls_delete;
static int	calls_visibility;
static int	entries_delete;
static int	entries_visibility;
static int	flaky_failures;		/* "flaky" receipts fail (not the sender's fault) this often */
static int	fail_calls;			/* the next batch calls answer 500 as a whole */

/* the receipts and timeouts of every visibility entry, in arrival order */
static char visibility_log[4096];

static void
reply(int fd, int status, const char *body)
{
	char		head[256];
	int			n = snprintf(head, sizeof(head),
							 "HTTP/1.1 %d X\r\nContent-Type: application/x-amz-json-1.0\r\n"
							 "Content-Length: %zu\r\nConnection: close\r\n\r\n", status, strlen(body));

	if (write(fd, head, (size_t) n) < 0 || write(fd, body, strlen(body)) < 0)
		return;
}

static void
answer_batch(int fd, json_t *req, bool delete)
{
	json_t	   *ok = json_array();
	json_t	   *failed = json_array();
	json_t	   *entries = json_object_get(req, "Entries");
	json_t	   *answer;
	char	   *text;
	size_t		i;
	json_t	   *e;

	pthread_mutex_lock(&server_lock);
	if (delete)
	{
		calls_delete++;
		entries_delete += (int) json_array_size(entries);
	}
	else
	{
		calls_visibility++;
		entries_visibility += (int) json_array_size(entries);
	}
	json_array_foreach(entries, i, e)
	{
		const char *id = json_string_value(json_object_get(e, "Id"));
		const char *receipt = json_string_value(json_object_get(e, "ReceiptHandle"));

		if (!delete)
		{
			size_t		len = strlen(visibility_log);

			snprintf(visibility_log + len, sizeof(visibility_log) - len, "%s=%d ", receipt,
					 (int) json_integer_value(json_object_get(e, "VisibilityTimeout")));
		}
		if (strncmp(receipt, "bad", 3) == 0)
			json_array_append_new(failed, json_pack("{s:s,s:b,s:s,s:s}", "Id", id, "SenderFault", 1,
													"Code", "ReceiptHandleIsInvalid", "Message", "no such receipt"));
		else if (strncmp(receipt, "flaky", 5) == 0 && flaky_failures > 0)
		{
			flaky_failures--;
			json_array_append_new(failed, json_pack("{s:s,s:b,s:s,s:s}", "Id", id, "SenderFault", 0,
													"Code", "InternalError", "Message", "try again"));
		}
		else
			json_array_append_new(ok, json_pack("{s:s}", "Id", id));
	}
	pthread_mutex_unlock(&server_lock);
	answer = json_pack("{s:o,s:o}", "Successful", ok, "Failed", failed);
	text = json_dumps(answer, JSON_COMPACT);
	reply(fd, 200, text);
	free(text);
	json_decref(answer);
}

static void *
serve(void *arg)
{
	int			lfd = *(int *) arg;

	for (;;)
	{
		int			fd = accept(lfd, NULL, NULL);
		char		req[65536];
		size_t		got = 0;
		char	   *body;
		json_t	   *j;
		bool		whole_call_fails;

		if (fd < 0)
			continue;
		/* the head, then Content-Length bytes of body */
		for (;;)
		{
			ssize_t		n = read(fd, req + got, sizeof(req) - 1 - got);
			char	   *cl;

			if (n <= 0)
				break;
			got += (size_t) n;
			req[got] = '\0';
			body = strstr(req, "\r\n\r\n");
			cl = strcasestr(req, "Content-Length:");
			if (body && cl && (size_t) (body + 4 - req) + (size_t) atol(cl + 15) <= got)
				break;
		}
		body = strstr(req, "\r\n\r\n");
		j = body ? json_loads(body + 4, 0, NULL) : NULL;
		pthread_mutex_lock(&server_lock);
		whole_call_fails = fail_calls > 0 && strstr(req, "Batch") != NULL;
		if (whole_call_fails)
			fail_calls--;
		pthread_mutex_unlock(&server_lock);
		if (whole_call_fails)
			reply(fd, 500, "{\"__type\":\"com.amazonaws.sqs#InternalError\",\"message\":\"refused\"}");
		else if (strstr(req, "AmazonSQS.DeleteMessageBatch"))
			answer_batch(fd, j, true);
		else if (strstr(req, "AmazonSQS.ChangeMessageVisibilityBatch"))
			answer_batch(fd, j, false);
		else if (strstr(req, "AmazonSQS.GetQueueAttributes"))
			reply(fd, 200, "{\"Attributes\":{\"RedrivePolicy\":\"{\\\"maxReceiveCount\\\":5}\"}}");
		else
			reply(fd, 400, "{\"__type\":\"com.amazonaws.sqs#InvalidAction\",\"message\":\"?\"}");
		json_decref(j);
		close(fd);
	}
	return NULL;
}

static void
start_server(void)
{
	static int	lfd;
	struct sockaddr_in addr;
	socklen_t	len = sizeof(addr);
	int			one = 1;
	pthread_t	t;

	lfd = socket(AF_INET, SOCK_STREAM, 0);
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	memset(&addr, 0, sizeof(addr));
	addr.sin_family = AF_INET;
	addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(lfd, (struct sockaddr *) &addr, sizeof(addr)) != 0 || listen(lfd, 64) != 0)
		abort();
	getsockname(lfd, (struct sockaddr *) &addr, &len);
	server_port = ntohs(addr.sin_port);
	pthread_create(&t, NULL, serve, &lfd);
	pthread_detach(t);
}

static void
reset_counts(void)
{
	pthread_mutex_lock(&server_lock);
	calls_delete = calls_visibility = entries_delete = entries_visibility = 0;
	flaky_failures = fail_calls = 0;
	visibility_log[0] = '\0';
	pthread_mutex_unlock(&server_lock);
}

/* ---- the transport under test ---- */

static char endpoint[64];

static transport *
make_transport_waits(int batch_wait_ms, int delete_wait_ms)
{
	pf_config	cfg;
	pf_error	err;
	transport  *t;

	memset(&cfg, 0, sizeof(cfg));
	cfg.aws_access_key_id = "AKIDTEST";
	cfg.aws_secret_access_key = "secret-test-abcdef";
	cfg.aws_region = "us-east-1";
	cfg.aws_max_attempts = 1;
	cfg.http_connect_timeout_ms = 1000;
	cfg.http_timeout_ms = 5000;
	snprintf(endpoint, sizeof(endpoint), "http://127.0.0.1:%d", server_port);
	cfg.aws_endpoint_url_sqs = endpoint;
	cfg.queue_url = "http://127.0.0.1/000000000000/test-queue";
	cfg.sqs_batch_wait_ms = batch_wait_ms;
	cfg.sqs_delete_wait_ms = delete_wait_ms;
	t = transport_sqs_create(&cfg, &err);
	if (t == NULL)
		fprintf(stderr, "  transport: %s %s\n", err.code, err.message);
	return t;
}

/* A transport whose deletes and visibility changes wait the same. */
static transport *
make_transport(int wait_ms)
{
	return make_transport_waits(wait_ms, wait_ms);
}

/* n messages with receipts "<prefix><i>" */
static transport_message **
make_messages(const char *prefix, int n)
{
	transport_message **msgs = pf_calloc((size_t) n, sizeof(*msgs));

	for (int i = 0; i < n; i++)
	{
		char		text[32];

		msgs[i] = pf_calloc(1, sizeof(transport_message));
		snprintf(text, sizeof(text), "%s%d", prefix, i);
		msgs[i]->receipt = pf_strdup(text);
		snprintf(text, sizeof(text), "id-%s%d", prefix, i);
		msgs[i]->id = pf_strdup(text);
	}
	return msgs;
}

static void
free_messages(transport_message **msgs, int n)
{
	for (int i = 0; i < n; i++)
		transport_message_free(msgs[i]);
	free(msgs);
}

/* Poll until nothing is pending (or 10 s); the time it took in ms. */
static int64_t
run_until_idle(transport *t)
{
	int64_t		start = pf_now_ms();

	while (t->ops->pending(t) > 0 && pf_now_ms() - start < 10000)
	{
		transport_message **got = NULL;
		int			n_got = 0;

		t->ops->poll(t, 100, -1, &got, &n_got);
		free(got);
	}
	return pf_now_ms() - start;
}

/* Deletes from many executors, handed over one at a time, leave in batches of ten. */
static void
test_deletes_coalesce(void)
{
	transport  *t = make_transport(50);
	transport_message **msgs = make_messages("r", 25);

	if (!CHECK(t != NULL))
		return;
	reset_counts();
	/* ten handed over one by one, as ten executors finishing would: one call */
	for (int i = 0; i < 10; i++)
		t->ops->delete_messages(t, &msgs[i], 1);
	run_until_idle(t);
	CHECK(calls_delete == 1);
	CHECK(entries_delete == 10);

	/* 15 more: one full batch at once, the other 5 after the wait */
	reset_counts();
	for (int i = 10; i < 25; i++)
		t->ops->delete_messages(t, &msgs[i], 1);
	CHECK(t->ops->pending(t) == 6); /* one call in flight, five waiting */
	CHECK(run_until_idle(t) >= 40);
	CHECK(calls_delete == 2);
	CHECK(entries_delete == 15);
	CHECK(t->ops->pending(t) == 0);
	t->ops->destroy(t);
	free_messages(msgs, 25);
}

/*
 * Deletes keep their own, longer wait: with no batch wait at all, five
 * deletes handed over between polls (each poll would send what is due)
 * still leave in one call.
 */
static void
test_delete_wait_alone(void)
{
	transport  *t = make_transport_waits(0, 1000);
	transport_message **msgs = make_messages("d", 5);

	if (!CHECK(t != NULL))
		return;
	reset_counts();
	for (int i = 0; i < 5; i++)
	{
		transport_message **got = NULL;
		int			n_got = 0;

		t->ops->delete_messages(t, &msgs[i], 1);
		t->ops->poll(t, 5, -1, &got, &n_got);
		free(got);
	}
	CHECK(calls_delete == 0);
	run_until_idle(t);
	CHECK(calls_delete == 1);
	CHECK(entries_delete == 5);
	t->ops->destroy(t);
	free_messages(msgs, 5);
}

/*
 * A delete never waits past its message's visibility: with a 5 s delete
 * wait, the delete of a message that shows again in 1.5 s leaves about
 * 1 s before that, not after 5 s.
 */
static void
test_delete_before_visible(void)
{
	transport  *t = make_transport_waits(0, 5000);
	transport_message **msgs = make_messages("v", 2);
	int64_t		took;

	if (!CHECK(t != NULL))
		return;
	reset_counts();
	msgs[0]->visible_at_ms = pf_now_ms() + 1500;
	msgs[1]->visible_at_ms = pf_now_ms() + 60000;
	t->ops->delete_messages(t, msgs, 2);
	took = run_until_idle(t);
	CHECK(calls_delete == 1);
	CHECK(entries_delete == 2);
	CHECK(took < 4000);
	t->ops->destroy(t);
	free_messages(msgs, 2);
}

/* A refused entry fails alone; one SQS may take later is retried alone. */
static void
test_entry_failures(void)
{
	transport  *t = make_transport(5);
	transport_message **good = make_messages("ok", 8);
	transport_message **bad = make_messages("bad", 1);
	transport_message **flaky = make_messages("flaky", 1);

	if (!CHECK(t != NULL))
		return;
	reset_counts();
	flaky_failures = 1;
	t->ops->delete_messages(t, good, 4);
	t->ops->delete_messages(t, bad, 1);
	t->ops->delete_messages(t, flaky, 1);
	t->ops->delete_messages(t, good + 4, 4);
	run_until_idle(t);
	/* the ten in one call; the flaky one once more, alone; the bad one given up */
	CHECK(calls_delete == 2);
	CHECK(entries_delete == 11);
	CHECK(flaky_failures == 0);

	/* a call refused as a whole: its entries go again */
	reset_counts();
	fail_calls = 1;
	t->ops->set_visibility_final(t, good, 3, 0);
	run_until_idle(t);
	CHECK(calls_visibility == 1);
	CHECK(entries_visibility == 3);
	CHECK(pf_sqs_count(((sqs_transport *) t)->sqs, "ChangeMessageVisibilityBatch").calls == 2);
	t->ops->destroy(t);
	free_messages(good, 8);
	free_messages(bad, 1);
	free_messages(flaky, 1);
}

/* Renewals and finals share batches; the final wins over a renewal waiting beside it. */
static void
test_visibility(void)
{
	transport  *t = make_transport(20);
	transport_message **msgs = make_messages("v", 12);

	if (!CHECK(t != NULL))
		return;
	reset_counts();
	/* a heartbeat renews 12: one full batch now, two waiting */
	t->ops->set_visibility(t, msgs, 12, 30);
	/* one of the waiting two is let go meanwhile, the other deleted */
	t->ops->set_visibility_final(t, &msgs[10], 1, 0);
	t->ops->delete_messages(t, &msgs[11], 1);
	run_until_idle(t);
	CHECK(calls_visibility == 2);
	CHECK(entries_visibility == 11);
	CHECK(strstr(visibility_log, "v10=0 ") != NULL);
	CHECK(strstr(visibility_log, "v10=30 ") == NULL);
	CHECK(strstr(visibility_log, "v11=") == NULL);
	CHECK(calls_delete == 1);
	t->ops->destroy(t);
	free_messages(msgs, 12);
}

int
main(void)
{
	pf_log_init("test_sqs_batches", getenv("TEST_LOG") ? PF_LOG_DEBUG : PF_LOG_ERROR);
	start_server();
	test_deletes_coalesce();
	test_delete_wait_alone();
	test_delete_before_visible();
	test_entry_failures();
	test_visibility();
	return unit_finish("test_sqs_batches");
}
