/*
 * odbc.c
 *		A cancellable ODBC connection returning the first row as JSON, with a
 *		query time-out of its own where the driver has none.
 */
#include "payflow/odbc.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sql.h>
#include <sqlext.h>

#include "payflow/backoff.h"
#include "payflow/buf.h"
#include "payflow/log.h"
#include "payflow/sqlstate_rules.h"

#define GET_DATA_CHUNK 1024
/* the value asked for when probing a driver's time-out support */
#define PROBE_TIMEOUT_S 30
/* the timer only calls SQLCancel: a driver's cancel may open a connection */
#define TIMER_STACK_BYTES (256 * 1024)

struct pf_odbc
{
	char	   *connection_string;
	int			login_timeout_s;
	SQLHENV		env;
	SQLHDBC		dbc;
	bool		connected;
	bool		timeout_refused;	/* the driver does not enforce SQL_ATTR_QUERY_TIMEOUT */
	char		timeout_why[256];

	/* shared with pf_odbc_cancel and the timer */
	pthread_mutex_t lock;
	SQLHSTMT	running;		/* the statement being executed, or NULL */
	bool		cancelled;
	bool		cancel_failed;	/* since the running call started */
	bool		reopen;			/* close the connection after the call */
	char		operation_id[64];	/* for log lines, may be empty */
	char		event_id[64];
	char		correlation_id[128];

	/* the time-out of our own, for drivers without one */
	pthread_cond_t timer_wake;
	pthread_t	timer;
	bool		timer_started;
	bool		timer_exit;
	int64_t		deadline_ms;	/* 0: none armed */
	bool		timer_fired;	/* since the running call started */
};

static void *timer_main(void *arg);

pf_odbc *
pf_odbc_create(const char *connection_string, int login_timeout_s)
{
	pf_odbc    *odbc = pf_calloc(1, sizeof(*odbc));
	pthread_condattr_t attr;

	odbc->connection_string = pf_strdup(connection_string);
	odbc->login_timeout_s = login_timeout_s > 0 ? login_timeout_s : 10;
	pthread_mutex_init(&odbc->lock, NULL);
	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(&odbc->timer_wake, &attr);
	pthread_condattr_destroy(&attr);
	return odbc;
}

void
pf_odbc_destroy(pf_odbc *odbc)
{
	if (odbc == NULL)
		return;
	if (odbc->timer_started)
	{
		pthread_mutex_lock(&odbc->lock);
		odbc->timer_exit = true;
		pthread_cond_signal(&odbc->timer_wake);
		pthread_mutex_unlock(&odbc->lock);
		pthread_join(odbc->timer, NULL);
	}
	pf_odbc_disconnect(odbc);
	if (odbc->env != SQL_NULL_HENV)
		(void) SQLFreeHandle(SQL_HANDLE_ENV, odbc->env);
	pthread_cond_destroy(&odbc->timer_wake);
	pthread_mutex_destroy(&odbc->lock);
	free(odbc->connection_string);
	free(odbc);
}

bool
pf_odbc_connected(const pf_odbc *odbc)
{
	return odbc->connected;
}

bool
pf_odbc_timeout_refused(const pf_odbc *odbc, char *why, size_t why_len)
{
	if (why && why_len > 0)
		snprintf(why, why_len, "%s", odbc->timeout_refused ? odbc->timeout_why : "");
	return odbc->timeout_refused;
}

void
pf_odbc_set_log_ids(pf_odbc *odbc, const pf_log_ids *ids)
{
	pthread_mutex_lock(&odbc->lock);
	snprintf(odbc->operation_id, sizeof(odbc->operation_id), "%s", ids && ids->operation_id ? ids->operation_id : "");
	snprintf(odbc->event_id, sizeof(odbc->event_id), "%s", ids && ids->event_id ? ids->event_id : "");
	snprintf(odbc->correlation_id, sizeof(odbc->correlation_id), "%s",
			 ids && ids->correlation_id ? ids->correlation_id : "");
	pthread_mutex_unlock(&odbc->lock);
}

