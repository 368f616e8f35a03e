/*
 * pool.c
 *		The HTTP threads' PostgreSQL connections: pg_pool.h with the API's
 *		options; and an S3 client per HTTP thread.
 *
 * At most PAYFLOW_API_POOL_SIZE statements run at once, whatever the number
 * of clients. A request that finds every connection busy waits up to
 * PAYFLOW_API_POOL_WAIT_MS and is then answered 503 with Retry-After, so an
 * overloaded database pushes back on clients instead of queueing them
 * without limit.
 */
#include "api.h"

#include <stdlib.h>
#include <string.h>

/* An HTTP thread's S3 client, made on first use (api_thread_s3). */
typedef struct api_s3
{
	pf_aws_credentials_provider *credentials;
	pf_aws_client *aws;
	pf_s3	   *s3;
} api_s3;

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
	/* submit, status and the admin calls: a fixed few texts, parsed and planned once a connection */
	opt.prepare = true;
	return opt;
}

void
api_pool_init(api_pool *pool, const pf_config *cfg, const volatile sig_atomic_t *stop)
{
	pf_pg_options opt = api_pg_options(cfg, API_PROGNAME, stop);

	pool->pg = pf_pg_pool_create(cfg->database_url, cfg->api_pool_size, &opt);
	pool->wait_ms = cfg->api_pool_wait_ms;
}

static void
s3_free(void *data)
{
	api_s3	   *s = data;

	pf_s3_destroy(s->s3);
	pf_aws_client_destroy(s->aws);
	pf_aws_credentials_provider_destroy(s->credentials);
	free(s);
}

void
api_pool_destroy(api_pool *pool)
{
	pf_pg_pool_destroy(pool->pg, NULL);
	pool->pg = NULL;
}

api_slot *
api_pool_acquire(api_pool *pool)
{
	return pf_pg_pool_acquire(pool->pg, pool->wait_ms);
}

void
api_pool_release(api_pool *pool, api_slot *slot)
{
	pf_pg_pool_release(pool->pg, slot);
}

/*
 * Uploads run without a database connection (a slow S3 must not hold the
 * pool every endpoint needs, /readyz included), so the S3 client belongs to
 * the HTTP thread, not to a slot: made on the thread's first upload, freed
 * when the thread ends.
 */
static pthread_key_t thread_s3_key;
static pthread_once_t thread_s3_once = PTHREAD_ONCE_INIT;

static void
make_thread_s3_key(void)
{
	(void) pthread_key_create(&thread_s3_key, s3_free);
}

pf_s3 *
api_thread_s3(const pf_config *cfg, pf_error *err)
{
	api_s3	   *s;

	(void) pthread_once(&thread_s3_once, make_thread_s3_key);
	s = pthread_getspecific(thread_s3_key);
	if (s == NULL)
	{
		pf_aws_credentials_provider *credentials = pf_aws_credentials_provider_create(cfg, err);

		if (credentials == NULL)
			return NULL;
		s = pf_calloc(1, sizeof(*s));
		s->credentials = credentials;
		s->aws = pf_aws_client_create(cfg, credentials);
		s->s3 = pf_s3_create(s->aws, cfg);
		(void) pthread_setspecific(thread_s3_key, s);
	}
	return s->s3;
}
