/*
 * pg_prepared.c
 *		Statement texts prepared once per server session, prepared again
 *		when the session lost them (pg_prepared.h).
 */
#include "payflow/pg_prepared.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "payflow/backoff.h"
#include "payflow/buf.h"
#include "payflow/log.h"

/*
 * Misses (26000) on one connection before its statements run unnamed. One
 * is a DISCARD ALL or a pooler's reset; a few more are a transaction
 * pooler spreading the statements over its server connections.
 */
#define MISSES_BEFORE_UNNAMED 4

typedef struct statement
{
	char	   *sql;
	unsigned long prepared_in;	/* the connection it is prepared on; 0: none */
} statement;

struct pf_pg_prepared
{
	uint64_t	prefix;			/* drawn once: this client's names */
	statement	statements[PF_PG_PREPARED_MAX];
	int			n;
	unsigned long generation;	/* the connection misses and unnamed count for */
	int			misses;
	bool		unnamed;		/* this connection's session keeps no statement */
	bool		told_unnamed;	/* logged once per pf_pg */
};

pf_pg_prepared *
pf_pg_prepared_create(void)
{
	pf_pg_prepared *ps = pf_calloc(1, sizeof(*ps));

	ps->prefix = pf_random_u64();
	return ps;
}

void
pf_pg_prepared_destroy(pf_pg_prepared *ps)
{
	if (ps == NULL)
		return;
	for (int i = 0; i < ps->n; i++)
		free(ps->statements[i].sql);
	free(ps);
}

/* The statement of this text (added when new and there is room), or NULL. */
static statement *
lookup(pf_pg_prepared *ps, const char *sql, int *number)
{
	for (int i = 0; i < ps->n; i++)
		if (strcmp(ps->statements[i].sql, sql) == 0)
		{
			*number = i;
			return &ps->statements[i];
		}
	if (ps->n == PF_PG_PREPARED_MAX)
		return NULL;
	*number = ps->n;
	ps->statements[ps->n].sql = pf_strdup(sql);
	ps->statements[ps->n].prepared_in = 0;
	return &ps->statements[ps->n++];
}

static bool
failed_with(const PGresult *res, const char *sqlstate)
{
	const char *code = PQresultErrorField(res, PG_DIAG_SQLSTATE);

	return code != NULL && strcmp(code, sqlstate) == 0;
}

static bool
succeeded(const PGresult *res)
{
	ExecStatusType st = PQresultStatus(res);

	return st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK;
}

PGresult *
pf_pg_prepared_exec(pf_pg_prepared *ps, PGconn *conn, unsigned long generation, const char *sql, int nparams,
					const char *const *values, const int *lengths, const int *formats, int result_format,
					bool *sent)
{
	statement  *st = NULL;
	int			number = 0;
	char		name[48];
	PGresult   *res;

	*sent = true;
	if (generation != ps->generation)
	{
		ps->generation = generation;
		ps->misses = 0;
		ps->unnamed = false;
	}
	if (!ps->unnamed && PQtransactionStatus(conn) == PQTRANS_IDLE)
		st = lookup(ps, sql, &number);
	if (st == NULL)
		return PQexecParams(conn, sql, nparams, NULL, values, lengths, formats, result_format);
	snprintf(name, sizeof(name), "pf_%016" PRIx64 "_%d", ps->prefix, number);

	for (int round = 0;; round++)
	{
		if (st->prepared_in != generation)
		{
			res = PQprepare(conn, name, sql, nparams, NULL);
			/* 42P05: prepared in this session by this pf_pg before (a pooler's session) */
			if (!succeeded(res) && !failed_with(res, "42P05"))
			{
				*sent = false;
				return res;
			}
			PQclear(res);
			st->prepared_in = generation;
		}
		res = PQexecPrepared(conn, name, nparams, values, lengths, formats, result_format);
		if (succeeded(res) || round > 0 || PQstatus(conn) != CONNECTION_OK)
			return res;
		if (failed_with(res, "26000"))
		{
			/* the session has it not: prepare it there and run it again (it never ran) */
			st->prepared_in = 0;
			if (++ps->misses < MISSES_BEFORE_UNNAMED)
			{
				PQclear(res);
				continue;
			}
			ps->unnamed = true;
			if (!ps->told_unnamed)
				pf_log_info(NULL, "the PostgreSQL sessions behind this connection do not keep prepared "
							"statements (a transaction pooler?): its statements run unprepared");
			ps->told_unnamed = true;
		}
		else if (failed_with(res, "0A000"))
		{
			/*
			 * Its result columns changed (an extension update), or the
			 * statement itself raised 0A000: either way it rolled back.
			 * Drop the stale statement; this once run it unnamed, which
			 * gives the statement's own error if it has one.
			 */
			char		deallocate[64];

			st->prepared_in = 0;
			snprintf(deallocate, sizeof(deallocate), "DEALLOCATE %s", name);
			PQclear(PQexec(conn, deallocate));
		}
		else
			return res;
		PQclear(res);
		return PQexecParams(conn, sql, nparams, NULL, values, lengths, formats, result_format);
	}
}
