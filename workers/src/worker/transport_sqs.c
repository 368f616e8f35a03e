/*
 * transport_sqs.c
 *		The SQS transport: one long-poll receive at a time, deletes and
 *		visibility changes in batches of ten, all on one curl multi handle of
 *		the main thread.
 */
#include "worker.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "payflow/aws_client.h"
#include "payflow/aws_credentials.h"
#include "payflow/backoff.h"
#include "payflow/buf.h"
#include "payflow/sqs.h"

#define RECEIVE_WAIT_SECONDS 20
#define RECEIVE_BACKOFF_BASE_MS 500
#define RECEIVE_BACKOFF_CAP_MS 20000

typedef struct sqs_transport
{
	transport	base;
	pf_aws_credentials_provider *credentials;
	pf_aws_client *aws;
	pf_sqs	   *sqs;
	char	   *queue_url;
	pf_aws_call *receive_call;
	int			n_calls;		/* batches in flight */
	struct batch_call *renewals;	/* heartbeat visibility changes in flight */
	int			receive_failures;	/* consecutive */
	int64_t		receive_not_before_ms;
} sqs_transport;

/*
 * What a batch call was about, for its outcome's log lines.  A renewal also
 * keeps its receipts: a final visibility set for one of its messages while
 * it is in flight is applied again once it is done (SQS applies calls in the
 * order they arrive, not the order they were sent).
 */
typedef struct batch_call
{
	bool		delete;
	bool		renewal;
	int			seconds;
	int			n;
	char	   *message_ids[PF_SQS_MAX_BATCH];
	char	   *receipts[PF_SQS_MAX_BATCH];	/* renewals only */
	int			final_seconds[PF_SQS_MAX_BATCH];	/* renewals only; -1: none */
	struct batch_call *next_renewal;
} batch_call;

enum batch_kind
{
	BATCH_DELETE,
	BATCH_RENEWAL,
	BATCH_FINAL
};

void
transport_message_free(transport_message *m)
{
	if (m == NULL)
		return;
	free(m->id);
	free(m->receipt);
	free(m->body);
	free(m);
}

static void
sqs_receive(transport *t, int max, int visibility_s)
{
	sqs_transport *st = (sqs_transport *) t;
	pf_sqs_receive_options opts;

	if (st->receive_call != NULL || pf_now_ms() < st->receive_not_before_ms)
		return;
	opts.max_messages = max < 1 ? 1 : max > PF_SQS_MAX_BATCH ? PF_SQS_MAX_BATCH : max;
	opts.wait_seconds = RECEIVE_WAIT_SECONDS;
	opts.visibility_timeout = visibility_s;
	st->receive_call = pf_sqs_receive_message_start(st->sqs, st->queue_url, &opts, NULL);
}

static bool
sqs_receiving(const transport *t)
{
	return ((const sqs_transport *) t)->receive_call != NULL;
}

static void
start_batches(sqs_transport *st, transport_message *const *msgs, int n, enum batch_kind kind, int seconds)
{
	bool		delete = kind == BATCH_DELETE;

	for (int start = 0; start < n; start += PF_SQS_MAX_BATCH)
	{
		int			count = n - start < PF_SQS_MAX_BATCH ? n - start : PF_SQS_MAX_BATCH;
		batch_call *bc = pf_calloc(1, sizeof(*bc));
		json_t	   *entries = json_array();

		bc->delete = delete;
		bc->renewal = kind == BATCH_RENEWAL;
		bc->seconds = seconds;
		bc->n = count;
		for (int i = 0; i < count; i++)
		{
			const transport_message *m = msgs[start + i];
			char		id[16];
			json_t	   *e;

			snprintf(id, sizeof(id), "m%d", i);
			e = json_pack("{s:s,s:s}", "Id", id, "ReceiptHandle", m->receipt);
			if (!delete)
				json_object_set_new(e, "VisibilityTimeout", json_integer(seconds));
			json_array_append_new(entries, e);
			bc->message_ids[i] = pf_strdup(m->id);
			if (bc->renewal)
			{
				bc->receipts[i] = pf_strdup(m->receipt);
				bc->final_seconds[i] = -1;
			}
		}
		if (bc->renewal)
		{
			bc->next_renewal = st->renewals;
			st->renewals = bc;
		}
		pf_sqs_start(st->sqs, delete ? "DeleteMessageBatch" : "ChangeMessageVisibilityBatch",
					 json_pack("{s:s,s:o}", "QueueUrl", st->queue_url, "Entries", entries), bc);
		st->n_calls++;
	}
}

