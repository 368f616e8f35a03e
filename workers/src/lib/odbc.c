/*
 * odbc.c
 *		A cancellable ODBC connection returning the first row as JSON.
 */
#include "payflow/odbc.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sql.h>
#include <sqlext.h>

#include "payflow/buf.h"
#include "payflow/log.h"
#include "payflow/sqlstate_rules.h"

#define GET_DATA_CHUNK 1024

struct pf_odbc
{
	char	   *connection_string;
	int			login_timeout_s;
	SQLHENV		env;
	SQLHDBC		dbc;
	bool		connected;

	/* shared with pf_odbc_cancel */
	pthread_mutex_t lock;
	SQLHSTMT	running;		/* the statement being executed, or NULL */
	bool		cancelled;
};

pf_odbc *
pf_odbc_create(const char *connection_string, int login_timeout_s)
{
	pf_odbc    *odbc = pf_calloc(1, sizeof(*odbc));

	odbc->connection_string = pf_strdup(connection_string);
	odbc->login_timeout_s = login_timeout_s > 0 ? login_timeout_s : 10;
	pthread_mutex_init(&odbc->lock, NULL);
	return odbc;
}

void
pf_odbc_destroy(pf_odbc *odbc)
{
	if (odbc == NULL)
		return;
	pf_odbc_disconnect(odbc);
	if (odbc->env != SQL_NULL_HENV)
		SQLFreeHandle(SQL_HANDLE_ENV, odbc->env);
	pthread_mutex_destroy(&odbc->lock);
	free(odbc->connection_string);
	free(odbc);
}

bool
pf_odbc_connected(const pf_odbc *odbc)
{
	return odbc->connected;
}

/*
 * Fill err from the first diagnostic record of a handle. psqlODBC appends
 * its own context on further lines ("…;\nError while executing the
 * query"); the first line is the DBMS's message.
 */
static pf_result
diag_error(SQLSMALLINT handle_type, SQLHANDLE handle, const char *doing, pf_error *err)
{
	SQLCHAR		state[6] = "";
	SQLCHAR		message[1024] = "";
	SQLINTEGER	native = 0;
	SQLSMALLINT len = 0;
	char	   *text;
	size_t		n;

	if (handle == SQL_NULL_HANDLE ||
		!SQL_SUCCEEDED(SQLGetDiagRec(handle_type, handle, 1, state, &native, message, sizeof(message), &len)))
		return pf_error_set(err, PF_ERR_TRANSIENT, "HY000", "%s failed without diagnostics", doing);
	text = (char *) message;
	text[strcspn(text, "\r\n")] = '\0';
	n = strlen(text);
	while (n > 0 && (text[n - 1] == ';' || text[n - 1] == ' '))
		text[--n] = '\0';
	if (strncmp(text, "ERROR: ", 7) == 0)
		text += 7;
	pf_utf8_sanitize(text, strlen(text));
	return pf_error_set(err, pf_sqlstate_is_connection_error((char *) state) ? PF_ERR_TRANSIENT : PF_ERR_FINAL,
						(char *) state, "%s", text[0] ? text : doing);
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
		SQLSetEnvAttr(odbc->env, SQL_ATTR_ODBC_VERSION, (SQLPOINTER) SQL_OV_ODBC3, 0);
	}
	if (!SQL_SUCCEEDED(SQLAllocHandle(SQL_HANDLE_DBC, odbc->env, &odbc->dbc)))
	{
		odbc->dbc = SQL_NULL_HDBC;
		return diag_error(SQL_HANDLE_ENV, odbc->env, "allocating a connection", err);
	}
	SQLSetConnectAttr(odbc->dbc, SQL_ATTR_LOGIN_TIMEOUT, (SQLPOINTER) (intptr_t) odbc->login_timeout_s, 0);
	rc = SQLDriverConnect(odbc->dbc, NULL, (SQLCHAR *) odbc->connection_string, SQL_NTS, NULL, 0, NULL,
						  SQL_DRIVER_NOPROMPT);
	if (!SQL_SUCCEEDED(rc))
	{
		diag_error(SQL_HANDLE_DBC, odbc->dbc, "connecting", err);
		SQLFreeHandle(SQL_HANDLE_DBC, odbc->dbc);
		odbc->dbc = SQL_NULL_HDBC;
		/* a failed connect is always worth another try later */
		if (err)
			err->result = PF_ERR_TRANSIENT;
		return PF_ERR_TRANSIENT;
	}
	odbc->connected = true;
	return PF_OK;
}

void
pf_odbc_disconnect(pf_odbc *odbc)
{
	if (odbc->dbc != SQL_NULL_HDBC)
	{
		if (odbc->connected)
			SQLDisconnect(odbc->dbc);
		SQLFreeHandle(SQL_HANDLE_DBC, odbc->dbc);
	}
	odbc->dbc = SQL_NULL_HDBC;
	odbc->connected = false;
}

bool
pf_odbc_cancel(pf_odbc *odbc)
{
	bool		running;

	pthread_mutex_lock(&odbc->lock);
	odbc->cancelled = true;
	running = odbc->running != SQL_NULL_HSTMT;
	if (running)
		SQLCancel(odbc->running);
	pthread_mutex_unlock(&odbc->lock);
	return running;
}

