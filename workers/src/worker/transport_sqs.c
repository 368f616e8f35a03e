/*
 * transport_sqs.c
 *		The SQS transport: one long-poll receive at a time; deletes and
 *		visibility changes coalesced into DeleteMessageBatch and
 *		ChangeMessageVisibilityBatch calls of up to ten, all on one curl multi
 *		handle of the main thread.
 *
 * Coalescing. Every executor's outcome reaches the main thread, which
 * queues its delete or visibility change here. An entry waits until ten are
 * queued of its kind or the first of them has waited PAYFLOW_SQS_DELETE_WAIT_MS
 * (deletes, 100 ms by default) or PAYFLOW_SQS_BATCH_WAIT_MS (visibility
 * changes, 50 ms), then leaves in a batch: a burst of finished steps costs
 * one call per ten, not one per handful that happened to finish together.
 * Waiting is cheap: the message stays hidden, and its step is already
 * committed; a delete that waits delays nothing but the queue's count.
 *
 * Entries fail on their own: a batch answers per entry, and a failed entry
 * is logged with its message id (and retried alone when SQS says the fault
 * is not the sender's); a whole call that fails after the client's own
 * retries puts its entries back for another call, up to ENTRY_ATTEMPTS
 * calls. A delete that is lost in the end is logged: the message comes back
 * after its visibility timeout and its step is then found done (a skip), so
 * it costs a redelivery, never a second charge.
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
/* a waiting delete leaves at the latest this long before its message would show again */
#define DELETE_MARGIN_MS 1000
/* calls one delete or final visibility change may ride in before it is given up */
#define ENTRY_ATTEMPTS 3
/* a call that failed as a whole: its entries wait at least this before the next */
#define ENTRY_RETRY_MS 1000
#define STATS_INTERVAL_MS 60000

/* One delete or visibility change waiting for its batch, or riding in one. */
typedef struct sqs_entry
{
	char	   *message_id;		/* for logs */
	char	   *receipt;
	int			seconds;		/* visibility changes */
	bool		final;			/* the last word on a message let go of, not a renewal */
	int			attempts;		/* calls it rode in so far */
	int64_t		leave_by_ms;	/* 0, or the latest it may leave (deletes) */
} sqs_entry;

/* Entries of one kind waiting to be sent, oldest first. */
typedef struct entry_queue
{
	bool		delete;
	int			wait_ms;		/* a partial batch waits this long for more */
	int			n;
	int			cap;
	sqs_entry  *items;
	int64_t		since_ms;		/* when the oldest of them was queued */
	int64_t		not_before_ms;	/* after a failed call: not sooner */
} entry_queue;

/*
 * A batch call in flight. A call that holds renewals is kept on a list: a
 * final visibility set for one of its messages meanwhile is set again once
 * it is done (SQS applies calls in the order they arrive, not the order
 * they were sent).
 */
typedef struct batch_call
{
	bool		delete;
	int			n;
	sqs_entry	entries[PF_SQS_MAX_BATCH];
	int			final_seconds[PF_SQS_MAX_BATCH];	/* renewals: a final set since; -1: none */
	bool		has_renewals;
	struct batch_call *next_renewal;
} batch_call;

typedef struct sqs_transport
{
	transport	base;
	pf_aws_credentials_provider *credentials;
	pf_aws_client *aws;
	pf_sqs	   *sqs;
	char	   *queue_url;
	pf_aws_call *receive_call;
	int			n_calls;		/* batches in flight */
	batch_call *renewals;		/* batches with renewals in flight */
	entry_queue deletes;
	entry_queue visibility;
	int			receive_failures;	/* consecutive */
	int64_t		receive_not_before_ms;
	int			receive_visibility_s;	/* of the receive in flight */
	int64_t		next_stats_ms;
} sqs_transport;

void
transport_message_free(transport_message *m)
{
	if (m == NULL)
		return;
	free(m->id);
	free(m->receipt);
	free(m->body);
	free(m->traceparent);
	free(m);
}

static void
entry_free(sqs_entry *e)
{
	free(e->message_id);
	free(e->receipt);
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
	st->receive_visibility_s = visibility_s;
	st->receive_call = pf_sqs_receive_message_start(st->sqs, st->queue_url, &opts, NULL);
}

static bool
sqs_receiving(const transport *t)
{
	return ((const sqs_transport *) t)->receive_call != NULL;
}

/* ---- the queues of entries ---- */

static int
queue_find(const entry_queue *q, const char *receipt)
{
	for (int i = 0; i < q->n; i++)
		if (strcmp(q->items[i].receipt, receipt) == 0)
			return i;
	return -1;
}

static void
queue_remove(entry_queue *q, int i)
{
	entry_free(&q->items[i]);
	memmove(&q->items[i], &q->items[i + 1], sizeof(sqs_entry) * (size_t) (q->n - i - 1));
	q->n--;
}