/* The log ids set last (lock held). */
static pf_log_ids
log_ids_locked(const pf_odbc *odbc)
{
	pf_log_ids	ids = {odbc->operation_id[0] ? odbc->operation_id : NULL,
		odbc->event_id[0] ? odbc->event_id : NULL,
	odbc->correlation_id[0] ? odbc->correlation_id : NULL, NULL, NULL};

	return ids;
}

/*
 * A diagnostic text without the "[vendor][driver]" prefixes ODBC drivers
 * put before the DBMS's words ("[ma-3.1.15][10.11.6-MariaDB]card declined")
 * and without psqlODBC's further lines ("…;\nError while executing the
 * query") and "ERROR: ". In place; returns the start.
 */
static char *
diag_text(char *text)
{
	size_t		n;

	text[strcspn(text, "\r\n")] = '\0';
	while (text[0] == '[' && strchr(text, ']') != NULL)
		text = strchr(text, ']') + 1;
	n = strlen(text);
	while (n > 0 && (text[n - 1] == ';' || text[n - 1] == ' '))
		text[--n] = '\0';
	if (strncmp(text, "ERROR: ", 7) == 0)
		text += 7;
	pf_utf8_sanitize(text, strlen(text));
	return text;
}

/* Fill err from the first diagnostic record of a handle. */
static pf_result
diag_error(SQLSMALLINT handle_type, SQLHANDLE handle, const char *doing, pf_error *err)
{
	SQLCHAR		state[6] = "";
	SQLCHAR		message[1024] = "";
	SQLINTEGER	native = 0;
	SQLSMALLINT len = 0;
	char	   *text;

	if (handle == SQL_NULL_HANDLE ||
		!SQL_SUCCEEDED(SQLGetDiagRec(handle_type, handle, 1, state, &native, message, sizeof(message), &len)))
		return pf_error_set(err, PF_ERR_TRANSIENT, "HY000", "%s failed without diagnostics", doing);
	text = diag_text((char *) message);
	return pf_error_set(err, pf_sqlstate_is_connection_error((char *) state) ? PF_ERR_TRANSIENT : PF_ERR_FINAL,
						(char *) state, "%s", text[0] ? text : doing);
}

/*
 * Does the driver enforce SQL_ATTR_QUERY_TIMEOUT? Asked once per
 * connection on a statement of its own: a driver that refuses the
 * attribute, answers SQL_SUCCESS_WITH_INFO (01S02, "option value changed")
 * or keeps another value is taken at its word.
 */
static void
probe_query_timeout(pf_odbc *odbc)
{
	SQLHSTMT	stmt = SQL_NULL_HSTMT;
	SQLRETURN	rc;
	SQLULEN		kept = 0;
	pf_error	err;

	odbc->timeout_refused = false;
	odbc->timeout_why[0] = '\0';
	if (!SQL_SUCCEEDED(SQLAllocHandle(SQL_HANDLE_STMT, odbc->dbc, &stmt)))
		return;					/* every call checks again */
	rc = SQLSetStmtAttr(stmt, SQL_ATTR_QUERY_TIMEOUT, (SQLPOINTER) (intptr_t) PROBE_TIMEOUT_S, 0);
	if (!SQL_SUCCEEDED(rc) || rc == SQL_SUCCESS_WITH_INFO)
	{
		diag_error(SQL_HANDLE_STMT, stmt, "setting SQL_ATTR_QUERY_TIMEOUT", &err);
		odbc->timeout_refused = true;
		snprintf(odbc->timeout_why, sizeof(odbc->timeout_why), "%.5s %.200s", err.code, err.message);
	}
	else if (SQL_SUCCEEDED(SQLGetStmtAttr(stmt, SQL_ATTR_QUERY_TIMEOUT, &kept, 0, NULL)) &&
			 kept != PROBE_TIMEOUT_S)
	{
		odbc->timeout_refused = true;
		snprintf(odbc->timeout_why, sizeof(odbc->timeout_why),
				 "asked for %d s, the driver keeps %lu", PROBE_TIMEOUT_S, (unsigned long) kept);
	}
	(void) SQLFreeHandle(SQL_HANDLE_STMT, stmt);
}

