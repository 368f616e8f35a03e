/*
 * lease_renewer.c
 *		Database lease renewal on a thread of its own (lease_renewer.h).
 *
 * Why a thread: a renewal of a thousand leases waits on row locks held by
 * claims and completions, and on a busy server it may take seconds. On the
 * main thread that wait stopped the SQS visibility renewals too, so
 * messages came back while their calls still ran, and leases ran out into
 * second attempts (issue 31). Here a slow round only delays the next
 * round, and the main thread sees it (behind) and stops receiving.
 *
 * Why sorted chunks: payflow.heartbeat_steps updates a chunk's rows in id
 * order, as the batch claims and outcomes (batch.c) take theirs, so locks
 * are taken in one order; where another statement takes them in its
 * plan's order, the renewal's lock_timeout (500 ms, under the deadlock
 * detector's second) gives way.
 * A chunk is one statement and one transaction: its locks are held for a
 * hundred rows, not a thousand, and a chunk that fails costs only its own
 * renewals, which the next round retries (the lease outlives two missed
 * rounds: lease = visibility + max(2, v/4), a round every visibility/3).
 */
#include "lease_renewer.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "payflow/buf.h"
#include "payflow/clock.h"
#include "payflow/error.h"
#include "payflow/log.h"
#include "worker.h"

struct lease_renewer
{
	pf_pg	   *pg;
	const char *step;
	const char *worker_id;
	int			lease_s;
	int			wake_fd;
	pthread_t	thread;

	pthread_mutex_t lock;
	pthread_cond_t changed;
	bool		stop;
	/* the round offered, taken by the thread */
	char	  **ids;
	int			n_ids;
	int64_t		due_ms;
	int64_t		offered_ms;
	bool		running;		/* offered and not finished */
	int64_t		last_ok_due_ms; /* the tick of the last round with no failure */
	lease_round_result done;	/* the last finished round, until collected */
};

static int
compare_ids(const void *a, const void *b)
{
	return strcmp(*(char *const *) a, *(char *const *) b);
}

/* One chunk; lost ids appended to res. */
static void
renew_chunk(lease_renewer *r, char **ids, int n, lease_round_result *res)
{
	bool		held[LEASE_RENEW_CHUNK];
	pf_error	err;
	pf_result	rc = db_heartbeat(r->pg, (const char *const *) ids, n, r->step, r->worker_id, r->lease_s, held,
								  &err);

	if (rc != PF_OK && rc != PF_ERR_TRANSIENT)
	{
		/* one bad row (an operation purged under us) must not cost the others their lease */
		rc = PF_OK;
		for (int i = 0; i < n; i++)
			if (db_heartbeat(r->pg, (const char *const *) &ids[i], 1, r->step, r->worker_id, r->lease_s,
							 &held[i], &err) != PF_OK)
				held[i] = true; /* unknown: the step finds out when it reports */
	}
	if (rc != PF_OK)
	{
		res->failed = true;
		pf_log_warn(NULL, "lease renewal of %d step(s) failed (%s: %s); they hold for up to %d s more, "
					"the next round retries", n, err.code, err.message, r->lease_s);
		return;
	}
	for (int i = 0; i < n; i++)
	{
		if (held[i])
		{
			res->renewed++;
			continue;
		}
		res->lost = realloc(res->lost, sizeof(char *) * (size_t) (res->n_lost + 1));
		if (res->lost == NULL)
			abort();
		res->lost[res->n_lost++] = ids[i];
		ids[i] = NULL;			/* handed over */
	}
}