/* Takes e over (its strings belong to the queue then). */
static void
queue_push(entry_queue *q, sqs_entry e)
{
	if (q->n == q->cap)
	{
		q->cap = q->cap ? 2 * q->cap : 32;
		q->items = pf_realloc(q->items, sizeof(sqs_entry) * (size_t) q->cap);
	}
	if (q->n == 0)
		q->since_ms = pf_now_ms();
	q->items[q->n++] = e;
}

static sqs_entry
new_entry(const transport_message *m, int seconds, bool final)
{
	sqs_entry	e = {pf_strdup(m->id), pf_strdup(m->receipt), seconds, final, 0, 0};

	return e;
}

/* ---- batch calls ---- */

/* Send the first n (1..10) entries of q in one call. */
static void
start_call(sqs_transport *st, entry_queue *q, int n)
{
	batch_call *bc = pf_calloc(1, sizeof(*bc));
	json_t	   *entries = json_array();

	bc->delete = q->delete;
	bc->n = n;
	for (int i = 0; i < n; i++)
	{
		sqs_entry  *e = &bc->entries[i];
		char		id[16];
		json_t	   *je;

		*e = q->items[i];
		e->attempts++;
		bc->final_seconds[i] = -1;
		if (!q->delete && !e->final)
			bc->has_renewals = true;
		/* entry ids are positions: short, and valid whatever the receipt */
		snprintf(id, sizeof(id), "m%d", i);
		je = json_pack("{s:s,s:s}", "Id", id, "ReceiptHandle", e->receipt);
		if (!q->delete)
			json_object_set_new(je, "VisibilityTimeout", json_integer(e->seconds));
		json_array_append_new(entries, je);
	}
	memmove(q->items, q->items + n, sizeof(sqs_entry) * (size_t) (q->n - n));
	q->n -= n;
	q->since_ms = pf_now_ms();
	if (bc->has_renewals)
	{
		bc->next_renewal = st->renewals;
		st->renewals = bc;
	}
	pf_log_write(PF_LOG_DEBUG, NULL, json_pack("{s:s,s:i}", "queue", st->base.queue_name, "entries", n),
				 "SQS %s of %d message(s)", q->delete ? "DeleteMessageBatch" : "ChangeMessageVisibilityBatch", n);
	pf_sqs_start(st->sqs, q->delete ? "DeleteMessageBatch" : "ChangeMessageVisibilityBatch",
				 json_pack("{s:s,s:o}", "QueueUrl", st->queue_url, "Entries", entries), bc);
	st->n_calls++;
}

/*
 * When a partial batch of q must leave: once its oldest entry has waited
 * the queue's wait_ms, or sooner when a waiting delete's message would
 * otherwise show again (a visibility timeout short beside the wait, or a
 * step that ended just before its renewal): the wait must never cost a
 * redelivery.
 */
static int64_t
queue_due(const entry_queue *q)
{
	int64_t		due = q->since_ms + q->wait_ms;

	for (int i = 0; i < q->n; i++)
		if (q->items[i].leave_by_ms > 0 && q->items[i].leave_by_ms < due)
			due = q->items[i].leave_by_ms;
	return due;
}

/*
 * Send what is due: every full batch at once, the rest when queue_due says
 * (or at once with force).
 */
static void
flush_queue(sqs_transport *st, entry_queue *q, int64_t now, bool force)
{
	if (q->n == 0 || now < q->not_before_ms)
		return;
	while (q->n >= PF_SQS_MAX_BATCH)
		start_call(st, q, PF_SQS_MAX_BATCH);
	if (q->n > 0 && (force || now >= queue_due(q)))
		start_call(st, q, q->n);
}

static void
flush_due(sqs_transport *st, bool force)
{
	int64_t		now = pf_now_ms();

	flush_queue(st, &st->deletes, now, force);
	flush_queue(st, &st->visibility, now, force);
}

/* When the next partial batch is due; INT64_MAX when none waits. */
static int64_t
queue_deadline(const sqs_transport *st, const entry_queue *q)
{
	int64_t		due;

	if (q->n == 0)
		return INT64_MAX;
	due = queue_due(q);
	return due > q->not_before_ms ? due : q->not_before_ms;
}

/* ---- what the loop asks for ---- */

/* A renewal in flight that holds receipt hears of the final visibility set for it (-1: forget it). */
static void
note_final(sqs_transport *st, const char *receipt, int seconds)
{
	for (batch_call *bc = st->renewals; bc; bc = bc->next_renewal)
		for (int k = 0; k < bc->n; k++)
			if (!bc->entries[k].final && strcmp(bc->entries[k].receipt, receipt) == 0)
				bc->final_seconds[k] = seconds;
}

