/*
 * aws_smoke.c
 *		Round trips through the SQS and S3 clients against the local emulator
 *		(test/emulator, fauxqs behind a SigV4-checking front). Run by
 *		tests/aws_smoke.sh with the emulator's env.sh loaded.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "payflow/aws_client.h"
#include "payflow/aws_credentials.h"
#include "payflow/backoff.h"
#include "payflow/clock.h"
#include "payflow/config.h"
#include "payflow/payload_ref.h"
#include "payflow/s3.h"
#include "payflow/sqs.h"
#include "payflow/store.h"

static int	passed = 0;
static int	failed = 0;

#define CHECK(cond) check((cond), __LINE__, #cond)

static bool
check(bool ok, int line, const char *expr)
{
	if (ok)
		passed++;
	else
	{
		failed++;
		fprintf(stderr, "aws_smoke.c:%d: check failed: %s\n", line, expr);
	}
	return ok;
}

static void
show(const char *what, const pf_error *err)
{
	fprintf(stderr, "  %s: %s %s %s (HTTP %ld)\n", what, pf_result_name(err->result), err->code, err->message,
			err->http_status);
}

typedef struct stack
{
	pf_config	cfg;
	pf_aws_credentials_provider *creds;
	pf_aws_client *aws;
	pf_sqs	   *sqs;
	pf_s3	   *s3;
} stack;

static bool
stack_open(stack *st)
{
	char		error[512];
	pf_error	err;

	if (!pf_config_load(&st->cfg, 0, error, sizeof(error)))
	{
		fprintf(stderr, "aws_smoke: %s\n", error);
		return false;
	}
	st->creds = pf_aws_credentials_provider_create(&st->cfg, &err);
	if (st->creds == NULL)
	{
		show("credentials", &err);
		return false;
	}
	st->aws = pf_aws_client_create(&st->cfg, st->creds);
	st->sqs = pf_sqs_create(st->aws, &st->cfg);
	st->s3 = pf_s3_create(st->aws, &st->cfg);
	return true;
}

static void
stack_close(stack *st)
{
	pf_s3_destroy(st->s3);
	pf_sqs_destroy(st->sqs);
	pf_aws_client_destroy(st->aws);
	pf_aws_credentials_provider_destroy(st->creds);
	pf_config_free(&st->cfg);
}

static int
queue_depth(stack *st, const char *url)
{
	static const char *const names[] = {"ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible", NULL};
	json_t	   *attrs = NULL;
	pf_error	err;
	int			depth = -1;

	if (pf_sqs_get_queue_attributes(st->sqs, url, names, &attrs, &err) != PF_OK)
		show("GetQueueAttributes", &err);
	else
	{
		depth = atoi(json_string_value(json_object_get(attrs, "ApproximateNumberOfMessages")) ? : "-1") +
			atoi(json_string_value(json_object_get(attrs, "ApproximateNumberOfMessagesNotVisible")) ? : "0");
		json_decref(attrs);
	}
	return depth;
}

/* Receive until want messages arrived (or nothing more comes); delete them all. */
static int
drain(stack *st, const char *url, int want, int expect_receive_count, const char *expect_attr)
{
	int			got = 0;
	int			empty_polls = 0;
	pf_error	err;

	while (got < want && empty_polls < 3)
	{
		pf_sqs_receive_options opts = {10, 1, 30};
		pf_sqs_messages msgs;
		pf_sqs_receipt_entry del[10];
		char		ids[10][16];
		pf_sqs_batch_result res;

		if (!CHECK(pf_sqs_receive_message(st->sqs, url, &opts, &msgs, &err) == PF_OK))
		{
			show("ReceiveMessage", &err);
			return got;
		}
		if (msgs.n == 0)
			empty_polls++;
		for (int i = 0; i < msgs.n; i++)
		{
			CHECK(msgs.items[i].receive_count == expect_receive_count);
			CHECK(strncmp(msgs.items[i].body, "{\"n\":", 5) == 0);
			if (expect_attr)
			{
				const char *a = pf_sqs_message_attribute(&msgs.items[i], "eventType");

				CHECK(a && strcmp(a, expect_attr) == 0);
			}
			snprintf(ids[i], sizeof(ids[i]), "d%d", i);
			del[i].id = ids[i];
			del[i].receipt_handle = msgs.items[i].receipt_handle;
			del[i].visibility_timeout = 0;
		}
		if (msgs.n > 0)
		{
			if (CHECK(pf_sqs_delete_message_batch(st->sqs, url, del, msgs.n, &res, &err) == PF_OK))
			{
				CHECK(res.n == msgs.n && res.n_failed == 0);
				pf_sqs_batch_result_free(&res);
			}
			else
				show("DeleteMessageBatch", &err);
		}
		got += msgs.n;
		pf_sqs_messages_free(&msgs);
	}
	return got;
}

