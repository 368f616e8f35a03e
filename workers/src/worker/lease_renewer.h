/*
 * lease_renewer.h
 *		The thread that renews the database leases of claimed steps, so that
 *		the main thread's SQS renewals never wait on PostgreSQL.
 *
 * The main thread offers a round (the operation ids it holds claims for)
 * at each heartbeat tick; the renewer runs it on the worker's heartbeat
 * connection and hands back the ids whose lease was lost. A round that is
 * still running when the next tick comes is not doubled: the offer says
 * so, and the main thread counts the heartbeat as behind.
 */
#ifndef PAYFLOW_LEASE_RENEWER_H
#define PAYFLOW_LEASE_RENEWER_H

#include <stdbool.h>
#include <stdint.h>

#include "payflow/pg.h"

typedef struct lease_renewer lease_renewer;

typedef struct lease_round_result
{
	bool		finished;		/* a round finished since the last collect */
	int64_t		late_ms;		/* how long after its tick the round finished; after a failed one, since the tick of the last that worked */
	int64_t		duration_ms;	/* how long the round took */
	int			renewed;		/* steps whose lease the database renewed (or did not say, one by one) */
	char	  **lost;			/* operation ids whose lease is gone (owned by the caller) */
	int			n_lost;
	int64_t		offered_ms;		/* when the round was offered (the ids' snapshot) */
	bool		failed;			/* some chunk failed: its leases were left as they were */
} lease_round_result;

/*
 * Renews leases of step for worker_id on pg (owned by the caller, used by
 * this thread only until lease_renewer_stop); writes wake_fd (an eventfd)
 * when a round finished. NULL if the thread cannot start.
 */
lease_renewer *lease_renewer_start(pf_pg *pg, const char *step, const char *worker_id, int lease_s, int wake_fd);

/* Waits for the round in flight, then joins; NULL is fine. */
void		lease_renewer_stop(lease_renewer *r);

/* Start a round for these ids (copied); false when the last one still runs. */
bool		lease_renewer_offer(lease_renewer *r, const char *const *ids, int n, int64_t due_ms);

/* A round offered and not finished yet (false for NULL). */
bool		lease_renewer_busy(lease_renewer *r);

/* The last finished round's result, once; out->finished false when none. */
void		lease_renewer_collect(lease_renewer *r, lease_round_result *out);
void		lease_round_result_free(lease_round_result *res);

/* Ids sent per statement: a lock wait or an error costs one chunk, not every lease. */
#define LEASE_RENEW_CHUNK 100

#endif							/* PAYFLOW_LEASE_RENEWER_H */