static void
sqs_delete_messages(transport *t, transport_message *const *msgs, int n)
{
	sqs_transport *st = (sqs_transport *) t;

	for (int i = 0; i < n; i++)
	{
		int			k = queue_find(&st->visibility, msgs[i]->receipt);

		/* a visibility change still waiting is moot now */
		if (k >= 0)
			queue_remove(&st->visibility, k);
		note_final(st, msgs[i]->receipt, -1);
		if (queue_find(&st->deletes, msgs[i]->receipt) < 0)
		{
			sqs_entry	e = new_entry(msgs[i], 0, false);

			if (msgs[i]->visible_at_ms > 0)
				e.leave_by_ms = msgs[i]->visible_at_ms - DELETE_MARGIN_MS;
			queue_push(&st->deletes, e);
		}
	}
	flush_due(st, false);
}

static void
queue_visibility(sqs_transport *st, const transport_message *m, int seconds, bool final)
{
	int			k = queue_find(&st->visibility, m->receipt);

	if (final)
		note_final(st, m->receipt, seconds);
	if (k >= 0)
	{
		sqs_entry  *e = &st->visibility.items[k];

		/* one entry per message: a final replaces a renewal, never the reverse */
		if (final || !e->final)
		{
			e->seconds = seconds;
			e->final = final;
		}
		return;
	}
	queue_push(&st->visibility, new_entry(m, seconds, final));
}

static void
sqs_set_visibility(transport *t, transport_message *const *msgs, int n, int seconds)
{
	sqs_transport *st = (sqs_transport *) t;

	for (int i = 0; i < n; i++)
	{
		/* as of the request: a renewal that fails leaves it later than SQS has it */
		msgs[i]->visible_at_ms = pf_now_ms() + (int64_t) seconds * 1000;
		queue_visibility(st, msgs[i], seconds, false);
	}
	flush_due(st, false);
}

static void
sqs_set_visibility_final(transport *t, transport_message *const *msgs, int n, int seconds)
{
	sqs_transport *st = (sqs_transport *) t;

	for (int i = 0; i < n; i++)
		queue_visibility(st, msgs[i], seconds, true);
	flush_due(st, false);
}

/* ---- outcomes ---- */

/* A renewal call is done: take it off the list, and say the last word again. */
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

		if (bc->final_seconds[k] < 0)
			continue;
		m.id = bc->entries[k].message_id;
		m.receipt = bc->entries[k].receipt;
		pf_log_write(PF_LOG_DEBUG, NULL,
					 json_pack("{s:s,s:s,s:i}", "queue", st->base.queue_name, "messageId", m.id,
							   "visibility", bc->final_seconds[k]),
					 "a renewal landed after the message was let go: its visibility is set again");
		queue_visibility(st, &m, bc->final_seconds[k], true);
	}
}

/*
 * An entry that did not go through: another call for a delete or a final
 * visibility while attempts are left and retrying can help; otherwise said
 * so (a renewal is retried by the next heartbeat anyway).
 */
static void
entry_failed(sqs_transport *st, batch_call *bc, int k, const char *code, const char *message, bool retry)
{
	sqs_entry  *e = &bc->entries[k];
	entry_queue *q = bc->delete ? &st->deletes : &st->visibility;
	bool		renewal = !bc->delete && !e->final;
	const char *what = bc->delete ? "delete" : renewal ? "visibility renewal" : "visibility change";

	if (queue_find(q, e->receipt) >= 0)
		return;					/* a newer one for the same message waits already */
	if (retry && !renewal && e->attempts < ENTRY_ATTEMPTS)
	{
		pf_log_write(PF_LOG_INFO, NULL,
					 json_pack("{s:s,s:s,s:s,s:i}", "queue", st->base.queue_name, "messageId", e->message_id,
							   "code", code, "attempt", e->attempts),
					 "SQS %s failed for a message (%s); sent again", what, message);
		queue_push(q, *e);
		memset(e, 0, sizeof(*e));	/* the queue has its strings now */
		return;
	}
	if (bc->delete)
		pf_log_write(PF_LOG_WARN, NULL,
					 json_pack("{s:s,s:s,s:s,s:i}", "queue", st->base.queue_name, "messageId", e->message_id,
							   "code", code, "attempts", e->attempts),
					 "SQS delete failed for a message: %s; it comes back after its visibility timeout, "
					 "and its step is then found done", message);
	else
		pf_log_write(PF_LOG_WARN, NULL,
					 json_pack("{s:s,s:s,s:s,s:i,s:i}", "queue", st->base.queue_name, "messageId", e->message_id,
							   "code", code, "visibility", e->seconds, "attempts", e->attempts),
					 "SQS %s failed for a message: %s", what, message);
}