/* FIFO deduplication lasts five minutes: ids must differ between runs */
static char dedup_ids[1000][48];

static void
make_entries(pf_sqs_send_entry *entries, char bodies[][64], char ids[][16], int base, int n,
			 const pf_sqs_attribute *attr)
{
	for (int i = 0; i < n; i++)
	{
		snprintf(dedup_ids[(base + i) % 1000], sizeof(dedup_ids[0]), "%ld-%d-%d", (long) time(NULL),
				 (int) getpid(), base + i);
		snprintf(bodies[i], 64, "{\"n\":%d}", base + i);
		snprintf(ids[i], 16, "e%d", base + i);
		memset(&entries[i], 0, sizeof(entries[i]));
		entries[i].id = ids[i];
		entries[i].body = bodies[i];
		entries[i].group_id = "payment-12345";
		entries[i].dedup_id = dedup_ids[(base + i) % 1000];
		entries[i].attributes = attr;
		entries[i].n_attributes = attr ? 1 : 0;
	}
}

static void
test_sqs(stack *st, const char *url, const char *fifo_url)
{
	pf_sqs_attribute attr = {"eventType", "PaymentRequested"};
	pf_sqs_send_entry entries[10];
	char		bodies[10][64];
	char		ids[10][16];
	pf_sqs_batch_result res;
	pf_error	err;
	char	   *queue_url = NULL;
	char	   *message_id = NULL;

	/* SendMessageBatch, ReceiveMessage, DeleteMessageBatch */
	make_entries(entries, bodies, ids, 0, 10, &attr);
	if (CHECK(pf_sqs_send_message_batch(st->sqs, url, entries, 10, &res, &err) == PF_OK))
	{
		CHECK(res.n == 10 && res.n_failed == 0);
		CHECK(pf_sqs_batch_result_find(&res, "e3") && pf_sqs_batch_result_find(&res, "e3")->ok &&
			  pf_sqs_batch_result_find(&res, "e3")->message_id);
		pf_sqs_batch_result_free(&res);
	}
	else
		show("SendMessageBatch", &err);
	CHECK(queue_depth(st, url) == 10);
	CHECK(drain(st, url, 10, 1, "PaymentRequested") == 10);
	CHECK(queue_depth(st, url) == 0);

	/* ChangeMessageVisibility: hide, then make visible again at once */
	{
		pf_sqs_receive_options opts = {1, 1, 60};
		pf_sqs_messages msgs;

		CHECK(pf_sqs_send_message(st->sqs, url, &entries[0], &message_id, &err) == PF_OK);
		CHECK(message_id != NULL);
		free(message_id);
		if (CHECK(pf_sqs_receive_message(st->sqs, url, &opts, &msgs, &err) == PF_OK) && CHECK(msgs.n == 1))
		{
			pf_sqs_receipt_entry e = {"v1", msgs.items[0].receipt_handle, 0};

			CHECK(pf_sqs_change_message_visibility(st->sqs, url, msgs.items[0].receipt_handle, 120, &err) == PF_OK);
			if (CHECK(pf_sqs_change_message_visibility_batch(st->sqs, url, &e, 1, &res, &err) == PF_OK))
			{
				CHECK(res.n_failed == 0);
				pf_sqs_batch_result_free(&res);
			}
			pf_sqs_messages_free(&msgs);
		}
		/* visible again, and received a second time */
		CHECK(drain(st, url, 1, 2, "PaymentRequested") == 1);
	}

	/* FIFO: group and deduplication ids; a repeated dedup id is dropped */
	make_entries(entries, bodies, ids, 100, 3, NULL);
	if (CHECK(pf_sqs_send_message_batch(st->sqs, fifo_url, entries, 3, &res, &err) == PF_OK))
	{
		CHECK(res.n_failed == 0);
		pf_sqs_batch_result_free(&res);
	}
	else
		show("SendMessageBatch fifo", &err);
	CHECK(pf_sqs_send_message_batch(st->sqs, fifo_url, entries, 1, &res, &err) == PF_OK);
	pf_sqs_batch_result_free(&res);
	{
		int			got = drain(st, fifo_url, 4, 1, NULL);

		if (!CHECK(got == 3))
			fprintf(stderr, "  fifo: received %d\n", got);
	}
	entries[0].group_id = NULL;
	CHECK(pf_sqs_send_message_batch(st->sqs, fifo_url, entries, 1, &res, &err) == PF_ERR_INVALID);

	/* GetQueueUrl and errors */
	if (CHECK(pf_sqs_get_queue_url(st->sqs, "payment-requests", &queue_url, &err) == PF_OK))
	{
		CHECK(strstr(queue_url, "payment-requests") != NULL);
		free(queue_url);
	}
	else
		show("GetQueueUrl", &err);
	CHECK(pf_sqs_get_queue_url(st->sqs, "no-such-queue", &queue_url, &err) == PF_ERR_NOT_FOUND);
}

