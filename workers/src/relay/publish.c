/*
 * publish.c
 *		The SQS side of the relay: claimed events wait in a queue per
 *		destination, leave in SendMessageBatch calls of up to ten (never more
 *		than PAYFLOW_RELAY_IN_FLIGHT calls at once), and each entry's outcome
 *		becomes an ack (with its SQS message id) or a nack (with the error).
 *
 * The body is sent verbatim. FIFO queues get MessageGroupId and
 * MessageDeduplicationId from the row (the SQS client leaves both out for
 * standard queues). No event is ever dropped here: whatever cannot be sent
 * (an unknown destination, a refused entry, a failed call) is nacked and
 * stays in the outbox, except an entry SQS refuses for what the message
 * is (refused_for_good): retrying it could only loop, so it becomes a dead
 * letter in the database (outbox_dead_letter), which fails the step it
 * asked for.
 */
#include "relay.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "payflow/backoff.h"
#include "payflow/buf.h"

/* While SQS keeps failing, repeat the error at most this often. */
#define FAILURE_LOG_INTERVAL_MS 10000
/* An error kept with a nacked row (the outbox keeps 2000 characters). */
#define NACK_ERROR_MAX 600

static pf_log_ids
event_ids(const relay_event *ev)
{
	pf_log_ids	ids = {ev->operation_id, ev->event_id, ev->correlation_id,
	ev->trace.trace_id[0] ? ev->trace.trace_id : NULL, NULL};

	return ids;
}

void
relay_event_free(relay_event *ev)
{
	if (ev == NULL)
		return;
	free(ev->event_id);
	free(ev->destination);
	free(ev->group_id);
	free(ev->dedup_id);
	free(ev->body);
	for (int i = 0; i < 2 * ev->n_attributes; i++)
		free(ev->attribute_text[i]);
	pf_span_discard(&ev->otel); /* ended by its outcome, if it had one */
	free(ev);
}

void
relay_nack_event(relay *r, relay_event *ev, const char *error)
{
	relay_outcomes_add(&r->nacks, ev->event_id, error, false);
	r->stats.failed++;
	pf_span_set_error(&ev->otel, "not published: retried");
	pf_span_end(&ev->otel);
}

/*
 * Whether SQS refused this entry for what the message is, so that sending
 * it again can never succeed: characters SQS does not take, a message over
 * its size limit.  Only these: other sender faults (a queue of the wrong
 * type, a KMS key disabled, access denied) are the deployment's, not the
 * event's, and an operator's fix lets the nacked events through; failing
 * every operation instead would turn a configuration slip into lost work.
 */
static bool
refused_for_good(const pf_sqs_entry_result *e)
{
	static const char *const codes[] = {"InvalidMessageContents", "MessageTooLong"};

	if (e == NULL || !e->sender_fault || e->code == NULL)
		return false;
	for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++)
		if (strcmp(e->code, codes[i]) == 0)
			return true;
	return false;
}

void
relay_destinations_init(relay *r)
{
	r->n_destinations = r->cfg.queue_urls.count;
	r->destinations = pf_calloc((size_t) r->n_destinations + 1, sizeof(relay_destination));
	for (int i = 0; i < r->n_destinations; i++)
	{
		r->destinations[i].name = r->cfg.queue_urls.routes[i].destination;
		r->destinations[i].queue_url = r->cfg.queue_urls.routes[i].url;
	}
}

void
relay_destinations_free(relay *r)
{
	for (int i = 0; i < r->n_destinations; i++)
	{
		relay_event *ev = r->destinations[i].head;

		while (ev)
		{
			relay_event *next = ev->next;

			relay_event_free(ev);
			ev = next;
		}
	}
	free(r->destinations);
	r->destinations = NULL;
	r->n_destinations = 0;
	r->queued = 0;
}

static relay_destination *
find_destination(relay *r, const char *name)
{
	for (int i = 0; name && i < r->n_destinations; i++)
		if (strcmp(r->destinations[i].name, name) == 0)
			return &r->destinations[i];
	return NULL;
}

/*
 * Take a claimed event: queue it for its destination, or nack it at once
 * when it cannot be sent as it is.
 */
