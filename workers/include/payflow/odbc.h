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
 * first diagnostic record: code = its SQLSTATE, message = its text. The
 * caller decides what a SQLSTATE means (sqlstate_rules.h); a connection
 * error (class 08) also closes the connection, and the next call opens a
 * new one.
 *
 * Not thread-safe except pf_odbc_cancel, which exists to be called from
 * another thread.
 */
#ifndef PAYFLOW_ODBC_H
#define PAYFLOW_ODBC_H

#include <stdbool.h>

#include <jansson.h>

#include "payflow/error.h"

typedef struct pf_odbc pf_odbc;

/* login_timeout_s bounds each connection attempt. */
pf_odbc    *pf_odbc_create(const char *connection_string, int login_timeout_s);
void		pf_odbc_destroy(pf_odbc *odbc);

/* Connect unless connected; one attempt. */
pf_result	pf_odbc_connect(pf_odbc *odbc, pf_error *err);
bool		pf_odbc_connected(const pf_odbc *odbc);
void		pf_odbc_disconnect(pf_odbc *odbc);

/*
 * Prepare and execute sql (positional '?' parameters) with values, with
 * SQL_ATTR_QUERY_TIMEOUT = timeout_s (0: none), connecting first if
 * needed. On PF_OK *row is the first row of the result as a JSON object
 * (column name -> value; integers and floats as numbers, booleans as
 * true/false, every other type, DECIMAL included, as its exact text, SQL
 * NULL as null), or NULL when the statement returned no row. The rest of
 * the result is discarded.
 */
pf_result	pf_odbc_first_row(pf_odbc *odbc, const char *sql, int nparams, const char *const *values,
							  int timeout_s, json_t **row, pf_error *err);

/*
 * From any thread: cancel the statement running now (SQLCancel), and make
 * a call that is about to start fail at once with HY008, until
 * pf_odbc_clear_cancel. Returns true if a statement was running.
 */
bool		pf_odbc_cancel(pf_odbc *odbc);
void		pf_odbc_clear_cancel(pf_odbc *odbc);

#endif							/* PAYFLOW_ODBC_H */