/* Several SendMessageBatch calls in flight at once, then measured. */
static void
test_async_batches(stack *st, const char *url)
{
	enum
	{
		BATCHES = 60, IN_FLIGHT = 6
	};
	static pf_sqs_send_entry entries[BATCHES][10];
	static char bodies[BATCHES][10][64];
	static char ids[BATCHES][10][16];
	int			started = 0;
	int			finished = 0;
	int			ok_entries = 0;
	int64_t		t0 = pf_now_ms();
	double		seconds;

	for (int b = 0; b < BATCHES; b++)
		make_entries(entries[b], bodies[b], ids[b], b * 10, 10, NULL);
	while (finished < BATCHES)
	{
		pf_aws_call *call;
		pf_sqs_batch_result res;
		pf_error	err;

		while (started < BATCHES && started - finished < IN_FLIGHT)
		{
			call = pf_sqs_send_message_batch_start(st->sqs, url, entries[started], 10,
												   (void *) (intptr_t) started, &err);
			CHECK(call != NULL);
			started++;
		}
		call = pf_sqs_wait(st->sqs, 10000, -1);
		if (!CHECK(call != NULL))
			break;
		CHECK((intptr_t) pf_sqs_call_user(call) < BATCHES);
		if (pf_sqs_send_message_batch_finish(call, &res, &err) == PF_OK)
		{
			ok_entries += res.n - res.n_failed;
			pf_sqs_batch_result_free(&res);
		}
		else
			show("async SendMessageBatch", &err);
		finished++;
	}
	seconds = (double) (pf_now_ms() - t0) / 1000.0;
	CHECK(ok_entries == BATCHES * 10);
	printf("aws_smoke: %d messages in %d SendMessageBatch calls, %d in flight: %.2f s, %.0f msg/s\n",
		   ok_entries, BATCHES, IN_FLIGHT, seconds, ok_entries / (seconds > 0 ? seconds : 1));

	/* the same, one batch at a time, for comparison */
	t0 = pf_now_ms();
	ok_entries = 0;
	for (int b = 0; b < BATCHES / 3; b++)
	{
		pf_sqs_batch_result res;
		pf_error	err;

		if (pf_sqs_send_message_batch(st->sqs, url, entries[b], 10, &res, &err) == PF_OK)
		{
			ok_entries += res.n - res.n_failed;
			pf_sqs_batch_result_free(&res);
		}
	}
	seconds = (double) (pf_now_ms() - t0) / 1000.0;
	CHECK(ok_entries == BATCHES / 3 * 10);
	printf("aws_smoke: %d messages in %d sequential SendMessageBatch calls: %.2f s, %.0f msg/s\n",
		   ok_entries, BATCHES / 3, seconds, ok_entries / (seconds > 0 ? seconds : 1));

	t0 = pf_now_ms();
	CHECK(drain(st, url, BATCHES * 10 + BATCHES / 3 * 10, 1, NULL) == BATCHES * 10 + BATCHES / 3 * 10);
	seconds = (double) (pf_now_ms() - t0) / 1000.0;
	printf("aws_smoke: received and batch-deleted %d messages in %.2f s, %.0f msg/s\n",
		   BATCHES * 10 + BATCHES / 3 * 10, seconds, (BATCHES * 10 + BATCHES / 3 * 10) / (seconds > 0 ? seconds : 1));
}