void
relay_accept(relay *r, relay_event *ev)
{
	relay_destination *d = find_destination(r, ev->destination);
	pf_log_ids	ids = event_ids(ev);
	char		error[256];

	error[0] = '\0';
	if (d == NULL)
		snprintf(error, sizeof(error), "no queue URL configured for destination \"%.100s\" (PAYFLOW_QUEUE_URLS)",
				 ev->destination ? ev->destination : "");
	else if (ev->body == NULL)
		snprintf(error, sizeof(error), "the outbox row has no body");
	else if (pf_sqs_queue_is_fifo(d->queue_url) && (ev->group_id == NULL || ev->group_id[0] == '\0'))
		snprintf(error, sizeof(error), "a FIFO queue needs a message group id; the row has none");
	if (error[0] != '\0')
	{
		pf_log_write(PF_LOG_WARN, &ids,
					 json_pack("{s:s?}", "destination", ev->destination),
					 "event not sent, left in the outbox: %s", error);
		relay_nack_event(r, ev, error);
		relay_event_free(ev);
		return;
	}
	ev->next = NULL;
	if (d->tail)
		d->tail->next = ev;
	else
	{
		d->head = ev;
		d->waiting_since_ms = pf_now_ms();
	}
	d->tail = ev;
	d->count++;
	r->queued++;
}

/*
 * Whether a claim may bring more rows soon: one is running, or one is
 * wanted (the last came back full, acks freed message groups, calls ended).
 */
static bool
more_rows_coming(const relay *r)
{
	/*
	 * Only in a backlog (the last claim came back full): under a steady
	 * load a notification wants a claim after nearly every commit, and
	 * waiting for those would hold every partial batch the whole
	 * PAYFLOW_SQS_BATCH_WAIT_MS.
	 */
	return r->backlog && ((r->db.active && r->db.claim_max > 0) || r->claim_wanted);
}

/* A destination's partial batch may leave: nothing more is coming, or it waited long enough. */
static bool
partial_due(const relay *r, const relay_destination *d, int64_t now)
{
	return !more_rows_coming(r) || now - d->waiting_since_ms >= r->batch_wait_ms;
}

/*
 * The destination to send next: full batches first (the fullest), then
 * the fullest partial one that is due.
 */
static relay_destination *
next_destination(relay *r, int64_t now)
{
	relay_destination *best = NULL;

	for (int i = 0; i < r->n_destinations; i++)
	{
		relay_destination *d = &r->destinations[i];

		if (d->count == 0 || (d->count < PF_SQS_MAX_BATCH && !partial_due(r, d, now)))
			continue;
		if (best == NULL || d->count > best->count)
			best = d;
	}
	return best;
}

static bool call_room(const relay *r);

/*
 * When a partial batch held back falls due; INT64_MAX when none is held,
 * or no call could start anyway (a finished call wakes the loop then).
 */
int64_t
relay_batch_deadline(const relay *r)
{
	int64_t		due = INT64_MAX;

	if (!call_room(r))
		return INT64_MAX;
	for (int i = 0; i < r->n_destinations; i++)
	{
		const relay_destination *d = &r->destinations[i];

		if (d->count > 0 && d->waiting_since_ms + r->batch_wait_ms < due)
			due = d->waiting_since_ms + r->batch_wait_ms;
	}
	return due;
}

static relay_batch *
take_batch(relay_destination *d)
{
	relay_batch *b = pf_calloc(1, sizeof(*b));
	size_t		bytes = 0;

	b->destination = d;
	while (d->head && b->n < PF_SQS_MAX_BATCH)
	{
		relay_event *ev = d->head;

		/* a single oversized event still goes, alone, and fails on its own */
		if (b->n > 0 && bytes + ev->size > RELAY_BATCH_MAX_BYTES)
			break;
		bytes += ev->size;
		d->head = ev->next;
		if (d->head == NULL)
			d->tail = NULL;
		ev->next = NULL;
		d->count--;
		b->events[b->n++] = ev;
	}
	/* what is left begins a batch of its own */
	d->waiting_since_ms = pf_now_ms();
	return b;
}

static void
batch_free(relay_batch *b)
{
	for (int i = 0; i < b->n; i++)
		relay_event_free(b->events[i]);
	pf_span_end(&b->otel);
	free(b);
}

static json_t *
batch_event_ids(const relay_batch *b)
{
	json_t	   *list = json_array();

	for (int i = 0; i < b->n; i++)
		json_array_append_new(list, json_string(b->events[i]->event_id));
	return list;
}

