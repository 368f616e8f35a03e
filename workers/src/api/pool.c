/*
 * pool.c
 *		A fixed number of PostgreSQL connections shared by the HTTP threads.
 *
 * The pool bounds what the API can ask of the database: at most
 * PAYFLOW_API_POOL_SIZE statements run at once, whatever the number of
 * clients. A request that finds every connection busy waits up to
 * PAYFLOW_API_POOL_WAIT_MS and is then answered 503 with Retry-After, so an
 * overloaded database pushes back on clients instead of queueing them
 * without limit. Connections open lazily and reopen by themselves (pg.c).
 */
#include "api.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

pf_pg_options
api_pg_options(const pf_config *cfg, const char *application_name, const volatile sig_atomic_t *stop)
{
	pf_pg_options opt;

	memset(&opt, 0, sizeof(opt));
	opt.application_name = application_name;
	/* a client waits on us: fail fast and let it retry, rather than hang */
	opt.connect_timeout_s = 2;
	opt.statement_timeout_ms = cfg->api_statement_timeout_ms;
	opt.max_attempts = 2;
	opt.backoff_base_ms = 50;
	opt.backoff_cap_ms = 200;
	opt.stop = stop;
	return opt;
}

void
api_pool_init(api_pool *pool, const pf_config *cfg, const volatile sig_atomic_t *stop)
{
	pthread_condattr_t attr;
	pf_pg_options opt = api_pg_options(cfg, API_PROGNAME, stop);

	memset(pool, 0, sizeof(*pool));
	pthread_mutex_init(&pool->lock, NULL);
	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(&pool->freed, &attr);
	pthread_condattr_destroy(&attr);
	pool->cfg = cfg;
	pool->size = cfg->api_pool_size;
	pool->wait_ms = cfg->api_pool_wait_ms;
	pool->slots = pf_calloc((size_t) pool->size, sizeof(api_slot));
	for (int i = 0; i < pool->size; i++)
		pool->slots[i].pg = pf_pg_create(cfg->database_url, &opt);
}

void
api_pool_destroy(api_pool *pool)
{
	for (int i = 0; i < pool->size; i++)
	{
		api_slot   *s = &pool->slots[i];

		pf_pg_destroy(s->pg);
		pf_s3_destroy(s->s3);
		pf_aws_client_destroy(s->aws);
		pf_aws_credentials_provider_destroy(s->credentials);
	}
	free(pool->slots);
	pthread_cond_destroy(&pool->freed);
	pthread_mutex_destroy(&pool->lock);
}

api_slot *
api_pool_acquire(api_pool *pool)
{
	struct timespec deadline;
	api_slot   *found = NULL;

	clock_gettime(CLOCK_MONOTONIC, &deadline);
	deadline.tv_sec += pool->wait_ms / 1000;
	deadline.tv_nsec += (long) (pool->wait_ms % 1000) * 1000000L;
	if (deadline.tv_nsec >= 1000000000L)
	{
		deadline.tv_sec++;
		deadline.tv_nsec -= 1000000000L;
	}

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
api_adopt_connection(pf_pg *pg, int *backend_pid)
{
	PGconn	   *conn = pf_pg_conn(pg);

	if (conn == NULL || PQbackendPID(conn) == *backend_pid)
		return;
	*backend_pid = PQbackendPID(conn);
	PQsetNoticeProcessor(conn, log_notice, NULL);
}

void
api_pool_release(api_pool *pool, api_slot *slot)
{
	/* a connection opened during this use gets the notice hook */
	api_adopt_connection(slot->pg, &slot->backend_pid);
	pthread_mutex_lock(&pool->lock);
	slot->busy = false;
	pool->in_use--;
	pthread_cond_signal(&pool->freed);
	pthread_mutex_unlock(&pool->lock);
}

pf_s3 *
api_slot_s3(api_slot *slot, const pf_config *cfg, pf_error *err)
{
	if (slot->s3 == NULL)
	{
		slot->credentials = pf_aws_credentials_provider_create(cfg, err);
		if (slot->credentials == NULL)
			return NULL;
		slot->aws = pf_aws_client_create(cfg, slot->credentials);
		slot->s3 = pf_s3_create(slot->aws, cfg);
	}
	return slot->s3;
}