pf_result
pf_odbc_connect(pf_odbc *odbc, pf_error *err)
{
	SQLRETURN	rc;

	if (odbc->connected)
		return PF_OK;
	if (odbc->env == SQL_NULL_HENV)
	{
		if (!SQL_SUCCEEDED(SQLAllocHandle(SQL_HANDLE_ENV, SQL_NULL_HANDLE, &odbc->env)))
		{
			odbc->env = SQL_NULL_HENV;
			return pf_error_set(err, PF_ERR_TRANSIENT, "HY001", "cannot allocate an ODBC environment");
		}
		if (!SQL_SUCCEEDED(SQLSetEnvAttr(odbc->env, SQL_ATTR_ODBC_VERSION, (SQLPOINTER) SQL_OV_ODBC3, 0)))
		{
			pf_result	r = diag_error(SQL_HANDLE_ENV, odbc->env, "choosing ODBC 3 behaviour", err);

			(void) SQLFreeHandle(SQL_HANDLE_ENV, odbc->env);
			odbc->env = SQL_NULL_HENV;
			return r;
		}
	}
	if (!SQL_SUCCEEDED(SQLAllocHandle(SQL_HANDLE_DBC, odbc->env, &odbc->dbc)))
	{
		odbc->dbc = SQL_NULL_HDBC;
		return diag_error(SQL_HANDLE_ENV, odbc->env, "allocating a connection", err);
	}
	rc = SQLSetConnectAttr(odbc->dbc, SQL_ATTR_LOGIN_TIMEOUT, (SQLPOINTER) (intptr_t) odbc->login_timeout_s, 0);
	if (!SQL_SUCCEEDED(rc) || rc == SQL_SUCCESS_WITH_INFO)
	{
		pf_error	why;

		/* the worker's watchdog still bounds a connect that hangs */
		diag_error(SQL_HANDLE_DBC, odbc->dbc, "setting SQL_ATTR_LOGIN_TIMEOUT", &why);
		pf_log_debug(NULL, "the ODBC driver does not take a login time-out of %d s (%s %s)",
					 odbc->login_timeout_s, why.code, why.message);
	}
	rc = SQLDriverConnect(odbc->dbc, NULL, (SQLCHAR *) odbc->connection_string, SQL_NTS, NULL, 0, NULL,
						  SQL_DRIVER_NOPROMPT);
	if (!SQL_SUCCEEDED(rc))
	{
		diag_error(SQL_HANDLE_DBC, odbc->dbc, "connecting", err);
		(void) SQLFreeHandle(SQL_HANDLE_DBC, odbc->dbc);
		odbc->dbc = SQL_NULL_HDBC;
		/* a failed connect is always worth another try later */
		if (err)
			err->result = PF_ERR_TRANSIENT;
		return PF_ERR_TRANSIENT;
	}
	odbc->connected = true;
	probe_query_timeout(odbc);
	return PF_OK;
}

void
pf_odbc_disconnect(pf_odbc *odbc)
{
	if (odbc->dbc != SQL_NULL_HDBC)
	{
		if (odbc->connected && !SQL_SUCCEEDED(SQLDisconnect(odbc->dbc)))
			pf_log_debug(NULL, "SQLDisconnect failed; the connection handle is freed all the same");
		(void) SQLFreeHandle(SQL_HANDLE_DBC, odbc->dbc);
	}
	odbc->dbc = SQL_NULL_HDBC;
	odbc->connected = false;
}

/*
 * SQLCancel on the running statement (lock held, so the statement handle
 * stays valid; the executing thread waits for it to be returned). A
 * failure is logged and closes the connection after the call.
 */