/* Start one call for the batch; false (and every event nacked) if it cannot be built. */
static bool
start_batch(relay *r, relay_batch *b)
{
	pf_sqs_send_entry entries[PF_SQS_MAX_BATCH];
	char		entry_ids[PF_SQS_MAX_BATCH][16];
	pf_aws_call *call;
	pf_error	err;

	for (int i = 0; i < b->n; i++)
	{
		relay_event *ev = b->events[i];

		/* entry ids are positions: short, and valid whatever the event id */
		snprintf(entry_ids[i], sizeof(entry_ids[i]), "%d", i);
		memset(&entries[i], 0, sizeof(entries[i]));
		entries[i].id = entry_ids[i];
		entries[i].body = ev->body;
		entries[i].group_id = ev->group_id;
		entries[i].dedup_id = ev->dedup_id;
		entries[i].attributes = ev->attributes;
		entries[i].n_attributes = ev->n_attributes;
	}
	/* the call: a trace of its own, linked to the publish span of each event it carries */
	{
		char		name[96];

		snprintf(name, sizeof(name), "send %s", b->destination->name);
		pf_span_begin(&b->otel, name, PF_SPAN_PRODUCER, NULL);
		pf_span_set_str(&b->otel, "messaging.system", "aws_sqs");
		pf_span_set_str(&b->otel, "messaging.destination.name", b->destination->name);
		pf_span_set_int(&b->otel, "messaging.batch.message_count", b->n);
		for (int i = 0; i < b->n; i++)
			if (b->events[i]->trace.trace_id[0])
				pf_span_add_link(&b->otel, &b->events[i]->otel.ctx);
	}
	call = pf_sqs_send_message_batch_start(r->sqs, b->destination->queue_url, entries, b->n, b, &err);
	if (call == NULL)
	{
		char		error[NACK_ERROR_MAX];

		snprintf(error, sizeof(error), "SendMessageBatch not sent: %.64s: %.400s", err.code, err.message);
		pf_log_write(PF_LOG_ERROR, NULL,
					 json_pack("{s:s,s:o}", "destination", b->destination->name, "eventIds", batch_event_ids(b)),
					 "%s", error);
		for (int i = 0; i < b->n; i++)
			relay_nack_event(r, b->events[i], error);
		batch_free(b);
		return false;
	}
	r->in_flight++;
	r->stats.calls++;
	return true;
}

/*
 * Calls sent and not yet acked: those in flight and those whose acks are
 * not written yet.
 */
int
relay_busy_calls(const relay *r)
{
	return r->in_flight + r->unacked_calls;
}

/*
 * Whether another call may start: at most PAYFLOW_RELAY_IN_FLIGHT in flight,
 * and at most as many again whose acks are still being written, so sends
 * go on while the database writes acks, and at most 2 × in-flight × 10
 * events are ever sent and unacked (what a crash can send twice).
 */
static bool
call_room(const relay *r)
{
	return r->in_flight < r->max_in_flight && relay_busy_calls(r) < 2 * r->max_in_flight;
}

/* Start calls for queued events while the in-flight bounds allow. Returns how many. */
int
relay_start_batches(relay *r)
{
	int			started = 0;
	int64_t		now = pf_now_ms();

	while (call_room(r) && r->queued > 0)
	{
		relay_destination *d = next_destination(r, now);
		relay_batch *b;

		if (d == NULL)
			break;				/* only partial batches, waiting for more rows */
		b = take_batch(d);
		r->queued -= b->n;
		if (start_batch(r, b))
			started++;
	}
	return started;
}

/*
 * The error code AWS's own SDKs report for an SQS JSON error: the
 * x-amzn-query-error header (e.g. "SignatureDoesNotMatch;Sender") when
 * present, else the code taken from the body.
 */
static void
aws_error_code(const pf_aws_call *call, const pf_error *err, char *code, size_t len)
{
	char		header[128];

	if (pf_http_response_header(&call->http, "x-amzn-query-error", header, sizeof(header)) && header[0])
		snprintf(code, len, "%.*s", (int) strcspn(header, ";"), header);
	else
		snprintf(code, len, "%s", err->code[0] ? err->code : "Unknown");
}

/*
 * The first line of an AWS error message: a SignatureDoesNotMatch goes on
 * with the whole canonical request, which belongs in no log line.
 */
static void
first_line(char *dst, size_t len, const char *src)
{
	snprintf(dst, len, "%.*s", (int) strcspn(src, "\r\n"), src);
}

static void
call_failed(relay *r, relay_batch *b, const pf_aws_call *call, const pf_error *err)
{
	char		code[128];
	char		message[sizeof(err->message)];
	char		error[NACK_ERROR_MAX];
	int64_t		now = pf_now_ms();
	pf_log_level level;

	aws_error_code(call, err, code, sizeof(code));
	first_line(message, sizeof(message), err->message);
	if (err->http_status > 0)
		snprintf(error, sizeof(error), "SQS SendMessageBatch failed: %.64s (HTTP %ld): %.400s", code, err->http_status,
				 message);
	else
		snprintf(error, sizeof(error), "SQS SendMessageBatch failed: %.64s: %.400s", code, message);
	for (int i = 0; i < b->n; i++)
		relay_nack_event(r, b->events[i], error);
	pf_span_set_str(&b->otel, "aws.error.code", code);
	pf_span_set_error(&b->otel, "SendMessageBatch failed");

	r->stats.failed_calls++;
	r->sqs_failure_streak++;
	/* the first failure of a run, then one line per interval */
	if (pf_log_throttled(r->sqs_failure_streak == 1, &r->sqs_failure_logged_ms, now, FAILURE_LOG_INTERVAL_MS))
		level = err->result == PF_ERR_TRANSIENT ? PF_LOG_WARN : PF_LOG_ERROR;
	else
		level = PF_LOG_DEBUG;
	if (pf_log_enabled(level))
		pf_log_write(level, NULL,
					 json_pack("{s:s,s:s,s:s,s:s,s:I,s:i,s:i,s:i,s:o}",
							   "destination", b->destination->name,
							   "queueUrl", b->destination->queue_url,
							   "errorCode", code,
							   "errorType", err->code,
							   "httpStatus", (json_int_t) err->http_status,
							   "attempts", call->attempts,
							   "failedCalls", r->sqs_failure_streak,
							   "events", b->n,
							   "eventIds", batch_event_ids(b)),
					 "%s; the events stay in the outbox and are retried", error);
}

