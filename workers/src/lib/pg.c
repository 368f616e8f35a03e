/*
 * pg.c
 *		Reconnecting libpq connection and parameterised statements, run again
 *		when their kind and failure allow it (the table in pg.h).
 */
#include "payflow/pg.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "payflow/backoff.h"
#include "payflow/buf.h"
#include "payflow/clock.h"
#include "payflow/log.h"
#include "payflow/pg_prepared.h"
#include "payflow/stop_signals.h"

#define MAX_CHANNELS 8
/* How often failed connection attempts that go on are logged. */
#define CONNECT_FAILURE_LOG_MS 60000

struct pf_pg
{
	char	   *conninfo;
	pf_pg_options opt;
	char	   *application_name;
	PGconn	   *conn;
	unsigned long generation;	/* connections made */
	int			connect_failures;	/* consecutive, for the back-off */
	int64_t		connect_failure_logged_ms;	/* pf_now_ms of the last warning of them */
	int			n_channels;
	char	   *channels[MAX_CHANNELS];
	int			stop_signals_fd;	/* pf_pg_watch_stop_signals; -1: none */
	pf_pg_prepared *prepared;	/* options.prepare; NULL: every statement unnamed */
};

pf_pg *
pf_pg_create(const char *conninfo, const pf_pg_options *options)
{
	pf_pg	   *pg = pf_calloc(1, sizeof(*pg));

	pg->conninfo = pf_strdup(conninfo);
	pg->stop_signals_fd = -1;
	if (options)
		pg->opt = *options;
	pg->application_name = pf_strdup(pg->opt.application_name ? pg->opt.application_name : "payflow");
	if (pg->opt.connect_timeout_s <= 0)
		pg->opt.connect_timeout_s = 10;
	if (pg->opt.max_attempts <= 0)
		pg->opt.max_attempts = 5;
	if (pg->opt.backoff_base_ms <= 0)
		pg->opt.backoff_base_ms = 100;
	if (pg->opt.backoff_cap_ms <= 0)
		pg->opt.backoff_cap_ms = 10000;
	if (pg->opt.prepare)
		pg->prepared = pf_pg_prepared_create();
	return pg;
}

void
pf_pg_destroy(pf_pg *pg)
{
	if (pg == NULL)
		return;
	pf_pg_disconnect(pg);
	for (int i = 0; i < pg->n_channels; i++)
		free(pg->channels[i]);
	pf_pg_prepared_destroy(pg->prepared);
	free(pg->conninfo);
	free(pg->application_name);
	free(pg);
}

void
pf_pg_disconnect(pf_pg *pg)
{
	if (pg->conn)
		PQfinish(pg->conn);
	pg->conn = NULL;
}

PGconn *
pf_pg_conn(pf_pg *pg)
{
	return pg->conn;
}

unsigned long
pf_pg_generation(const pf_pg *pg)
{
	return pg->generation;
}

static bool
stopping(const pf_pg *pg)
{
	return (pg->opt.stop != NULL && *pg->opt.stop != 0) || pf_stop_signals_pending(pg->stop_signals_fd);
}

void
pf_pg_watch_stop_signals(pf_pg *pg, int fd)
{
	pg->stop_signals_fd = fd;
}

bool
pf_pg_sqlstate_retryable(const char *sqlstate)
{
	if (sqlstate == NULL || strlen(sqlstate) != 5)
		return true;			/* no SQLSTATE: the connection broke */
	return strncmp(sqlstate, "40", 2) == 0 ||	/* transaction rollback */
		strncmp(sqlstate, "08", 2) == 0 ||	/* connection exception */
		strcmp(sqlstate, "55P03") == 0 ||	/* lock_not_available */
		strcmp(sqlstate, "25006") == 0 ||	/* read_only_sql_transaction */
		strcmp(sqlstate, "57014") == 0 ||	/* query_canceled */
		strcmp(sqlstate, "57P01") == 0 ||	/* admin_shutdown */
		strcmp(sqlstate, "57P02") == 0 ||	/* crash_shutdown */
		strcmp(sqlstate, "57P03") == 0 ||	/* cannot_connect_now */
		strcmp(sqlstate, "53300") == 0; /* too_many_connections */
}

/*
 * Failures whose statement certainly did not take effect and may well work
 * next time.  A read-only server wrote nothing; the next connection finds
 * the writable one.
 */
static bool
rolled_back_and_worth_again(const char *sqlstate)
{
	return strncmp(sqlstate, "40", 2) == 0 ||	/* serialization failure, deadlock */
		strcmp(sqlstate, "55P03") == 0 ||	/* lock_not_available */
		strcmp(sqlstate, "25006") == 0; /* read_only_sql_transaction */
}

