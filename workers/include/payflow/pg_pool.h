/*
 * pg_pool.h
 *		A fixed number of PostgreSQL connections shared by a program's
 *		threads: the worker's executors and the API's HTTP threads.
 *
 * The pool bounds what a program can ask of the database: at most size
 * statements at once, whatever the number of threads. A thread that finds
 * every connection busy waits up to the timeout it gives and is then told
 * so (NULL), so that an overloaded database pushes back instead of
 * queueing work without limit. Connections open on first use and reopen
 * by themselves (pg.c); a connected slot is handed out before a cold one.
 * Server notices and unsolicited errors of every connection go to the JSON
 * log instead of libpq's own lines on stderr.
 */
#ifndef PAYFLOW_PG_POOL_H
#define PAYFLOW_PG_POOL_H

#include <stdbool.h>

#include "payflow/pg.h"

/* One connection and what the program keeps beside it. */
typedef struct pf_pg_slot
{
	pf_pg	   *pg;
	void	   *data;			/* the program's, per connection (the API's S3 client) */
	/* the pool's own */
	bool		busy;
	int			backend_pid;	/* of the connection given the notice hook */
} pf_pg_slot;

typedef struct pf_pg_pool pf_pg_pool;

pf_pg_pool *pf_pg_pool_create(const char *conninfo, int size, const pf_pg_options *options);

/* free_data (may be NULL) is called for every slot's data. */
void		pf_pg_pool_destroy(pf_pg_pool *pool, void (*free_data) (void *data));

/* A free slot, or NULL when none came free within timeout_ms. */
pf_pg_slot *pf_pg_pool_acquire(pf_pg_pool *pool, int timeout_ms);
void		pf_pg_pool_release(pf_pg_pool *pool, pf_pg_slot *slot);

/* The same for a caller that kept only the slot's connection. */
void		pf_pg_pool_release_pg(pf_pg_pool *pool, pf_pg *pg);
int			pf_pg_pool_size(const pf_pg_pool *pool);
int			pf_pg_pool_in_use(pf_pg_pool *pool);

/* Route a connection's notices to the JSON log (once per backend: *backend_pid remembers it). */
void		pf_pg_adopt_connection(pf_pg *pg, int *backend_pid);

#endif							/* PAYFLOW_PG_POOL_H */