/* Turn a finished call into acks and nacks; frees the call and its batch. */
void
relay_finish_batch(relay *r, pf_aws_call *call)
{
	relay_batch *b = pf_sqs_call_user(call);
	pf_sqs_batch_result result;
	pf_error	err;
	bool		any_ok = false;

	r->in_flight--;
	/* the failed call's headers are gone after finish: judge them first */
	if (call->error.result != PF_OK)
	{
		err = call->error;
		call_failed(r, b, call, &err);
		pf_sqs_send_message_batch_finish(call, &result, &err);
		batch_free(b);
		return;
	}
	if (pf_sqs_send_message_batch_finish(call, &result, &err) != PF_OK)
	{
		/* an answer we could not read: the entries may or may not be queued */
		char		error[NACK_ERROR_MAX];

		snprintf(error, sizeof(error), "SQS SendMessageBatch answer unreadable: %.64s: %.400s", err.code, err.message);
		pf_log_write(PF_LOG_WARN, NULL, json_pack("{s:s,s:o}", "destination", b->destination->name,
												  "eventIds", batch_event_ids(b)), "%s", error);
		for (int i = 0; i < b->n; i++)
			relay_nack_event(r, b->events[i], error);
		batch_free(b);
		return;
	}
	if (r->sqs_failure_streak > 0)
	{
		pf_log_info(NULL, "SQS accepts messages again after %d failed call(s)", r->sqs_failure_streak);
		r->sqs_failure_streak = 0;
	}

	for (int i = 0; i < b->n; i++)
	{
		relay_event *ev = b->events[i];
		char		entry_id[16];
		const pf_sqs_entry_result *e;
		pf_log_ids	ids = event_ids(ev);

		snprintf(entry_id, sizeof(entry_id), "%d", i);
		e = pf_sqs_batch_result_find(&result, entry_id);
		if (e != NULL && e->ok)
		{
			relay_outcomes_add(&r->acks, ev->event_id, e->message_id, false);
			r->stats.sent++;
			pf_span_set_str(&ev->otel, "messaging.message.id", e->message_id);
			pf_span_end(&ev->otel);
			any_ok = true;
			if (pf_log_enabled(PF_LOG_DEBUG))
				pf_log_write(PF_LOG_DEBUG, &ids,
							 json_pack("{s:s,s:s?}", "destination", b->destination->name,
									   "messageId", e->message_id),
							 "published");
		}
		else
		{
			char		error[NACK_ERROR_MAX];

			if (e != NULL)
				snprintf(error, sizeof(error), "SQS refused the message: %.64s: %.400s", e->code, e->message);
			else
				snprintf(error, sizeof(error), "SQS answered nothing for this batch entry");
			if (refused_for_good(e))
			{
				pf_log_write(PF_LOG_ERROR, &ids,
							 json_pack("{s:s,s:s,s:b}", "destination", b->destination->name,
									   "errorCode", e->code, "senderFault", true),
							 "%s; the event becomes a dead letter and its step fails", error);
				relay_outcomes_add(&r->dead, ev->event_id, error, false);
				r->stats.dead_lettered++;
				pf_span_set_error(&ev->otel, "refused for good: dead letter");
				pf_span_end(&ev->otel);
				continue;
			}
			pf_log_write(PF_LOG_WARN, &ids,
						 json_pack("{s:s,s:s,s:b}", "destination", b->destination->name,
								   "errorCode", e && e->code ? e->code : "NoResult",
								   "senderFault", e != NULL && e->sender_fault),
						 "%s; the event stays in the outbox and is retried", error);
			relay_nack_event(r, ev, error);
		}
	}
	if (any_ok)
	{
		/* the call keeps its place until its acks are written */
		r->acks.call_end[r->acks.n - 1] = true;
		r->unacked_calls++;
	}
	pf_sqs_batch_result_free(&result);
	batch_free(b);
}