/*
 * A failed connection attempt: the first of a run is logged, then one a
 * minute with how many failed meanwhile (a host list that is all down
 * retries every backoff_cap_ms, for as long as it takes).
 */
static void
log_connect_failure(pf_pg *pg, const char *message)
{
	if (!pf_log_throttled(pg->connect_failures == 0, &pg->connect_failure_logged_ms, pf_now_ms(),
						  CONNECT_FAILURE_LOG_MS))
		return;
	if (pg->connect_failures == 0)
		pf_log_warn(NULL, "%s; retrying with back-off", message);
	else
		pf_log_warn(NULL, "%s (%d failed attempts so far; still retrying)", message, pg->connect_failures + 1);
}

bool
pf_pg_run_again(pf_pg_kind kind, const char *sqlstate, bool lost_after_send)
{
	if (lost_after_send)
		return kind == PF_PG_IDEMPOTENT;
	return sqlstate != NULL && strlen(sqlstate) == 5 && rolled_back_and_worth_again(sqlstate);
}

pf_result
pf_pg_sqlstate_result(const char *sqlstate)
{
	if (sqlstate == NULL || pf_pg_sqlstate_retryable(sqlstate))
		return PF_ERR_TRANSIENT;
	if (strcmp(sqlstate, "PF005") == 0)
		return PF_ERR_CHECKSUM;
	if (strcmp(sqlstate, "PF003") == 0 || strcmp(sqlstate, "P0002") == 0)
		return PF_ERR_NOT_FOUND;
	return PF_ERR_FINAL;
}

/* SET name = ms for this session (set_config: the value is a bound parameter). */
static pf_result
set_timeout(pf_pg *pg, const char *name, int ms, pf_error *err)
{
	char		value[32];
	const char *values[2] = {name, value};
	PGresult   *res;

	snprintf(value, sizeof(value), "%d", ms);
	res = PQexecParams(pg->conn, "SELECT pg_catalog.set_config($1, $2, false)", 2, NULL, values, NULL, NULL, 0);
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
	{
		pf_error_set(err, PF_ERR_TRANSIENT, PQresultErrorField(res, PG_DIAG_SQLSTATE), "setting %s: %s", name,
					 PQerrorMessage(pg->conn));
		PQclear(res);
		return PF_ERR_TRANSIENT;
	}
	PQclear(res);
	return PF_OK;
}

static pf_result
exec_setup(pf_pg *pg, pf_error *err)
{
	if (pg->opt.statement_timeout_ms > 0 &&
		set_timeout(pg, "statement_timeout", pg->opt.statement_timeout_ms, err) != PF_OK)
		return PF_ERR_TRANSIENT;
	if (pg->opt.lock_timeout_ms > 0 && set_timeout(pg, "lock_timeout", pg->opt.lock_timeout_ms, err) != PF_OK)
		return PF_ERR_TRANSIENT;
	for (int i = 0; i < pg->n_channels; i++)
	{
		/* LISTEN takes no parameters; the channel is a quoted identifier */
		char	   *ident = PQescapeIdentifier(pg->conn, pg->channels[i], strlen(pg->channels[i]));
		pf_buf		sql = PF_BUF_INIT;
		PGresult   *res;
		bool		ok;

		if (ident == NULL)
			return pf_error_set(err, PF_ERR_TRANSIENT, "08000", "escaping a channel name failed");
		pf_buf_appendf(&sql, "LISTEN %s", ident);
		PQfreemem(ident);
		res = PQexec(pg->conn, sql.data);
		ok = PQresultStatus(res) == PGRES_COMMAND_OK;
		PQclear(res);
		pf_buf_free(&sql);
		if (!ok)
			return pf_error_set(err, PF_ERR_TRANSIENT, "08000", "LISTEN failed: %s", PQerrorMessage(pg->conn));
	}
	return PF_OK;
}

