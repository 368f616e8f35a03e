/*
 * submit_batch.h
 *		POST /payments' submits, gathered into payflow.submit_many while
 *		they wait for their turn.
 *
 * A submit's commit is most of what it costs the database: pgbench on this
 * project's machine, four clients, made 3,000 single submits a second
 * against 6,500 operations a second in submit_many calls of four (10,300 in
 * calls of eight). So all the pool's connections but one run submits at
 * once (at least one); a request that finds them all busy waits in a queue,
 * and the next one to start takes the queue's requests made with the same
 * API key along (up to 100, up to 1 MiB of details) into one submit_many
 * statement and one commit. A request that finds a free turn runs alone,
 * as it always did: nothing waits to gather while the load is light.
 *
 * The answers are those of single submits. A batch that fails as a whole
 * because of one request (submit_many is all or nothing: PF002, 22023,
 * PF011, ...) is run again request by request, so that each gets its own
 * answer; a transient failure (the connection lost, statement_timeout) is
 * every request's, as it would have been each one's. An invalid API key
 * fails the batch's requests alike (they share the key).
 *
 * Inline details only: a request whose details go to S3 (submit_ref) runs
 * alone, after its upload.
 */
#ifndef PAYFLOW_API_SUBMIT_BATCH_H
#define PAYFLOW_API_SUBMIT_BATCH_H

#include <pthread.h>
#include <stdbool.h>

#include "payflow/buf.h"
#include "payflow/error.h"

typedef struct api_context api_context;

typedef struct api_submit
{
	/* in: submit's arguments (NULL: absent) */
	const char *api_key;
	const char *payment_id;
	const char *details;		/* a JSON object's source text, NUL-terminated */
	const char *idempotency_key;
	const char *correlation_id;
	const char *priority;		/* a whole number's text */
	const char *traceparent;

	/* out, once api_submit_run returned */
	pf_result	r;
	pf_error	err;
	bool		pool_exhausted; /* no connection came free in time: 503 */
	char		operation_id[64];
	char		status[32];		/* the operation's status ("PENDING" when new) */
	int			batch_size;		/* the requests of its statement (1: alone) */

	/* the queue's (submit_batch.c) */
	pthread_cond_t wake;		/* its turn came, or its answer */
	char	   *item;			/* its submit_many item, JSON text; NULL: alone */
	bool		taken;
	bool		done;
	struct api_submit *next;
} api_submit;

typedef struct api_submits api_submits;

api_submits *api_submits_create(int pool_size);
void		api_submits_destroy(api_submits *s);

/* Submit s->payment_id with its details: alone or in a batch; the answer in s. */
void		api_submit_run(api_context *ctx, api_submit *s);

/* Its counters in Prometheus' text format, for /metrics. */
void		api_submits_render(api_submits *s, pf_buf *out);

#endif							/* PAYFLOW_API_SUBMIT_BATCH_H */