static pf_odbc_cancel_result
cancel_locked(pf_odbc *odbc, const char *why, pf_error *err)
{
	SQLCHAR		state[6] = "";
	SQLINTEGER	native = 0;
	SQLCHAR		message[512];
	SQLSMALLINT len = 0;
	pf_log_ids	ids;

	if (odbc->running == SQL_NULL_HSTMT)
		return PF_ODBC_CANCEL_IDLE;
	if (SQL_SUCCEEDED(SQLCancel(odbc->running)))
		return PF_ODBC_CANCEL_SENT;
	/* the DBMS's words are not logged: only the code says why */
	if (!SQL_SUCCEEDED(SQLGetDiagRec(SQL_HANDLE_STMT, odbc->running, 1, state, &native, message, sizeof(message),
									 &len)))
		snprintf((char *) state, sizeof(state), "HY000");
	odbc->cancel_failed = true;
	odbc->reopen = true;
	ids = log_ids_locked(odbc);
	pf_log_write(PF_LOG_WARN, &ids, json_pack("{s:s,s:i}", "sqlstate", (char *) state, "nativeError", (int) native),
				 "SQLCancel failed while %s: the call runs on until the DBMS ends it; its connection is closed "
				 "after it", why);
	pf_error_set(err, PF_ERR_TRANSIENT, (char *) state, "SQLCancel failed (native error %d)", (int) native);
	return PF_ODBC_CANCEL_FAILED;
}

pf_odbc_cancel_result
pf_odbc_cancel(pf_odbc *odbc, pf_error *err)
{
	pf_odbc_cancel_result r;

	pthread_mutex_lock(&odbc->lock);
	odbc->cancelled = true;
	r = cancel_locked(odbc, "cancelling the call", err);
	pthread_mutex_unlock(&odbc->lock);
	return r;
}

void
pf_odbc_clear_cancel(pf_odbc *odbc)
{
	pthread_mutex_lock(&odbc->lock);
	odbc->cancelled = false;
	pthread_mutex_unlock(&odbc->lock);
}

/* The time-out of our own: cancels the running call when its deadline is reached. */
static void *
timer_main(void *arg)
{
	pf_odbc    *odbc = arg;

	pthread_mutex_lock(&odbc->lock);
	while (!odbc->timer_exit)
	{
		int64_t		now = pf_now_ms();

		if (odbc->deadline_ms == 0)
			pthread_cond_wait(&odbc->timer_wake, &odbc->lock);
		else if (now >= odbc->deadline_ms)
		{
			odbc->deadline_ms = 0;
			odbc->timer_fired = true;
			cancel_locked(odbc, "enforcing the query time-out", NULL);
		}
		else
		{
			struct timespec until;
			int64_t		wait_ms = odbc->deadline_ms - now;

			pf_deadline_in(&until, CLOCK_MONOTONIC, wait_ms);
			pthread_cond_timedwait(&odbc->timer_wake, &odbc->lock, &until);
		}
	}
	pthread_mutex_unlock(&odbc->lock);
	return NULL;
}

/* Start the timer thread once; false (logged) when it cannot be. */
static bool
timer_ready(pf_odbc *odbc)
{
	pthread_attr_t attr;
	int			rc;

	if (odbc->timer_started)
		return true;
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, TIMER_STACK_BYTES);
	rc = pthread_create(&odbc->timer, &attr, timer_main, odbc);
	pthread_attr_destroy(&attr);
	if (rc != 0)
	{
		pf_log_error(NULL, "cannot start the ODBC time-out thread (%s): only the watchdog bounds this call",
					 strerror(rc));
		return false;
	}
	odbc->timer_started = true;
	return true;
}

/*
 * Publish the statement for pf_odbc_cancel and arm our own time-out (0:
 * none); false if a cancel came first.
 */
static bool
call_begins(pf_odbc *odbc, SQLHSTMT stmt, int own_timeout_s)
{
	bool		ok;

	pthread_mutex_lock(&odbc->lock);
	ok = !odbc->cancelled;
	odbc->running = ok ? stmt : SQL_NULL_HSTMT;
	odbc->cancel_failed = false;
	odbc->timer_fired = false;
	odbc->deadline_ms = ok && own_timeout_s > 0 ? pf_now_ms() + (int64_t) own_timeout_s * 1000 : 0;
	if (odbc->deadline_ms != 0)
		pthread_cond_signal(&odbc->timer_wake);
	pthread_mutex_unlock(&odbc->lock);
	return ok;
}

