/*
 * receive_pacing.h
 *		When a worker's next receive goes, for a steady flow of messages.
 *
 * A long poll returns as soon as one message is there, so a queue fed at a
 * few hundred messages a second was read one or two at a time: a receive,
 * a claim, a completion and a delete per message (the pipeline bench
 * measured claims of 1.3 steps). The pacing keeps the recent arrival rate
 * (messages received per second, over windows of ARRIVAL_WINDOW_MS,
 * smoothed); when
 * that rate brings at least two messages within the wait
 * (PAYFLOW_SQS_BATCH_WAIT_MS), the next receive waits after the last one
 * for the time the rate takes to bring a full batch, at most the wait. The
 * messages wait in the queue meanwhile, not in the worker. Sparser traffic
 * is received at once: latency comes first.
 */
#ifndef PAYFLOW_WORKER_RECEIVE_PACING_H
#define PAYFLOW_WORKER_RECEIVE_PACING_H

#include <stdint.h>

#define ARRIVAL_WINDOW_MS 250

typedef struct receive_pacing
{
	int64_t		ended_ms;		/* when the last receive was answered; 0: none yet */
	int64_t		window_since_ms;	/* start of the window counted counts in */
	int			counted;		/* messages received since then */
	double		per_s;			/* messages per second, recent windows (EWMA) */
} receive_pacing;

/* A receive was answered at now_ms with n messages. */
void		receive_pacing_note(receive_pacing *p, int n, int64_t now_ms);

/*
 * When the next receive, for a batch of `full` messages, may go at the
 * earliest: 0 when at once (sparse traffic, or no wait configured).
 */
int64_t		receive_pacing_not_before(const receive_pacing *p, int full, int wait_ms);

#endif							/* PAYFLOW_WORKER_RECEIVE_PACING_H */
