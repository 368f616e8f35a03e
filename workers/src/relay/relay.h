/*
 * relay.h
 *		payflow-relay: moves outbox rows to SQS.
 *
 * One process, one thread, one context (relay). The loop claims rows with
 * payflow.outbox_claim, queues them per destination, sends them in
 * SendMessageBatch calls of up to ten with at most PAYFLOW_RELAY_IN_FLIGHT
 * calls in flight, and acks (or nacks) the outcome of each entry. While a
 * claim may bring more rows, a destination with fewer than ten waits for
 * them up to PAYFLOW_SQS_BATCH_WAIT_MS. Sends go on while the acks of
 * earlier calls wait to be written (at most PAYFLOW_RELAY_IN_FLIGHT more
 * calls' worth, which bounds what a crash sends twice). Acks are gathered
 * for a few milliseconds and ride with the next claim (outbox.c,
 * relay_outcomes_due): one statement for many calls. Delivery
 * is at-least-once: a row is deleted only after SQS accepted it, so a crash
 * between the send and the ack sends it again once its claim expires.
 *
 *		outbox.c	the database side: one statement that writes outcomes and claims
 *		outcomes.c	the outcomes (acks, nacks, dead letters) waiting to be written
 *		publish.c	the SQS side: per-destination queues, batches, outcomes
 *		main.c		settings, signals, the loop, drain on SIGTERM
 */
#ifndef PAYFLOW_RELAY_H
#define PAYFLOW_RELAY_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include "payflow/config.h"
#include "payflow/log.h"
#include "payflow/pg.h"
#include "payflow/sqs.h"
#include "payflow/trace_context.h"
#include "payflow/tracer.h"

/* SQS allows ten message attributes per message. */
#define RELAY_MAX_ATTRIBUTES 10
/* SendMessageBatch: at most 256 KiB for all entries together. */
#define RELAY_BATCH_MAX_BYTES (256 * 1024)

/* One claimed outbox row, from the claim until its ack or nack is queued. */
typedef struct relay_event
{
	char	   *event_id;
	char	   *destination;
	char	   *group_id;
	char	   *dedup_id;
	char	   *body;
	/* from the attributes column, for the logs */
	const char *operation_id;
	const char *correlation_id;
	pf_trace_context trace;		/* the operation's (trace_id "" when it has none) */
	const char *event_type;
	pf_span		otel;			/* its publish span: from its claim to its ack or nack */
	int			n_attributes;
	pf_sqs_attribute attributes[RELAY_MAX_ATTRIBUTES];
	char	   *attribute_text[2 * RELAY_MAX_ATTRIBUTES];	/* names and values */
	size_t		size;			/* bytes it adds to a batch */
	struct relay_event *next;	/* in its destination's queue */
} relay_event;

/* Events claimed for one destination and not yet sent. */
typedef struct relay_destination
{
	const char *name;
	const char *queue_url;
	relay_event *head;
	relay_event *tail;
	int			count;
	int64_t		waiting_since_ms;	/* when the events queued now began to wait */
} relay_destination;

/* One SendMessageBatch call in flight. */
typedef struct relay_batch
{
	relay_destination *destination;
	int			n;
	relay_event *events[PF_SQS_MAX_BATCH];
	pf_span		otel;			/* the SendMessageBatch call, linked to its events' spans */
} relay_batch;

/* Acks, nacks or dead letters waiting for the database, as parallel arrays. */
typedef struct relay_outcomes
{
	int			n;
	int			cap;
	char	  **event_ids;
	char	  **texts;			/* message ids (acks) or errors (the others) */
	bool	   *call_end;		/* the last ack of a call: writing it frees the call's place */
	int64_t		oldest_ms;		/* when the oldest of them was added */
} relay_outcomes;

/* The one statement that may be running on the database connection. */
typedef struct relay_db_request
{
	bool		active;
	int			n_acks;			/* the first n of r->acks */
	int			n_nacks;
	int			n_dead;			/* the first n of r->dead */
	int			claim_max;		/* 0: no claim in it */
	int64_t		started_ms;
} relay_db_request;

typedef struct relay_stats
{
	long		claims;
	long		claimed;
	long		sent;			/* accepted by SQS */
	long		failed;			/* entries nacked */
	long		dead_lettered;	/* entries SQS refused for good */
	long		acked;			/* rows the database deleted */
	long		calls;
	long		failed_calls;
	long		statements;		/* sent to the database (claims, acks, nacks) */
} relay_stats;

typedef struct relay
{
	pf_config	cfg;
	const char *relay_id;
	pf_pg	   *pg;
	pf_aws_credentials_provider *credentials;
	pf_aws_client *aws;
	pf_sqs	   *sqs;

	int			max_in_flight;	/* SendMessageBatch calls */
	int			batch_wait_ms;	/* a partial batch waits this long for more rows */
	int			lease_seconds;
	int			in_flight;
	int			unacked_calls;	/* finished, acks not yet written: still count against the in-flight bound */
	int			queued;			/* claimed, waiting for a free call */
	int			n_destinations;
	relay_destination *destinations;

	relay_outcomes acks;
	relay_outcomes nacks;
	relay_outcomes dead;		/* refused for good: outbox_dead_letter */
	relay_db_request db;
	unsigned long prepared_generation;	/* pf_pg_generation of the connection the shapes below are prepared in */
	unsigned	prepared_shapes;
	bool		claim_wanted;	/* rows are probably waiting: claim when there is room */
	bool		backlog;		/* the last claim came back full: more rows are certainly waiting */
	int			db_failures;	/* consecutive, for the back-off */
	int64_t		db_failure_logged_ms;	/* the last of them logged (once a minute) */
	int64_t		db_retry_at_ms; /* no database call before this */

	/* a run of failed SQS calls is logged once, then summarised */
	int			sqs_failure_streak;
	int64_t		sqs_failure_logged_ms;

	relay_stats stats;
} relay;

/* outbox.c */
bool		relay_db_ready(const relay *r);
int			relay_db_socket(relay *r);
void		relay_db_send(relay *r, int claim_max);
int			relay_db_poll(relay *r);

/* outcomes.c */
void		relay_outcomes_add(relay_outcomes *o, const char *event_id, const char *text, bool call_end);
bool		relay_outcomes_due(const relay *r, int64_t now, bool stopping);
int64_t		relay_outcomes_deadline(const relay *r);
void		relay_outcomes_abandon(relay *r);
void		relay_outcomes_free(relay_outcomes *o);

/* Forget the first n outcomes (written, or given up); returns the calls they ended. */
int			relay_outcomes_drop(relay_outcomes *o, int n);

/* publish.c */
void		relay_destinations_init(relay *r);
void		relay_destinations_free(relay *r);
void		relay_accept(relay *r, relay_event *ev);
int			relay_start_batches(relay *r);
int64_t		relay_batch_deadline(const relay *r);
int			relay_busy_calls(const relay *r);
void		relay_finish_batch(relay *r, pf_aws_call *call);
void		relay_event_free(relay_event *ev);
void		relay_nack_event(relay *r, relay_event *ev, const char *error);

#endif							/* PAYFLOW_RELAY_H */