static void
test_s3(stack *st)
{
	const char *bucket = st->cfg.s3_bucket;
	const char *key = "payments/pay_01JABCDEFGHJKMNPQRSTVWXYZ0/request.json";
	const char *payload = "{\"amount\":1234,\"currency\":\"EUR\"}";
	const char *other = "{\"amount\":9999,\"currency\":\"EUR\"}";
	char		checksum[PF_CHECKSUM_LEN + 1];
	pf_buf		out = PF_BUF_INIT;
	pf_error	err;
	const char *keys[] = {key, "payments/pay_01JABCDEFGHJKMNPQRSTVWXYZ0/other.json"};
	int			n_failed = -1;
	pf_checksum_key mac = {0};

	if (!CHECK(bucket != NULL))
		return;
	CHECK(pf_checksum_key_from_hex("000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f", &mac));
	CHECK(pf_checksum_of(&mac, payload, strlen(payload), checksum));
	if (!CHECK(pf_s3_put_object(st->s3, bucket, key, payload, strlen(payload), "application/json", &err) == PF_OK))
		show("PutObject", &err);
	if (CHECK(pf_s3_get_object(st->s3, bucket, key, checksum, &mac, &out, &err) == PF_OK))
		CHECK(out.len == strlen(payload) && memcmp(out.data, payload, out.len) == 0);
	else
		show("GetObject", &err);

	/* the object no longer matches its reference: rejected, no bytes handed out */
	CHECK(pf_s3_put_object(st->s3, bucket, key, other, strlen(other), "application/json", &err) == PF_OK);
	CHECK(pf_s3_get_object(st->s3, bucket, key, checksum, &mac, &out, &err) == PF_ERR_CHECKSUM);
	CHECK(strcmp(err.code, "PF005") == 0 && strstr(err.message, "checksum mismatch") != NULL);
	CHECK(out.len == 0);

	CHECK(pf_s3_get_object(st->s3, bucket, "payments/none/x.json", NULL, &mac, &out, &err) == PF_ERR_NOT_FOUND);

	/* ListObjectsV2: pages of one, keys unescaped, LastModified of now */
	{
		const char *odd = "payments/pay_01JABCDEFGHJKMNPQRSTVWXYZ0/other.json";
		pf_s3_listing page;
		char	   *token = NULL;
		int			seen = 0;
		bool		found_odd = false;

		memset(&page, 0, sizeof(page));
		CHECK(pf_s3_put_object(st->s3, bucket, odd, "x", 1, NULL, &err) == PF_OK);
		CHECK(pf_s3_put_object(st->s3, bucket, "payments/a&b<c>.json", "x", 1, NULL, &err) == PF_OK);
		do
		{
			if (!CHECK(pf_s3_list_objects(st->s3, bucket, "payments/", token, 1, &page, &err) == PF_OK))
			{
				show("ListObjectsV2", &err);
				break;
			}
			free(token);
			token = page.next_token;
			page.next_token = NULL;
			CHECK(page.n <= 1);
			for (int i = 0; i < page.n; i++)
			{
				seen++;
				found_odd |= strcmp(page.keys[i], "payments/a&b<c>.json") == 0;
				CHECK(page.last_modified[i] > pf_wall_seconds() - 600 && page.last_modified[i] <= pf_wall_seconds() + 5);
			}
		} while (token != NULL && seen < 100);
		free(token);
		CHECK(seen >= 3);
		CHECK(found_odd);
		CHECK(pf_s3_list_objects(st->s3, bucket, "payments/", NULL, 0, &page, &err) == PF_ERR_INVALID);
		{
			const char *more[] = {"payments/a&b<c>.json"};

			CHECK(pf_s3_delete_objects(st->s3, bucket, more, 1, &n_failed, &err) == PF_OK);
		}
		pf_s3_listing_free(&page);
	}
	if (!CHECK(pf_s3_delete_objects(st->s3, bucket, keys, 2, &n_failed, &err) == PF_OK))
		show("DeleteObjects", &err);
	CHECK(n_failed == 0);
	CHECK(pf_s3_get_object(st->s3, bucket, key, NULL, &mac, &out, &err) == PF_ERR_NOT_FOUND);
	pf_buf_free(&out);
}