static void
sqs_delete_messages(transport *t, transport_message *const *msgs, int n)
{
	start_batches((sqs_transport *) t, msgs, n, BATCH_DELETE, 0);
}

static void
sqs_set_visibility(transport *t, transport_message *const *msgs, int n, int seconds)
{
	start_batches((sqs_transport *) t, msgs, n, BATCH_RENEWAL, seconds);
}

static void
sqs_set_visibility_final(transport *t, transport_message *const *msgs, int n, int seconds)
{
	sqs_transport *st = (sqs_transport *) t;

	/* remembered by every renewal in flight that holds the message */
	for (batch_call *bc = st->renewals; bc; bc = bc->next_renewal)
		for (int k = 0; k < bc->n; k++)
			for (int i = 0; i < n; i++)
				if (strcmp(bc->message_ids[k], msgs[i]->id) == 0)
					bc->final_seconds[k] = seconds;
	start_batches(st, msgs, n, BATCH_FINAL, seconds);
}

/* A renewal is done: take it off the list, and say the last word again. */
static void
finish_renewal(sqs_transport *st, batch_call *bc)
{
	for (batch_call **p = &st->renewals; *p; p = &(*p)->next_renewal)
	{
		if (*p == bc)
		{
			*p = bc->next_renewal;
			break;
		}
	}
	for (int k = 0; k < bc->n; k++)
	{
		transport_message m = {0};
		transport_message *one = &m;

		if (bc->final_seconds[k] < 0)
			continue;
		m.id = bc->message_ids[k];
		m.receipt = bc->receipts[k];
		pf_log_write(PF_LOG_DEBUG, NULL,
					 json_pack("{s:s,s:s,s:i}", "queue", st->base.queue_name, "messageId", m.id,
							   "visibility", bc->final_seconds[k]),
					 "a renewal landed after the message was let go: its visibility is set again");
		sqs_set_visibility_final(&st->base, &one, 1, bc->final_seconds[k]);
	}
}

static void
finish_batch(sqs_transport *st, pf_aws_call *call)
{
	batch_call *bc = pf_sqs_call_user(call);
	const char *what = bc->delete ? "delete" : "visibility change";
	json_t	   *resp = NULL;
	pf_error	err;

	st->n_calls--;
	if (pf_sqs_finish(call, &resp, &err) != PF_OK)
	{
		/* a delete that failed lets the message come back: it is then skipped */
		pf_log_write(PF_LOG_WARN, NULL,
					 json_pack("{s:s,s:i,s:s}", "queue", st->base.queue_name, "messages", bc->n, "code", err.code),
					 "SQS %s of %d message(s) failed: %s", what, bc->n, err.message);
	}
	else
	{
		json_t	   *failed = json_object_get(resp, "Failed");
		size_t		i;
		json_t	   *e;

		json_array_foreach(failed, i, e)
		{
			const char *id = json_string_value(json_object_get(e, "Id"));
			int			k = id && id[0] == 'm' ? atoi(id + 1) : -1;
			const char *code = json_string_value(json_object_get(e, "Code"));
			const char *message = json_string_value(json_object_get(e, "Message"));

			pf_log_write(PF_LOG_WARN, NULL,
						 json_pack("{s:s,s:s,s:s,s:i}", "queue", st->base.queue_name,
								   "messageId", k >= 0 && k < bc->n ? bc->message_ids[k] : "?",
								   "code", code ? code : "?", "visibility", bc->seconds),
						 "SQS %s failed for a message: %s", what, message ? message : "");
		}
		json_decref(resp);
	}
	if (bc->renewal)
		finish_renewal(st, bc);
	for (int k = 0; k < bc->n; k++)
	{
		free(bc->message_ids[k]);
		free(bc->receipts[k]);
	}
	free(bc);
}