/* The call returned: nothing to cancel any more; what happened meanwhile goes to info. */
static void
call_ends(pf_odbc *odbc, pf_odbc_call_info *info)
{
	pthread_mutex_lock(&odbc->lock);
	odbc->running = SQL_NULL_HSTMT;
	odbc->deadline_ms = 0;
	info->timed_out = odbc->timer_fired;
	info->cancel_failed = odbc->cancel_failed;
	pthread_mutex_unlock(&odbc->lock);
}

static json_t *
column_value(SQLSMALLINT type, const char *text)
{
	char	   *end;

	switch (type)
	{
		case SQL_INTEGER:
		case SQL_SMALLINT:
		case SQL_TINYINT:
		case SQL_BIGINT:
			{
				long long	v;

				errno = 0;
				v = strtoll(text, &end, 10);
				if (errno == 0 && end != text && *end == '\0')
					return json_integer(v);
				break;
			}
		case SQL_REAL:
		case SQL_FLOAT:
		case SQL_DOUBLE:
			{
				double		v = strtod(text, &end);

				if (end != text && *end == '\0')
					return json_real(v);
				break;
			}
		case SQL_BIT:
			if (strcmp(text, "1") == 0)
				return json_true();
			if (strcmp(text, "0") == 0)
				return json_false();
			break;
		default:
			break;
	}
	return json_string(text);
}

/* A result column's name and SQL type. */
static bool
describe_column(SQLHSTMT stmt, SQLSMALLINT col, SQLCHAR *name, SQLSMALLINT name_size, SQLSMALLINT *type)
{
	SQLSMALLINT name_len = 0;
	SQLSMALLINT digits = 0;
	SQLSMALLINT nullable = 0;
	SQLULEN		size = 0;

	return SQL_SUCCEEDED(SQLDescribeCol(stmt, (SQLUSMALLINT) col, name, name_size, &name_len, type, &size, &digits,
										&nullable));
}

/* Read the current row into a JSON object. */
static pf_result
read_row(SQLHSTMT stmt, SQLSMALLINT ncols, json_t **row, pf_error *err)
{
	json_t	   *obj = json_object();
	pf_buf		value = PF_BUF_INIT;

	for (SQLSMALLINT col = 1; col <= ncols; col++)
	{
		SQLCHAR		name[256] = "";
		SQLSMALLINT type = 0;
		bool		is_null = false;

		if (!describe_column(stmt, col, name, sizeof(name), &type))
		{
			json_decref(obj);
			pf_buf_free(&value);
			return diag_error(SQL_HANDLE_STMT, stmt, "describing a result column", err);
		}
		pf_buf_reset(&value);
		for (;;)
		{
			char		chunk[GET_DATA_CHUNK];
			SQLLEN		ind = 0;
			SQLRETURN	rc = SQLGetData(stmt, (SQLUSMALLINT) col, SQL_C_CHAR, chunk, sizeof(chunk), &ind);
			size_t		got;

			if (rc == SQL_NO_DATA)
				break;
			if (!SQL_SUCCEEDED(rc))
			{
				json_decref(obj);
				pf_buf_free(&value);
				return diag_error(SQL_HANDLE_STMT, stmt, "reading a result column", err);
			}
			if (ind == SQL_NULL_DATA)
			{
				is_null = true;
				break;
			}
			/* a truncated chunk is full but for its terminating NUL */
			got = (ind == SQL_NO_TOTAL || ind >= (SQLLEN) sizeof(chunk)) ? sizeof(chunk) - 1 : (size_t) ind;
			pf_buf_append(&value, chunk, got);
			if (rc == SQL_SUCCESS)
				break;
		}
		pf_utf8_sanitize(value.data ? value.data : (char *) "", value.len);
		pf_utf8_sanitize((char *) name, strlen((char *) name));
		json_object_set_new(obj, (char *) name, is_null ? json_null() : column_value(type, pf_buf_str(&value)));
	}
	pf_buf_free(&value);
	*row = obj;
	return PF_OK;
}

