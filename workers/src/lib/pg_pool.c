/*
 * pg_pool.c
 *		The connection pool of pg_pool.h.
 */
#include "payflow/pg_pool.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "payflow/backoff.h"
#include "payflow/buf.h"
#include "payflow/log.h"

struct pf_pg_pool
{
	pthread_mutex_t lock;
	pthread_cond_t freed;		/* on CLOCK_MONOTONIC */
	int			size;
	int			in_use;
	pf_pg_slot *slots;
};

pf_pg_pool *
pf_pg_pool_create(const char *conninfo, int size, const pf_pg_options *options)
{
	pf_pg_pool *pool = pf_calloc(1, sizeof(*pool));
	pthread_condattr_t attr;

	pthread_mutex_init(&pool->lock, NULL);
	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(&pool->freed, &attr);
	pthread_condattr_destroy(&attr);
	pool->size = size;
	pool->slots = pf_calloc((size_t) size, sizeof(pf_pg_slot));
	for (int i = 0; i < size; i++)
		pool->slots[i].pg = pf_pg_create(conninfo, options);
	return pool;
}

void
pf_pg_pool_destroy(pf_pg_pool *pool, void (*free_data) (void *data))
{
	if (pool == NULL)
		return;
	for (int i = 0; i < pool->size; i++)
	{
		pf_pg_destroy(pool->slots[i].pg);
		if (free_data && pool->slots[i].data)
			free_data(pool->slots[i].data);
	}
	free(pool->slots);
	pthread_cond_destroy(&pool->freed);
	pthread_mutex_destroy(&pool->lock);
	free(pool);
}

pf_pg_slot *
pf_pg_pool_acquire(pf_pg_pool *pool, int timeout_ms)
{
	struct timespec deadline;
	pf_pg_slot *found = NULL;

	pf_deadline_in(&deadline, CLOCK_MONOTONIC, timeout_ms);
	pthread_mutex_lock(&pool->lock);
	for (;;)
	{
		/* a connected slot first: a cold one costs a connection set-up */
		for (int i = 0; i < pool->size && found == NULL; i++)
			if (!pool->slots[i].busy && pf_pg_conn(pool->slots[i].pg) != NULL)
				found = &pool->slots[i];
		for (int i = 0; i < pool->size && found == NULL; i++)
			if (!pool->slots[i].busy)
				found = &pool->slots[i];
		if (found != NULL)
			break;
		if (pthread_cond_timedwait(&pool->freed, &pool->lock, &deadline) == ETIMEDOUT)
			break;
	}
	if (found != NULL)
	{
		found->busy = true;
		pool->in_use++;
	}
	pthread_mutex_unlock(&pool->lock);
	return found;
}

/*
 * libpq prints server notices and unsolicited errors ("FATAL: terminating
 * connection due to administrator command") on stderr by itself; keep the
 * log JSON lines only.
 */
static void
log_notice(void *arg, const char *message)
{
	char		line[512];

	(void) arg;
	snprintf(line, sizeof(line), "%s", message);
	line[strcspn(line, "\n")] = '\0';
	pf_log_warn(NULL, "PostgreSQL: %s", line);
}

void
pf_pg_adopt_connection(pf_pg *pg, int *backend_pid)
{
	PGconn	   *conn = pf_pg_conn(pg);

	if (conn == NULL || PQbackendPID(conn) == *backend_pid)
		return;
	*backend_pid = PQbackendPID(conn);
	PQsetNoticeProcessor(conn, log_notice, NULL);
}

void
pf_pg_pool_release(pf_pg_pool *pool, pf_pg_slot *slot)
{
	if (slot == NULL)
		return;
	/* a connection opened during this use gets the notice hook */
	pf_pg_adopt_connection(slot->pg, &slot->backend_pid);
	pthread_mutex_lock(&pool->lock);
	slot->busy = false;
	pool->in_use--;
	pthread_cond_signal(&pool->freed);
	pthread_mutex_unlock(&pool->lock);
}

void
pf_pg_pool_release_pg(pf_pg_pool *pool, pf_pg *pg)
{
	for (int i = 0; pg != NULL && i < pool->size; i++)
		if (pool->slots[i].pg == pg)
		{
			pf_pg_pool_release(pool, &pool->slots[i]);
			return;
		}
}

int
pf_pg_pool_size(const pf_pg_pool *pool)
{
	return pool->size;
}

int
pf_pg_pool_in_use(pf_pg_pool *pool)
{
	int			n;

	pthread_mutex_lock(&pool->lock);
	n = pool->in_use;
	pthread_mutex_unlock(&pool->lock);
	return n;
}