static void *
renewer_main(void *arg)
{
	lease_renewer *r = arg;

	pthread_mutex_lock(&r->lock);
	for (;;)
	{
		char	  **ids;
		int			n;
		int64_t		due_ms;
		int64_t		offered_ms;
		lease_round_result res;
		uint64_t	one = 1;

		while (!r->stop && r->ids == NULL)
			pthread_cond_wait(&r->changed, &r->lock);
		if (r->ids == NULL)
			break;
		ids = r->ids;
		n = r->n_ids;
		due_ms = r->due_ms;
		offered_ms = r->offered_ms;
		r->ids = NULL;
		pthread_mutex_unlock(&r->lock);

		memset(&res, 0, sizeof(res));
		res.duration_ms = pf_now_ms();
		qsort(ids, (size_t) n, sizeof(char *), compare_ids);
		for (int i = 0; i < n; i += LEASE_RENEW_CHUNK)
			renew_chunk(r, &ids[i], n - i < LEASE_RENEW_CHUNK ? n - i : LEASE_RENEW_CHUNK, &res);
		for (int i = 0; i < n; i++)
			free(ids[i]);
		free(ids);
		res.finished = true;
		res.offered_ms = offered_ms;
		res.duration_ms = pf_now_ms() - res.duration_ms;
		/* leases a failed round left alone were last renewed at the last round that worked */
		if (!res.failed || r->last_ok_due_ms == 0)
			r->last_ok_due_ms = due_ms;
		res.late_ms = pf_now_ms() - (res.failed ? r->last_ok_due_ms : due_ms);

		pthread_mutex_lock(&r->lock);
		lease_round_result_free(&r->done);	/* never collected: its news is older */
		r->done = res;
		r->running = false;
		pthread_cond_broadcast(&r->changed);
		/* if it fails, the main thread still wakes within a second */
		(void) !write(r->wake_fd, &one, sizeof(one));
	}
	pthread_mutex_unlock(&r->lock);
	return NULL;
}

lease_renewer *
lease_renewer_start(pf_pg *pg, const char *step, const char *worker_id, int lease_s, int wake_fd)
{
	lease_renewer *r = pf_calloc(1, sizeof(*r));
	pthread_attr_t attr;
	int			rc;

	r->pg = pg;
	r->step = step;
	r->worker_id = worker_id;
	r->lease_s = lease_s;
	r->wake_fd = wake_fd;
	pthread_mutex_init(&r->lock, NULL);
	pthread_cond_init(&r->changed, NULL);
	pthread_attr_init(&attr);
	/* libpq and the log: 256 KiB is plenty */
	pthread_attr_setstacksize(&attr, 256 * 1024);
	rc = pthread_create(&r->thread, &attr, renewer_main, r);
	pthread_attr_destroy(&attr);
	if (rc == 0)
		(void) pthread_setname_np(r->thread, "pf-leases");
	if (rc != 0)
	{
		pthread_mutex_destroy(&r->lock);
		pthread_cond_destroy(&r->changed);
		free(r);
		return NULL;
	}
	return r;
}

void
lease_renewer_stop(lease_renewer *r)
{
	if (r == NULL)
		return;
	pthread_mutex_lock(&r->lock);
	r->stop = true;
	pthread_cond_broadcast(&r->changed);
	pthread_mutex_unlock(&r->lock);
	pthread_join(r->thread, NULL);
	if (r->ids)
	{
		for (int i = 0; i < r->n_ids; i++)
			free(r->ids[i]);
		free(r->ids);
	}
	lease_round_result_free(&r->done);
	pthread_mutex_destroy(&r->lock);
	pthread_cond_destroy(&r->changed);
	free(r);
}

bool
lease_renewer_offer(lease_renewer *r, const char *const *ids, int n, int64_t due_ms)
{
	char	  **copy;

	pthread_mutex_lock(&r->lock);
	if (r->running)
	{
		pthread_mutex_unlock(&r->lock);
		return false;
	}
	copy = pf_calloc((size_t) n + 1, sizeof(char *));
	for (int i = 0; i < n; i++)
		copy[i] = pf_strdup(ids[i]);
	r->ids = copy;
	r->n_ids = n;
	r->due_ms = due_ms;
	r->offered_ms = pf_now_ms();
	r->running = true;
	pthread_cond_broadcast(&r->changed);
	pthread_mutex_unlock(&r->lock);
	return true;
}

bool
lease_renewer_busy(lease_renewer *r)
{
	bool		busy;

	if (r == NULL)
		return false;
	pthread_mutex_lock(&r->lock);
	busy = r->running;
	pthread_mutex_unlock(&r->lock);
	return busy;
}

void
lease_renewer_collect(lease_renewer *r, lease_round_result *out)
{
	pthread_mutex_lock(&r->lock);
	*out = r->done;
	memset(&r->done, 0, sizeof(r->done));
	pthread_mutex_unlock(&r->lock);
}

void
lease_round_result_free(lease_round_result *res)
{
	for (int i = 0; i < res->n_lost; i++)
		free(res->lost[i]);
	free(res->lost);
	memset(res, 0, sizeof(*res));
}