/* One connection attempt. */
static pf_result
connect_once(pf_pg *pg, pf_error *err)
{
	char		timeout[16];

	/* ours first, so the same settings in the connection string win */
	const char *keywords[] = {"connect_timeout", "application_name", "keepalives", "keepalives_idle",
	"keepalives_interval", "keepalives_count", "target_session_attrs", "dbname", NULL};
	const char *values[] = {timeout, pg->application_name, "1", "30", "10", "3", "read-write", pg->conninfo, NULL};

	snprintf(timeout, sizeof(timeout), "%d", pg->opt.connect_timeout_s);
	pf_pg_disconnect(pg);
	pg->conn = PQconnectdbParams(keywords, values, 1);
	if (pg->conn == NULL || PQstatus(pg->conn) != CONNECTION_OK)
	{
		char		msg[400];

		snprintf(msg, sizeof(msg), "%s", pg->conn ? PQerrorMessage(pg->conn) : "out of memory");
		msg[strcspn(msg, "\n")] = '\0';
		pf_pg_disconnect(pg);
		return pf_error_set(err, PF_ERR_TRANSIENT, "08001", "cannot connect to PostgreSQL: %s", msg);
	}
	if (exec_setup(pg, err) != PF_OK)
	{
		pf_pg_disconnect(pg);
		return PF_ERR_TRANSIENT;
	}
	pg->generation++;
	return PF_OK;
}

/*
 * Is the connection usable for the next statement? An idle connection the
 * server closed (a restart, idle_session_timeout, pg_terminate_backend) is
 * found out here, by reading what is already on the socket, before a
 * statement is sent on it: then even a statement that must not run twice
 * can be run on a new connection, since it never reached the old one.
 */
static bool
alive(pf_pg *pg)
{
	if (pg->conn == NULL || PQstatus(pg->conn) != CONNECTION_OK)
		return false;
	if (PQtransactionStatus(pg->conn) != PQTRANS_IDLE)
		return true;
	/* a few reads: the server's last words (FATAL: terminating ...) come before the end of the stream */
	for (int i = 0; i < 4; i++)
	{
		struct pollfd p = {PQsocket(pg->conn), POLLIN, 0};

		if (poll(&p, 1, 0) <= 0)
			break;
		if (!PQconsumeInput(pg->conn) || PQstatus(pg->conn) != CONNECTION_OK)
		{
			char		why[256];

			snprintf(why, sizeof(why), "%s", PQerrorMessage(pg->conn));
			why[strcspn(why, "\n")] = '\0';
			pf_log_info(NULL, "the idle PostgreSQL connection was closed (%s); reconnecting", why);
			pf_pg_disconnect(pg);
			return false;
		}
	}
	return true;
}

pf_result
pf_pg_connect(pf_pg *pg, pf_error *err)
{
	while (pg->conn == NULL || PQstatus(pg->conn) != CONNECTION_OK)
	{
		if (stopping(pg))
			return pf_error_set(err, PF_ERR_TRANSIENT, "57P01", "shutting down");
		if (connect_once(pg, err) == PF_OK)
		{
			if (pg->connect_failures > 0)
				pf_log_info(NULL, "connected to PostgreSQL after %d failed attempt(s)", pg->connect_failures);
			pg->connect_failures = 0;
			break;
		}
		log_connect_failure(pg, err ? err->message : "cannot connect to PostgreSQL");
		pf_sleep_ms(pf_backoff_ms(pg->connect_failures++, pg->opt.backoff_base_ms, pg->opt.backoff_cap_ms));
	}
	return PF_OK;
}

