/*
 * outcomes.c
 *		The relay's buffer of outcomes not yet written to the database:
 *		acks, nacks and dead letters of events sent, gathered so that one
 *		statement carries many calls' outcomes (outbox.c writes them),
 *		and when they fall due.
 */
#include "relay.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "payflow/buf.h"
#include "payflow/clock.h"

/*
 * How long an ack may wait for company. Acks are written with the next
 * claim, or when the oldest has waited this long, or when the calls they
 * end hold half of the room for unacked calls. Each statement costs the
 * relay's backend a few hundred microseconds whatever it carries (parse of
 * the arrays, the plpgsql calls, the commit and its WAL flush); written
 * after each call, acks made one statement per SendMessageBatch call.
 * Later events of an acked row's message group wait for the ack, but a
 * claim carries every ack pending and runs after them, so no claim misses
 * a group head an ack would free. The statement that writes acks also
 * claims, so this is also how soon after a call an event committed since
 * is picked up when no NOTIFY came for it yet (the scheduler's are at most
 * one per payflow.notify_interval, 10 ms): at 10 ms the bench's commit-to-
 * SQS p50 rose from 6 to 9 ms; at 5 ms it is 6 ms again.
 */
#define ACK_DELAY_MS 5

void
relay_outcomes_add(relay_outcomes *o, const char *event_id, const char *text, bool call_end)
{
	if (o->n == o->cap)
	{
		o->cap = o->cap ? o->cap * 2 : 64;
		o->event_ids = pf_realloc(o->event_ids, sizeof(char *) * (size_t) o->cap);
		o->texts = pf_realloc(o->texts, sizeof(char *) * (size_t) o->cap);
		o->call_end = pf_realloc(o->call_end, sizeof(bool) * (size_t) o->cap);
	}
	if (o->n == 0)
		o->oldest_ms = pf_now_ms();
	o->event_ids[o->n] = pf_strdup(event_id);
	o->texts[o->n] = text ? pf_strdup(text) : NULL;
	o->call_end[o->n] = call_end;
	o->n++;
}

/*
 * Whether the outcomes gathered should be written now, without waiting for
 * a claim to carry them (see ACK_DELAY_MS): nacks at once (rare, and their
 * back-off starts when written), acks when the oldest waited ACK_DELAY_MS,
 * when the calls they end hold half of the room for unacked calls (sends
 * would soon stop for them), or when stopping.
 */
bool
relay_outcomes_due(const relay *r, int64_t now, bool stopping)
{
	if (r->nacks.n > 0 || r->dead.n > 0)
		return true;
	if (r->acks.n == 0)
		return false;
	return stopping || now >= relay_outcomes_deadline(r) ||
		2 * r->unacked_calls >= r->max_in_flight;
}

/* When the acks gathered fall due; INT64_MAX when there are none. */
int64_t
relay_outcomes_deadline(const relay *r)
{
	if (r->nacks.n > 0 || r->dead.n > 0)
		return 0;
	return r->acks.n > 0 ? r->acks.oldest_ms + ACK_DELAY_MS : INT64_MAX;
}

/*
 * Forget the first n outcomes (written, or given up); returns the calls
 * they ended. Those left keep the oldest time: they are due no later.
 */
int
relay_outcomes_drop(relay_outcomes *o, int n)
{
	int			calls = 0;

	for (int i = 0; i < n; i++)
	{
		free(o->event_ids[i]);
		free(o->texts[i]);
		calls += o->call_end[i];
	}
	memmove(o->event_ids, o->event_ids + n, sizeof(char *) * (size_t) (o->n - n));
	memmove(o->texts, o->texts + n, sizeof(char *) * (size_t) (o->n - n));
	memmove(o->call_end, o->call_end + n, sizeof(bool) * (size_t) (o->n - n));
	o->n -= n;
	return calls;
}

void
relay_outcomes_free(relay_outcomes *o)
{
	relay_outcomes_drop(o, o->n);
	free(o->event_ids);
	free(o->texts);
	free(o->call_end);
	memset(o, 0, sizeof(*o));
}

/* Acks and nacks not yet written; given up, the claims expire instead. */
void
relay_outcomes_abandon(relay *r)
{
	if (r->acks.n + r->nacks.n + r->dead.n > 0)
		pf_log_warn(NULL, "stopping without writing %d ack(s), %d nack(s) and %d dead letter(s): "
					"those events are sent again once their claims expire", r->acks.n, r->nacks.n, r->dead.n);
	relay_outcomes_drop(&r->acks, r->acks.n);
	relay_outcomes_drop(&r->nacks, r->nacks.n);
	relay_outcomes_drop(&r->dead, r->dead.n);
	r->unacked_calls = 0;
}