/* Bind every value as text (SQL NULL for NULL); indicators outlive the call. */
static pf_result
bind_text_params(SQLHSTMT stmt, int nparams, const char *const *values, SQLLEN *indicators, pf_error *err)
{
	for (int i = 0; i < nparams; i++)
	{
		const char *v = values[i];
		size_t		len = v ? strlen(v) : 0;

		indicators[i] = v ? SQL_NTS : SQL_NULL_DATA;
		if (!SQL_SUCCEEDED(SQLBindParameter(stmt, (SQLUSMALLINT) (i + 1), SQL_PARAM_INPUT, SQL_C_CHAR,
											SQL_VARCHAR, len > 0 ? len : 1, 0, (SQLPOINTER) (v ? v : ""),
											0, &indicators[i])))
			return diag_error(SQL_HANDLE_STMT, stmt, "binding a parameter", err);
	}
	return PF_OK;
}

/* The result of an executed statement: its first row, or NULL. */
static pf_result
fetch_first_row(pf_odbc *odbc, SQLHSTMT stmt, json_t **row, pf_error *err)
{
	SQLSMALLINT ncols = 0;
	SQLRETURN	rc;
	pf_result	r = PF_OK;

	if (!SQL_SUCCEEDED(SQLNumResultCols(stmt, &ncols)))
		return diag_error(SQL_HANDLE_STMT, stmt, "counting the result columns", err);
	if (ncols <= 0)
		return PF_OK;
	rc = SQLFetch(stmt);
	if (rc != SQL_NO_DATA)
	{
		if (!SQL_SUCCEEDED(rc))
			r = diag_error(SQL_HANDLE_STMT, stmt, "fetching the first row", err);
		else
			r = read_row(stmt, ncols, row, err);
	}
	/* the rest of the result is not wanted; a cursor that will not close may leave the session busy */
	if (!SQL_SUCCEEDED(SQLCloseCursor(stmt)) && rc != SQL_NO_DATA)
	{
		pthread_mutex_lock(&odbc->lock);
		odbc->reopen = true;
		pthread_mutex_unlock(&odbc->lock);
	}
	return r;
}