static void
finish_batch(sqs_transport *st, pf_aws_call *call)
{
	batch_call *bc = pf_sqs_call_user(call);
	json_t	   *resp = NULL;
	pf_error	err;

	st->n_calls--;
	if (bc->has_renewals)
		finish_renewal(st, bc);
	if (pf_sqs_finish(call, &resp, &err) != PF_OK)
	{
		entry_queue *q = bc->delete ? &st->deletes : &st->visibility;

		/* the client retried already: give it a moment before the next call */
		q->not_before_ms = pf_now_ms() + ENTRY_RETRY_MS;
		for (int k = 0; k < bc->n; k++)
			entry_failed(st, bc, k, err.code, err.message, err.result != PF_ERR_FINAL || err.http_status >= 500);
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

			if (k < 0 || k >= bc->n || bc->entries[k].receipt == NULL)
				continue;
			entry_failed(st, bc, k, code ? code : "?", message ? message : "",
						 !json_is_true(json_object_get(e, "SenderFault")));
		}
		json_decref(resp);
	}
	for (int k = 0; k < bc->n; k++)
		entry_free(&bc->entries[k]);
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
		const char *trace;

		/* take the strings over instead of copying them */
		m->id = src->message_id;
		m->receipt = src->receipt_handle;
		m->body = src->body;
		m->body_len = src->body_len;
		m->receive_count = src->receive_count;
		/* the operation's trace (the relay sends it: extension/sql/trace_context.sql) */
		trace = json_string_value(json_object_get(json_object_get(src->message_attributes, "traceparent"),
												  "StringValue"));
		m->traceparent = trace ? pf_strdup(trace) : NULL;
		/* hidden from SQS's answer on, which is a little before this */
		m->visible_at_ms = pf_now_ms() + (int64_t) st->receive_visibility_s * 1000;
		src->message_id = src->receipt_handle = src->body = NULL;
		(*out)[(*n_out)++] = m;
	}
	pf_sqs_messages_free(&msgs);
}

static void
sqs_poll(transport *t, int timeout_ms, int wake_fd, transport_message ***out, int *n_out)
{
	sqs_transport *st = (sqs_transport *) t;
	int64_t		now = pf_now_ms();
	int64_t		due = queue_deadline(st, &st->deletes);
	pf_aws_call *call;

	if (queue_deadline(st, &st->visibility) < due)
		due = queue_deadline(st, &st->visibility);
	/* wake up for the next partial batch */
	if (due != INT64_MAX && due - now < timeout_ms)
		timeout_ms = due > now ? (int) (due - now) : 0;
	call = pf_sqs_wait(st->sqs, timeout_ms, wake_fd);
	while (call != NULL)
	{
		if (call == st->receive_call)
			finish_receive(st, call, out, n_out);
		else
			finish_batch(st, call);
		/* collect what else is done, without waiting */
		call = pf_sqs_wait(st->sqs, 0, -1);
	}
	flush_due(st, false);
	now = pf_now_ms();
	if (now >= st->next_stats_ms)
	{
		pf_log_write(PF_LOG_DEBUG, NULL, json_pack("{s:s,s:o}", "queue", st->base.queue_name,
												   "sqs", pf_sqs_counts_json(st->sqs)), "SQS calls so far");
		st->next_stats_ms = now + STATS_INTERVAL_MS;
	}
}

/* Deletes and visibility changes in flight or waiting for their batch. */
static int
sqs_pending(const transport *t)
{
	const sqs_transport *st = (const sqs_transport *) t;

	return st->n_calls + st->deletes.n + st->visibility.n;
}

static void
sqs_destroy(transport *t)
{
	sqs_transport *st = (sqs_transport *) t;

	if (st == NULL)
		return;
	if (st->sqs)
		pf_log_write(PF_LOG_INFO, NULL, json_pack("{s:s,s:o}", "queue", st->base.queue_name,
												  "sqs", pf_sqs_counts_json(st->sqs)), "SQS calls");
	if (st->deletes.n + st->visibility.n > 0)
		pf_log_warn(NULL, "exiting with %d delete(s) and %d visibility change(s) not sent: those messages "
					"come back after their visibility timeout", st->deletes.n, st->visibility.n);
	for (int i = 0; i < st->deletes.n; i++)
		entry_free(&st->deletes.items[i]);
	for (int i = 0; i < st->visibility.n; i++)
		entry_free(&st->visibility.items[i]);
	free(st->deletes.items);
	free(st->visibility.items);
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
	st->deletes.delete = true;
	st->deletes.wait_ms = cfg->sqs_delete_wait_ms;
	st->visibility.wait_ms = cfg->sqs_batch_wait_ms;
	st->next_stats_ms = pf_now_ms() + STATS_INTERVAL_MS;
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
