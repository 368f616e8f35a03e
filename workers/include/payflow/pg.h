/*
 * pg.h
 *		A libpq connection that reconnects by itself, and one way to run SQL:
 *		parameterised statements (PQexecParams, never SQL built from strings),
 *		retried when the failure is transient.
 *
 * Retried: SQLSTATE class 40 (serialization failure, deadlock), 55P03 (lock
 * not available), 57014 (query canceled, e.g. statement_timeout), class 08
 * and any lost connection, 57P01..57P03 (admin/crash shutdown, cannot
 * connect now), 53300 (too many connections). Everything else is final and
 * handed back with its SQLSTATE and message: payflow's PF0xx domain errors,
 * class 22 (data exception) and 23 (integrity constraint), syntax and
 * permission errors.
 *
 * A retried statement runs again from the start, so use this for single
 * autocommit statements that are idempotent, which every function of
 * payflow's SQL API is.
 */
#ifndef PAYFLOW_PG_H
#define PAYFLOW_PG_H

#include <signal.h>
#include <stdbool.h>

#include <libpq-fe.h>

#include "payflow/error.h"

typedef struct pf_pg_options
{
	const char *application_name;	/* shown in pg_stat_activity */
	int			connect_timeout_s;	/* per attempt; default 10 */
	int			statement_timeout_ms;	/* 0: the server's setting */
	int			max_attempts;	/* per statement, including the first;
								 * default 5 */
	int			backoff_base_ms;	/* default 100 */
	int			backoff_cap_ms; /* default 10000 */
	/* when set and non-zero, reconnect and retry loops give up at once */
	const volatile sig_atomic_t *stop;
} pf_pg_options;

typedef struct pf_pg pf_pg;

pf_pg	   *pf_pg_create(const char *conninfo, const pf_pg_options *options);
void		pf_pg_destroy(pf_pg *pg);

/*
 * Connect unless connected, retrying with back-off until it works or stop
 * is raised (then PF_ERR_TRANSIENT). Programs call this at start-up; the
 * exec functions reconnect on their own.
 */
pf_result	pf_pg_connect(pf_pg *pg, pf_error *err);
/* The live connection, or NULL. */
PGconn	   *pf_pg_conn(pf_pg *pg);
/* Drop the connection (after a fork, or to test reconnects). */
void		pf_pg_disconnect(pf_pg *pg);

/*
 * Run a statement with text parameters (NULL values are SQL NULLs). On
 * PF_OK *result (if result is not NULL) holds the PGresult: PQclear it.
 */
pf_result	pf_pg_exec(pf_pg *pg, const char *sql, int nparams, const char *const *values,
					   PGresult **result, pf_error *err);

/* The same with lengths and formats (1 = binary, e.g. bytea) and a result format. */
pf_result	pf_pg_exec_params(pf_pg *pg, const char *sql, int nparams, const char *const *values,
							  const int *lengths, const int *formats, int result_format,
							  PGresult **result, pf_error *err);

/* Is a statement that failed with this SQLSTATE worth running again? */
bool		pf_pg_sqlstate_retryable(const char *sqlstate);
/* The pf_result a final SQLSTATE maps to (PF005 -> PF_ERR_CHECKSUM, ...). */
pf_result	pf_pg_sqlstate_result(const char *sqlstate);

/*
 * LISTEN on a channel; remembered and re-issued after every reconnect so a
 * relay never silently stops hearing wake-ups.
 */
pf_result	pf_pg_listen(pf_pg *pg, const char *channel, pf_error *err);
/* The socket to poll() for notifications, or -1 when disconnected. */
int			pf_pg_socket(pf_pg *pg);
/*
 * Read what arrived on the socket and count notifications (any channel).
 * A lost connection is reported as PF_ERR_TRANSIENT; the next exec or
 * pf_pg_connect reconnects.
 */
pf_result	pf_pg_take_notifications(pf_pg *pg, int *count, pf_error *err);

#endif							/* PAYFLOW_PG_H */