pf_result
pf_pg_run(pf_pg *pg, pf_pg_kind kind, const char *sql, int nparams, const char *const *values,
		  const int *lengths, const int *formats, int result_format, PGresult **result, pf_error *err)
{
	pf_error	last;

	if (result)
		*result = NULL;
	pf_error_set(&last, PF_ERR_TRANSIENT, "08006", "no attempt made");
	for (int attempt = 0; attempt < pg->opt.max_attempts; attempt++)
	{
		PGresult   *res;
		ExecStatusType st;
		const char *sqlstate;
		bool		lost;
		bool		sent = true;

		if (attempt > 0)
			pf_sleep_ms(pf_backoff_ms(attempt - 1, pg->opt.backoff_base_ms, pg->opt.backoff_cap_ms));
		if (stopping(pg))
			break;
		if (!alive(pg))
		{
			if (connect_once(pg, &last) != PF_OK)
			{
				log_connect_failure(pg, last.message);
				pg->connect_failures++;
				continue;
			}
			pg->connect_failures = 0;
		}

		if (pg->prepared)
			res = pf_pg_prepared_exec(pg->prepared, pg->conn, pg->generation, sql, nparams, values, lengths,
									  formats, result_format, &sent);
		else
			res = PQexecParams(pg->conn, sql, nparams, NULL, values, lengths, formats, result_format);
		st = PQresultStatus(res);
		if (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK)
		{
			if (result)
				*result = res;
			else
				PQclear(res);
			pf_error_clear(err);
			return PF_OK;
		}

		sqlstate = PQresultErrorField(res, PG_DIAG_SQLSTATE);
		{
			const char *primary = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
			char		msg[400];

			snprintf(msg, sizeof(msg), "%s", primary ? primary : PQerrorMessage(pg->conn));
			msg[strcspn(msg, "\n")] = '\0';
			/* no SQLSTATE: the connection broke before an answer came */
			pf_error_set(&last, PF_ERR_TRANSIENT, sqlstate ? sqlstate : "08006", "%s", msg);
		}
		PQclear(res);			/* sqlstate points into res: use last.code below */

		lost = PQstatus(pg->conn) != CONNECTION_OK;
		if (lost)
		{
			pf_log_warn(NULL, "PostgreSQL connection lost: %s", last.message);
			pf_pg_disconnect(pg);
			/* lost while preparing it: the statement never ran, so it may run on the next connection */
			if (!sent)
				continue;
		}
		else if (strcmp(last.code, "25006") == 0)
		{
			/* a standby, or a primary being demoted: find the writable host */
			pf_log_warn(NULL, "the PostgreSQL server is read-only (%s); reconnecting", last.message);
			pf_pg_disconnect(pg);
		}
		if (!pf_pg_run_again(kind, last.code, lost))
		{
			if (lost)
			{
				char		why[sizeof(last.message)];

				/* it may have committed before the connection broke */
				snprintf(why, sizeof(why), "%s", last.message);
				pf_error_set(&last, PF_ERR_TRANSIENT, "08007",
							 "the connection was lost while the statement ran (%s): it may or may not "
							 "have taken effect, and it is not run again", why);
			}
			else
				last.result = pf_pg_sqlstate_result(last.code);
			if (err)
				*err = last;
			return last.result;
		}
		pf_log_debug(NULL, "statement failed with %s, running it again: %s", last.code, last.message);
	}
	if (stopping(pg) && last.message[0] == '\0')
		pf_error_set(&last, PF_ERR_TRANSIENT, "57P01", "shutting down");
	last.result = PF_ERR_TRANSIENT;
	if (err)
		*err = last;
	return PF_ERR_TRANSIENT;
}

pf_result
pf_pg_exec_params(pf_pg *pg, const char *sql, int nparams, const char *const *values, const int *lengths,
				  const int *formats, int result_format, PGresult **result, pf_error *err)
{
	return pf_pg_run(pg, PF_PG_IDEMPOTENT, sql, nparams, values, lengths, formats, result_format, result, err);
}

pf_result
pf_pg_exec(pf_pg *pg, const char *sql, int nparams, const char *const *values, PGresult **result,
		   pf_error *err)
{
	return pf_pg_run(pg, PF_PG_IDEMPOTENT, sql, nparams, values, NULL, NULL, 0, result, err);
}

pf_result
pf_pg_listen(pf_pg *pg, const char *channel, pf_error *err)
{
	bool		known = false;

	for (int i = 0; i < pg->n_channels; i++)
		known = known || strcmp(pg->channels[i], channel) == 0;
	if (!known)
	{
		if (pg->n_channels == MAX_CHANNELS)
			return pf_error_set(err, PF_ERR_INVALID, "54000", "too many LISTEN channels");
		pg->channels[pg->n_channels++] = pf_strdup(channel);
	}
	/* connecting runs every LISTEN; when connected, run them again now */
	if (pg->conn && PQstatus(pg->conn) == CONNECTION_OK)
	{
		if (exec_setup(pg, err) == PF_OK)
			return PF_OK;
		pf_pg_disconnect(pg);
	}
	return pf_pg_connect(pg, err);
}

int
pf_pg_socket(pf_pg *pg)
{
	return pg->conn ? PQsocket(pg->conn) : -1;
}

pf_result
pf_pg_take_notifications(pf_pg *pg, int *count, pf_error *err)
{
	PGnotify   *n;

	*count = 0;
	if (pg->conn == NULL)
		return pf_error_set(err, PF_ERR_TRANSIENT, "08003", "not connected");
	if (!PQconsumeInput(pg->conn) || PQstatus(pg->conn) != CONNECTION_OK)
	{
		pf_error_set(err, PF_ERR_TRANSIENT, "08006", "PostgreSQL connection lost: %s", PQerrorMessage(pg->conn));
		pf_pg_disconnect(pg);
		return PF_ERR_TRANSIENT;
	}
	while ((n = PQnotifies(pg->conn)) != NULL)
	{
		(*count)++;
		PQfreemem(n);
	}
	return PF_OK;
}