/* The s3 claim-check store: write, read back, corrupted object refused. */
static void
test_s3_store(stack *st)
{
	pf_config	cfg = st->cfg;
	pf_store   *store;
	pf_payload_ref ref;
	pf_buf		out = PF_BUF_INIT;
	pf_error	err;
	const char *op = "pay_01JABCDEFGHJKMNPQRSTVWXYZ1";
	const char *payload = "{\"paymentId\":\"payment-12345\",\"amount\":1234}";
	pf_checksum_key mac = {0};

	cfg.store = PF_STORE_S3;
	store = pf_store_create(NULL, st->s3, &cfg);
	/* without the checksum key nothing is written */
	CHECK(pf_store_write(store, op, "request.json", payload, strlen(payload), &ref, &err) == PF_ERR_INVALID);
	CHECK(pf_checksum_key_from_hex("000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f", &mac));
	pf_store_set_checksum_key(store, &mac);
	if (CHECK(pf_store_write(store, op, "request.json", payload, strlen(payload), &ref, &err) == PF_OK))
	{
		char	   *json = pf_payload_ref_dumps(&ref);

		CHECK(strncmp(json, "{\"store\":\"s3\",\"key\":\"payments/pay_01JABCDEFGHJKMNPQRSTVWXYZ1/request.json\","
					  "\"checksum\":\"hmac-sha256:", 97) == 0);
		free(json);
		CHECK(pf_store_read(store, &ref, &out, &err) == PF_OK);
		/* another installation's key: the same bytes do not verify */
		{
			pf_store   *foreign = pf_store_create(NULL, st->s3, &cfg);
			pf_checksum_key other = {0};

			CHECK(pf_checksum_key_from_hex("1f1e1d1c1b1a191817161514131211100f0e0d0c0b0a09080706050403020100", &other));
			pf_store_set_checksum_key(foreign, &other);
			CHECK(pf_store_read(foreign, &ref, &out, &err) == PF_ERR_CHECKSUM);
			pf_store_destroy(foreign);
		}
		CHECK(pf_store_read(store, &ref, &out, &err) == PF_OK);
		CHECK(out.len == strlen(payload) && memcmp(out.data, payload, out.len) == 0);
		CHECK(pf_s3_put_object(st->s3, cfg.s3_bucket, ref.key, "tampered", 8, NULL, &err) == PF_OK);
		CHECK(pf_store_read(store, &ref, &out, &err) == PF_ERR_CHECKSUM);
		CHECK(strcmp(err.code, "PF005") == 0 && out.len == 0);
		pf_payload_ref_free(&ref);
	}
	else
		show("store write", &err);
	pf_buf_free(&out);
	pf_store_destroy(store);
}

/* A wrong secret is refused by the front and not retried. */
static void
test_bad_signature(const char *url)
{
	stack		st;
	pf_error	err;
	json_t	   *attrs;
	int64_t		t0;

	setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret", 1);
	if (!stack_open(&st))
		return;
	t0 = pf_now_ms();
	CHECK(pf_sqs_get_queue_attributes(st.sqs, url, NULL, &attrs, &err) == PF_ERR_FINAL);
	CHECK(err.http_status == 403);
	CHECK(pf_now_ms() - t0 < 2000);
	fprintf(stderr, "  (expected) bad secret: %s %s\n", err.code, err.message);
	stack_close(&st);
}

int
main(void)
{
	stack		st;
	pf_queue_map fifo;
	char		why[256];
	const char *url;
	const char *fifo_url;

	signal(SIGPIPE, SIG_IGN);
	if (!stack_open(&st))
		return 1;
	url = pf_queue_map_find(&st.cfg.queue_urls, "payment-requests");
	if (!CHECK(url != NULL) ||
		!CHECK(getenv("PAYFLOW_QUEUE_URLS_FIFO") &&
			   pf_queue_map_parse(getenv("PAYFLOW_QUEUE_URLS_FIFO"), &fifo, why, sizeof(why))))
		return 1;
	fifo_url = pf_queue_map_find(&fifo, "payment-requests");
	CHECK(pf_sqs_queue_is_fifo(fifo_url));

	test_sqs(&st, url, fifo_url);
	test_async_batches(&st, url);
	test_s3(&st);
	test_s3_store(&st);
	{
		long		requests,
					connections;

		pf_http_stats(pf_aws_client_http(st.aws), &requests, &connections);
		printf("aws_smoke: %ld HTTP requests over %ld connections\n", requests, connections);
		CHECK(connections < requests / 10); /* kept alive and reused */
	}
	{
		char	   *saved = strdup(url);	/* the configuration goes with the stack */

		stack_close(&st);
		test_bad_signature(saved);
		free(saved);
	}
	pf_queue_map_free(&fifo);

	printf("aws_smoke: %d passed, %d failed\n", passed, failed);
	return failed == 0 ? 0 : 1;
}
