/*
 * odbc.h
 *		One ODBC connection (unixODBC) to an external DBMS, for calls that may
 *		block for many minutes: a statement with text parameters, its first
 *		row as a JSON object, a query time-out, and a cancel that another
 *		thread may send while the call blocks.
 *
 * Each connection has its own ODBC environment: unixODBC serialises calls
 * per environment until the driver's threading level is known, and a
 * worker's calls must never queue behind one another.
 *
 * Every parameter is bound as SQL_C_CHAR/SQL_VARCHAR (NULL values as SQL
 * NULL); the DBMS converts them as its statement says. Errors carry the
 * first diagnostic record: code = its SQLSTATE, message = its text without
 * the "[vendor][driver]" prefixes. The caller decides what a SQLSTATE means
 * (sqlstate_rules.h); a connection error (class 08) also closes the
 * connection, and the next call opens a new one.
 *
 * Time-outs. Drivers do not all honour SQL_ATTR_QUERY_TIMEOUT: MariaDB's
 * answers 01S02 ("option value changed to default (no timeout)"). Every
 * connection asks once, right after connecting; when the driver refuses or
 * changes the value, the connection enforces the time-out itself: a timer
 * thread of its own cancels the statement (SQLCancel) when it is due, and
 * the call then fails with HYT00 unless the DBMS still answered with a row.
 *
 * Cancels. SQLCancel may fail (MariaDB refuses the KILL QUERY behind it
 * while a procedure runs as its definer) or hang (its connection to the
 * server does). A failed cancel is logged; the call goes on until the DBMS
 * ends it, and is reported with cancel_failed; the connection is closed
 * after it, since the DBMS session may be in any state (and a late KILL
 * could hit the next statement).
 *
 * Not thread-safe except pf_odbc_cancel, which exists to be called from
 * another thread.
 */
#ifndef PAYFLOW_ODBC_H
#define PAYFLOW_ODBC_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "payflow/error.h"
#include "payflow/log.h"

typedef struct pf_odbc pf_odbc;

/* login_timeout_s bounds each connection attempt. */
pf_odbc    *pf_odbc_create(const char *connection_string, int login_timeout_s);
void		pf_odbc_destroy(pf_odbc *odbc);

/* Connect unless connected; one attempt. */
pf_result	pf_odbc_connect(pf_odbc *odbc, pf_error *err);
bool		pf_odbc_connected(const pf_odbc *odbc);
void		pf_odbc_disconnect(pf_odbc *odbc);

/*
 * After a connect: true when the driver does not enforce
 * SQL_ATTR_QUERY_TIMEOUT, with its words in why (payflow enforces it then).
 */
bool		pf_odbc_timeout_refused(const pf_odbc *odbc, char *why, size_t why_len);

/* The ids of the operation whose calls follow, for the connection's own log lines (copied; NULL: none). */
void		pf_odbc_set_log_ids(pf_odbc *odbc, const pf_log_ids *ids);

/* What became of a call besides its result. */
typedef struct pf_odbc_call_info
{
	bool		executed;		/* SQLExecute was called: the DBMS may have acted */
	bool		answered;		/* ... and returned success: a failure after it (reading the row) comes after the DBMS did its work */
	bool		timed_out;		/* payflow's own time-out cancelled it */
	bool		cancel_failed;	/* a cancel was refused or failed: the call ran on until the DBMS ended it */
	int64_t		ms;				/* how long SQLExecute took */
} pf_odbc_call_info;

/*
 * Prepare and execute sql (positional '?' parameters) with values, with a
 * query time-out of timeout_s (0: none), connecting first if needed. On
 * PF_OK *row is the first row of the result as a JSON object (column name
 * -> value; integers and floats as numbers, booleans as true/false, every
 * other type, DECIMAL included, as its exact text, SQL NULL as null), or
 * NULL when the statement returned no row. The rest of the result is
 * discarded. info (may be NULL) says how the call went.
 */
pf_result	pf_odbc_first_row(pf_odbc *odbc, const char *sql, int nparams, const char *const *values,
							  int timeout_s, json_t **row, pf_odbc_call_info *info, pf_error *err);

/*
 * Prepare sql without executing it and say what the driver knows of its
 * result: *ncols columns (0: the driver says it returns no result set, or
 * cannot tell before executing it, as for procedure calls), their names in
 * *names (*ncols strings, the caller frees each and the array).
 */
pf_result	pf_odbc_describe(pf_odbc *odbc, const char *sql, int *ncols, char ***names, pf_error *err);

typedef enum pf_odbc_cancel_result
{
	PF_ODBC_CANCEL_IDLE,		/* no statement was running */
	PF_ODBC_CANCEL_SENT,		/* SQLCancel accepted it */
	PF_ODBC_CANCEL_FAILED		/* SQLCancel failed: err says why */
} pf_odbc_cancel_result;

/*
 * From any thread: cancel the statement running now (SQLCancel), and make
 * a call that is about to start fail at once with HY008, until
 * pf_odbc_clear_cancel. May block as long as the driver's SQLCancel does.
 */
pf_odbc_cancel_result pf_odbc_cancel(pf_odbc *odbc, pf_error *err);
void		pf_odbc_clear_cancel(pf_odbc *odbc);

#endif							/* PAYFLOW_ODBC_H */
