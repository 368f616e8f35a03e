/*
 * pg.h
 *		A libpq connection that reconnects by itself, and one way to run SQL:
 *		parameterised statements (PQexecParams, never SQL built from strings),
 *		run again when that is safe.
 *
 * Every statement is run with a kind (pf_pg_run): what running it twice
 * would do. The kind and the failure decide whether it runs again:
 *
 *	failure								PF_PG_IDEMPOTENT	PF_PG_ONCE
 *	not connected, or the connection	reconnect, run		reconnect, run
 *	  found dead before sending
 *	class 40 (serialization failure,	run again			run again
 *	  deadlock), 55P03 (lock not
 *	  available): rolled back
 *	25006 (read-only transaction: a		reconnect, run		reconnect, run
 *	  standby, or a primary being			  again				  again
 *	  demoted): nothing was written
 *	connection lost after sending:		reconnect, run		returned at once:
 *	  it may or may not have committed	  again				  PF_ERR_TRANSIENT, 08007
 *	57014 (statement_timeout, cancel)	returned at once: PF_ERR_TRANSIENT
 *	anything else						returned at once with its SQLSTATE
 *
 * 57014 is not run again here: a statement that ran into statement_timeout
 * runs into it again, and an operator's cancel means stop. The caller's own
 * schedule (the next heartbeat, the relay's back-off, the step's retry)
 * tries later. Returned failures are PF_ERR_TRANSIENT for class 08, 40,
 * 25006, 55P03, 57014, 57P01..57P03 and 53300; PF_ERR_CHECKSUM for PF005;
 * PF_ERR_NOT_FOUND for PF003 and P0002; PF_ERR_FINAL for the rest (payflow's
 * other PF0xx domain errors, class 22 and 23, syntax and permissions).
 *
 * Every function of payflow's SQL API that the edge processes call is
 * idempotent except record_dead_letter (each call inserts a row).
 *
 * With options.prepare a statement runs as a named prepared statement of
 * its session (pg_prepared.h); one that the session lost is prepared again
 * and run once more before any of the rules above apply.
 *
 * Connections ask for a writable server (target_session_attrs=read-write,
 * unless the connection string says otherwise): with a host list
 * ("host=a,b"), libpq skips hosts it cannot reach and standbys, so a
 * program follows a failover to the promoted standby without a restart.
 * A server that turns read-only under a connection answers 25006: the
 * connection is dropped and the next one goes through the list again.
 * Failed connection attempts are logged when they start and then once a
 * minute while they go on (each attempt backs off up to backoff_cap_ms).
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
	int			max_attempts;	/* per statement, including the first; default 5 */
	int			backoff_base_ms;	/* default 100 */
	int			backoff_cap_ms; /* default 10000 */
	/* when set and non-zero, reconnect and retry loops give up at once */
	const volatile sig_atomic_t *stop;
	int			lock_timeout_ms;	/* 0: the server's setting */
	/*
	 * Prepare each statement text once per server session (pg_prepared.h),
	 * for a program whose statements are a fixed few.
	 */
	bool		prepare;
} pf_pg_options;

typedef struct pf_pg pf_pg;

/*
 * While fd (a stop_signals.h signalfd; -1: none) has a signal waiting, the
 * reconnect and retry loops give up at once, as with options.stop: for a
 * program still starting, whose main loop does not read the signals yet.
 */
void		pf_pg_watch_stop_signals(pf_pg *pg, int fd);

pf_pg	   *pf_pg_create(const char *conninfo, const pf_pg_options *options);
void		pf_pg_destroy(pf_pg *pg);

/*
 * Connect unless connected, retrying with back-off until it works or stop
 * is raised (then PF_ERR_TRANSIENT). Programs call this at start-up;
 * pf_pg_run reconnects on its own.
 */
pf_result	pf_pg_connect(pf_pg *pg, pf_error *err);

/* The live connection, or NULL. */
PGconn	   *pf_pg_conn(pf_pg *pg);

/* Drop the connection (after a fork, or to test reconnects). */
void		pf_pg_disconnect(pf_pg *pg);

/*
 * Counts the connections made so far (0: none yet). Whatever lives in a
 * server session (prepared statements) belongs to one generation: backend
 * PIDs do not tell sessions apart (a pooler, a restarted server in a fresh
 * PID namespace, PID reuse).
 */
unsigned long pf_pg_generation(const pf_pg *pg);

/* What running a statement twice would do (see the table above). */
typedef enum pf_pg_kind
{
	PF_PG_IDEMPOTENT,			/* the same as once: run again when in doubt */
	PF_PG_ONCE					/* twice (it inserts): never run again once sent */
} pf_pg_kind;

/*
 * Run a statement with text parameters (NULL values are SQL NULLs), or with
 * lengths and formats (1 = binary, e.g. bytea) and a result format. On
 * PF_OK *result (if result is not NULL) holds the PGresult: PQclear it.
 */
pf_result	pf_pg_run(pf_pg *pg, pf_pg_kind kind, const char *sql, int nparams, const char *const *values,
					  const int *lengths, const int *formats, int result_format, PGresult **result,
					  pf_error *err);

/* pf_pg_run of an idempotent statement with text parameters. */
pf_result	pf_pg_exec(pf_pg *pg, const char *sql, int nparams, const char *const *values,
					   PGresult **result, pf_error *err);

/* pf_pg_run of an idempotent statement. */
pf_result	pf_pg_exec_params(pf_pg *pg, const char *sql, int nparams, const char *const *values,
							  const int *lengths, const int *formats, int result_format,
							  PGresult **result, pf_error *err);

/* Is a failure with this SQLSTATE transient (worth trying again later)? */
bool		pf_pg_sqlstate_retryable(const char *sqlstate);

/*
 * Does pf_pg_run run a statement of this kind again at once after it failed
 * with sqlstate (NULL: no answer), lost_after_send telling whether the
 * connection broke after the statement was sent?
 */
bool		pf_pg_run_again(pf_pg_kind kind, const char *sqlstate, bool lost_after_send);

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
