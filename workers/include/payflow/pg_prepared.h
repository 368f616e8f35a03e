/*
 * pg_prepared.h
 *		The statements a connection keeps prepared (pf_pg_options.prepare):
 *		each statement text is parsed and planned once per server session,
 *		not at every call.
 *
 * The edge programs run a fixed few statements (a worker's claim, completion
 * and heartbeat batches, the HTTP edge's submit), thousands of times a
 * minute. A prepared statement saves their parse and plan at each call.
 *
 * What a server session keeps is not always the client's to count on:
 *
 *	- a new connection has none: statements are prepared again for each
 *	  connection (pf_pg_generation tells them apart);
 *	- a transaction pooler (pgbouncer before 1.21, or without
 *	  max_prepared_statements) hands each statement to any server connection:
 *	  a statement missing there (26000) is prepared again and run once more,
 *	  which is safe since it never ran; after MISSES_BEFORE_UNNAMED such
 *	  misses on one connection its statements run unnamed, as they would
 *	  without this option, rather than prepare copies in every server session
 *	  of the pool;
 *	- a statement whose result columns changed under it (an extension update
 *	  replaced a function's result type: 0A000, "cached plan must not change
 *	  result type") is deallocated and run once more unnamed, then prepared
 *	  again at its next call.
 *
 * Names are "pf_" + a random 64-bit value drawn per pf_pg + "_" + the
 * statement's number: unique among clients that share a server session
 * through a pooler (containers all have PID 1), and fixed for the life of the
 * pf_pg, so a name that already exists in a session (42P05) is this
 * client's own earlier preparation of the same text.
 *
 * Statements inside an explicit transaction block run unnamed: a failure
 * there aborts the transaction, so a miss could not be mended by running
 * the statement again.
 */
#ifndef PAYFLOW_PG_PREPARED_H
#define PAYFLOW_PG_PREPARED_H

#include <stdbool.h>

#include <libpq-fe.h>

/* How many statement texts one connection prepares; others run unnamed. */
#define PF_PG_PREPARED_MAX 32

typedef struct pf_pg_prepared pf_pg_prepared;

pf_pg_prepared *pf_pg_prepared_create(void);
void		pf_pg_prepared_destroy(pf_pg_prepared *ps);

/*
 * Run sql on conn (connection number generation) with PQexecParams'
 * arguments, through its prepared statement. Returns the statement's result
 * (PQclear it), or the failed preparation's; *sent is false when the
 * statement itself never reached the server (its preparation failed), so
 * that running it again cannot run it twice.
 */
PGresult   *pf_pg_prepared_exec(pf_pg_prepared *ps, PGconn *conn, unsigned long generation, const char *sql,
								int nparams, const char *const *values, const int *lengths, const int *formats,
								int result_format, bool *sent);

#endif							/* PAYFLOW_PG_PREPARED_H */