pf_result
pf_odbc_first_row(pf_odbc *odbc, const char *sql, int nparams, const char *const *values, int timeout_s,
				  json_t **row, pf_odbc_call_info *info, pf_error *err)
{
	SQLHSTMT	stmt = SQL_NULL_HSTMT;
	SQLLEN	   *indicators = NULL;
	pf_odbc_call_info local;
	int			own_timeout_s = 0;
	int64_t		started;
	SQLRETURN	rc;
	pf_result	r = PF_OK;
	bool		reopen;
	pf_log_ids	ids;

	*row = NULL;
	if (info == NULL)
		info = &local;
	memset(info, 0, sizeof(*info));
	if (pf_odbc_connect(odbc, err) != PF_OK)
		return PF_ERR_TRANSIENT;
	if (!SQL_SUCCEEDED(SQLAllocHandle(SQL_HANDLE_STMT, odbc->dbc, &stmt)))
	{
		stmt = SQL_NULL_HSTMT;
		r = diag_error(SQL_HANDLE_DBC, odbc->dbc, "allocating a statement", err);
		goto done;
	}
	if (timeout_s > 0)
	{
		rc = SQLSetStmtAttr(stmt, SQL_ATTR_QUERY_TIMEOUT, (SQLPOINTER) (intptr_t) timeout_s, 0);
		/* refused, or "option value changed": the time-out is ours to keep */
		if (odbc->timeout_refused || !SQL_SUCCEEDED(rc) || rc == SQL_SUCCESS_WITH_INFO)
			own_timeout_s = timer_ready(odbc) ? timeout_s : 0;
	}
	if (!SQL_SUCCEEDED(SQLPrepare(stmt, (SQLCHAR *) sql, SQL_NTS)))
	{
		r = diag_error(SQL_HANDLE_STMT, stmt, "preparing the statement", err);
		goto done;
	}
	indicators = pf_calloc((size_t) (nparams > 0 ? nparams : 1), sizeof(SQLLEN));
	if ((r = bind_text_params(stmt, nparams, values, indicators, err)) != PF_OK)
		goto done;

	if (!call_begins(odbc, stmt, own_timeout_s))
	{
		r = pf_error_set(err, PF_ERR_FINAL, "HY008", "cancelled before the call started");
		goto done;
	}
	info->executed = true;
	started = pf_now_ms();
	rc = SQLExecute(stmt);
	info->ms = pf_now_ms() - started;
	call_ends(odbc, info);
	if (!SQL_SUCCEEDED(rc) && rc != SQL_NO_DATA)
	{
		r = diag_error(SQL_HANDLE_STMT, stmt, "executing the statement", err);
		if (info->timed_out)
			r = pf_error_set(err, PF_ERR_TRANSIENT, "HYT00",
							 "timed out after %d s (payflow's own time-out: the driver does not enforce "
							 "SQL_ATTR_QUERY_TIMEOUT)", timeout_s);
		goto done;
	}
	info->answered = true;
	if (rc != SQL_NO_DATA)
		r = fetch_first_row(odbc, stmt, row, err);

done:
	if (stmt != SQL_NULL_HSTMT)
		(void) SQLFreeHandle(SQL_HANDLE_STMT, stmt);
	free(indicators);
	pthread_mutex_lock(&odbc->lock);
	reopen = odbc->reopen;
	odbc->reopen = false;
	ids = log_ids_locked(odbc); /* only this thread changes them */
	pthread_mutex_unlock(&odbc->lock);
	if (reopen)
	{
		pf_log_info(&ids, "closing the legacy connection after a failed cancel or an unfinished result; "
					"the next call opens a new one");
		pf_odbc_disconnect(odbc);
	}
	else if (r != PF_OK && err && pf_sqlstate_is_connection_error(err->code))
		pf_odbc_disconnect(odbc);
	if (r == PF_OK)
		pf_error_clear(err);
	return r;
}

pf_result
pf_odbc_describe(pf_odbc *odbc, const char *sql, int *ncols, char ***names, pf_error *err)
{
	SQLHSTMT	stmt = SQL_NULL_HSTMT;
	SQLSMALLINT n = 0;
	pf_result	r = PF_OK;

	*ncols = 0;
	*names = NULL;
	if (pf_odbc_connect(odbc, err) != PF_OK)
		return PF_ERR_TRANSIENT;
	if (!SQL_SUCCEEDED(SQLAllocHandle(SQL_HANDLE_STMT, odbc->dbc, &stmt)))
		return diag_error(SQL_HANDLE_DBC, odbc->dbc, "allocating a statement", err);
	if (!SQL_SUCCEEDED(SQLPrepare(stmt, (SQLCHAR *) sql, SQL_NTS)))
		r = diag_error(SQL_HANDLE_STMT, stmt, "preparing the statement", err);
	else if (!SQL_SUCCEEDED(SQLNumResultCols(stmt, &n)))
		r = diag_error(SQL_HANDLE_STMT, stmt, "counting the result columns", err);
	else if (n > 0)
	{
		*names = pf_calloc((size_t) n, sizeof(char *));
		for (SQLSMALLINT col = 1; col <= n; col++)
		{
			SQLCHAR		name[256] = "";
			SQLSMALLINT type = 0;

			if (!describe_column(stmt, col, name, sizeof(name), &type))
				name[0] = '\0';
			(*names)[col - 1] = pf_strdup((char *) name);
		}
		*ncols = n;
	}
	(void) SQLFreeHandle(SQL_HANDLE_STMT, stmt);
	if (r == PF_OK)
		pf_error_clear(err);
	return r;
}