static void
finish_receive(sqs_transport *st, pf_aws_call *call, transport_message ***out, int *n_out)
{
	pf_sqs_messages msgs;
	pf_error	err;

	st->receive_call = NULL;
	if (pf_sqs_receive_message_finish(call, &msgs, &err) != PF_OK)
	{
		int			delay = pf_backoff_ms(st->receive_failures++, RECEIVE_BACKOFF_BASE_MS, RECEIVE_BACKOFF_CAP_MS);

		st->receive_not_before_ms = pf_now_ms() + delay;
		pf_log_write(PF_LOG_WARN, NULL,
					 json_pack("{s:s,s:s,s:i}", "queue", st->base.queue_name, "code", err.code, "retryInMs", delay),
					 "SQS receive failed: %s", err.message);
		return;
	}
	st->receive_failures = 0;
	if (msgs.n == 0)
		return;
	*out = pf_realloc(*out, sizeof(transport_message *) * (size_t) (*n_out + msgs.n));
	for (int i = 0; i < msgs.n; i++)
	{
		pf_sqs_message *src = &msgs.items[i];
		transport_message *m = pf_calloc(1, sizeof(*m));

		/* take the strings over instead of copying them */
		m->id = src->message_id;
		m->receipt = src->receipt_handle;
		m->body = src->body;
		m->body_len = src->body_len;
		m->receive_count = src->receive_count;
		src->message_id = src->receipt_handle = src->body = NULL;
		(*out)[(*n_out)++] = m;
	}
	pf_sqs_messages_free(&msgs);
}

static void
sqs_poll(transport *t, int timeout_ms, int wake_fd, transport_message ***out, int *n_out)
{
	sqs_transport *st = (sqs_transport *) t;
	pf_aws_call *call = pf_sqs_wait(st->sqs, timeout_ms, wake_fd);

	while (call != NULL)
	{
		if (call == st->receive_call)
			finish_receive(st, call, out, n_out);
		else
			finish_batch(st, call);
		/* collect what else is done, without waiting */
		call = pf_sqs_wait(st->sqs, 0, -1);
	}
}

static int
sqs_pending(const transport *t)
{
	return ((const sqs_transport *) t)->n_calls;
}

static void
sqs_destroy(transport *t)
{
	sqs_transport *st = (sqs_transport *) t;

	if (st == NULL)
		return;
	/* calls still in flight are abandoned with their client */
	pf_sqs_destroy(st->sqs);
	pf_aws_client_destroy(st->aws);
	pf_aws_credentials_provider_destroy(st->credentials);
	free(st->queue_url);
	free(st->base.queue_name);
	free(st);
}

static const transport_ops sqs_ops = {
	sqs_receive, sqs_receiving, sqs_delete_messages, sqs_set_visibility, sqs_set_visibility_final,
	sqs_poll, sqs_pending, sqs_destroy,
};

/* maxReceiveCount of the queue's redrive policy; 0 when it has none. */
static int
fetch_max_receive_count(sqs_transport *st, pf_error *err)
{
	const char *names[] = {"RedrivePolicy", NULL};
	json_t	   *attrs = NULL;
	json_t	   *policy;
	const char *text;
	int			max = 0;

	if (pf_sqs_get_queue_attributes(st->sqs, st->queue_url, names, &attrs, err) != PF_OK)
		return -1;
	text = json_string_value(json_object_get(attrs, "RedrivePolicy"));
	policy = text ? json_loads(text, 0, NULL) : NULL;
	if (policy)
	{
		json_t	   *v = json_object_get(policy, "maxReceiveCount");

		/* AWS writes it as a number, some emulators as a string */
		max = json_is_integer(v) ? (int) json_integer_value(v) : json_is_string(v) ? atoi(json_string_value(v)) : 0;
		json_decref(policy);
	}
	json_decref(attrs);
	return max;
}

transport *
transport_sqs_create(const pf_config *cfg, pf_error *err)
{
	sqs_transport *st = pf_calloc(1, sizeof(*st));
	const char *slash;
	int			max;

	st->base.ops = &sqs_ops;
	st->queue_url = pf_strdup(cfg->queue_url);
	slash = strrchr(st->queue_url, '/');
	st->base.queue_name = pf_strdup(slash && slash[1] ? slash + 1 : st->queue_url);
	st->credentials = pf_aws_credentials_provider_create(cfg, err);
	if (st->credentials == NULL)
	{
		sqs_destroy(&st->base);
		return NULL;
	}
	st->aws = pf_aws_client_create(cfg, st->credentials);
	st->sqs = pf_sqs_create(st->aws, cfg);

	max = fetch_max_receive_count(st, err);
	if (max < 0)
	{
		if (err->result == PF_ERR_NOT_FOUND)
		{
			sqs_destroy(&st->base);
			return NULL;
		}
		/* not fatal: poison messages still reach the DLQ, just unrecorded */
		pf_log_warn(NULL, "cannot read the redrive policy of %s (%s: %s); dead letters will not be recorded",
					st->base.queue_name, err->code, err->message);
		max = 0;
	}
	st->base.max_receive_count = max;
	return &st->base;
}