void
pf_odbc_clear_cancel(pf_odbc *odbc)
{
	pthread_mutex_lock(&odbc->lock);
	odbc->cancelled = false;
	pthread_mutex_unlock(&odbc->lock);
}

/* Publish the statement for pf_odbc_cancel; false if a cancel came first. */
static bool
set_running(pf_odbc *odbc, SQLHSTMT stmt)
{
	bool		ok;

	pthread_mutex_lock(&odbc->lock);
	ok = stmt == SQL_NULL_HSTMT || !odbc->cancelled;
	odbc->running = ok ? stmt : SQL_NULL_HSTMT;
	pthread_mutex_unlock(&odbc->lock);
	return ok;
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

/* Read the current row into a JSON object. */
static pf_result
read_row(SQLHSTMT stmt, SQLSMALLINT ncols, json_t **row, pf_error *err)
{
	json_t	   *obj = json_object();
	pf_buf		value = PF_BUF_INIT;

	for (SQLSMALLINT col = 1; col <= ncols; col++)
	{
		SQLCHAR		name[256] = "";
		SQLSMALLINT name_len = 0;
		SQLSMALLINT type = 0;
		SQLSMALLINT digits = 0;
		SQLSMALLINT nullable = 0;
		SQLULEN		size = 0;
		bool		is_null = false;

		if (!SQL_SUCCEEDED(SQLDescribeCol(stmt, (SQLUSMALLINT) col, name, sizeof(name), &name_len, &type,
										  &size, &digits, &nullable)))
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

pf_result
pf_odbc_first_row(pf_odbc *odbc, const char *sql, int nparams, const char *const *values, int timeout_s,
				  json_t **row, pf_error *err)
{
	SQLHSTMT	stmt = SQL_NULL_HSTMT;
	SQLLEN	   *indicators = NULL;
	SQLSMALLINT ncols = 0;
	SQLRETURN	rc;
	pf_result	r = PF_OK;

	*row = NULL;
	if (pf_odbc_connect(odbc, err) != PF_OK)
		return PF_ERR_TRANSIENT;
	if (!SQL_SUCCEEDED(SQLAllocHandle(SQL_HANDLE_STMT, odbc->dbc, &stmt)))
	{
		r = diag_error(SQL_HANDLE_DBC, odbc->dbc, "allocating a statement", err);
		goto done;
	}
	if (timeout_s > 0)
		SQLSetStmtAttr(stmt, SQL_ATTR_QUERY_TIMEOUT, (SQLPOINTER) (intptr_t) timeout_s, 0);
	if (!SQL_SUCCEEDED(SQLPrepare(stmt, (SQLCHAR *) sql, SQL_NTS)))
	{
		r = diag_error(SQL_HANDLE_STMT, stmt, "preparing the statement", err);
		goto done;
	}
	indicators = pf_calloc((size_t) (nparams > 0 ? nparams : 1), sizeof(SQLLEN));
	for (int i = 0; i < nparams; i++)
	{
		const char *v = values[i];
		size_t		len = v ? strlen(v) : 0;

		indicators[i] = v ? SQL_NTS : SQL_NULL_DATA;
		if (!SQL_SUCCEEDED(SQLBindParameter(stmt, (SQLUSMALLINT) (i + 1), SQL_PARAM_INPUT, SQL_C_CHAR,
											SQL_VARCHAR, len > 0 ? len : 1, 0, (SQLPOINTER) (v ? v : ""),
											0, &indicators[i])))
		{
			r = diag_error(SQL_HANDLE_STMT, stmt, "binding a parameter", err);
			goto done;
		}
	}

	if (!set_running(odbc, stmt))
	{
		r = pf_error_set(err, PF_ERR_FINAL, "HY008", "cancelled before the call started");
		goto done;
	}
	rc = SQLExecute(stmt);
	set_running(odbc, SQL_NULL_HSTMT);
	if (!SQL_SUCCEEDED(rc) && rc != SQL_NO_DATA)
	{
		r = diag_error(SQL_HANDLE_STMT, stmt, "executing the statement", err);
		goto done;
	}
	if (rc != SQL_NO_DATA && SQL_SUCCEEDED(SQLNumResultCols(stmt, &ncols)) && ncols > 0)
	{
		rc = SQLFetch(stmt);
		if (rc != SQL_NO_DATA)
		{
			if (!SQL_SUCCEEDED(rc))
				r = diag_error(SQL_HANDLE_STMT, stmt, "fetching the first row", err);
			else
				r = read_row(stmt, ncols, row, err);
		}
		SQLCloseCursor(stmt);
	}

done:
	if (stmt != SQL_NULL_HSTMT)
		SQLFreeHandle(SQL_HANDLE_STMT, stmt);
	free(indicators);
	if (r != PF_OK && err && pf_sqlstate_is_connection_error(err->code))
		pf_odbc_disconnect(odbc);
	if (r == PF_OK)
		pf_error_clear(err);
	return r;
}
