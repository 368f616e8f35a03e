/*
 * outbox.c
 *		The relay's side of payflow's outbox: claim rows, and hand back the
 *		outcome of each send (outbox_ack for accepted entries, outbox_nack
 *		for failed ones, outbox_dead_letter for those SQS refuses for good).
 *
 * Everything due goes to the database in one statement (one round trip,
 * one transaction): the acks and nacks gathered since the last one, and a
 * claim when the relay wants rows. The statement runs asynchronously on the
 * libpq connection, so SendMessageBatch calls keep finishing while it runs
 * and their outcomes ride along with the next statement.
 *
 * A failed database call is not fatal: the rows stay in the outbox and
 * their claims expire, so the relay backs off and tries again. Outcomes
 * that could not be written are kept and written later; if a claim expired
 * meanwhile, another relay may send the row again, which the at-least-once
 * contract allows. While the connection is down, statements run through
 * pf_pg_run, which reconnects (and LISTENs again) with bounded retries.
 */
#include "relay.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "payflow/backoff.h"
#include "payflow/buf.h"

#define DB_BACKOFF_BASE_MS 200
#define DB_BACKOFF_CAP_MS 5000
/* How often outbox statements that keep failing are logged. */
#define DB_FAILURE_LOG_MS 60000
/* beyond the statement_timeout the server enforces: the connection is gone */
#define DB_ANSWER_TIMEOUT_MS 30000

/* the columns of every statement's result */
enum
{
	COL_ACKED,
	COL_NACKED,
	COL_EVENT_ID,
	COL_DESTINATION,
	COL_GROUP_ID,
	COL_DEDUP_ID,
	COL_BODY,
	COL_ATTRIBUTES
};

bool
relay_db_ready(const relay *r)
{
	return !r->db.active && pf_now_ms() >= r->db_retry_at_ms;
}

int
relay_db_socket(relay *r)
{
	return pf_pg_socket(r->pg);
}

/*
 * A failed outbox statement: tried again after a back-off.  The first
 * failure of a run is logged, then one a minute while they go on (a
 * database that stays away must not fill the log).
 */
static void
db_failed(relay *r, const pf_error *err)
{
	int64_t		now = pf_now_ms();
	int			delay = pf_backoff_ms(r->db_failures, DB_BACKOFF_BASE_MS, DB_BACKOFF_CAP_MS);

	r->db_retry_at_ms = now + delay;
	if (pf_log_throttled(r->db_failures == 0, &r->db_failure_logged_ms, now, DB_FAILURE_LOG_MS))
		pf_log_write(err->result == PF_ERR_TRANSIENT ? PF_LOG_WARN : PF_LOG_ERROR, NULL,
					 json_pack("{s:s,s:i,s:i,s:i,s:i,s:i}", "sqlstate", err->code, "acks", r->db.n_acks,
							   "nacks", r->db.n_nacks, "claim", r->db.claim_max, "retryInMs", delay,
							   "failures", r->db_failures + 1),
					 "outbox statement failed: %s", err->message);
	r->db_failures++;
}

static void
db_succeeded(relay *r)
{
	if (r->db_failures > 0)
		pf_log_info(NULL, "the database answers again after %d failed call(s)", r->db_failures);
	r->db_failures = 0;
	r->db_retry_at_ms = 0;
}

/* A PostgreSQL array literal: {"a","b",NULL}, quoting every element. */
static void
array_literal(pf_buf *out, char **items, int n)
{
	pf_buf_append_char(out, '{');
	for (int i = 0; i < n; i++)
	{
		if (i > 0)
			pf_buf_append_char(out, ',');
		if (items[i] == NULL)
		{
			pf_buf_append_str(out, "NULL");
			continue;
		}
		pf_buf_append_char(out, '"');
		for (const char *p = items[i]; *p; p++)
		{
			if (*p == '"' || *p == '\\')
				pf_buf_append_char(out, '\\');
			pf_buf_append_char(out, *p);
		}
		pf_buf_append_char(out, '"');
	}
	pf_buf_append_char(out, '}');
}

/* The parts a statement has; each combination is prepared once per connection. */
#define STMT_ACK	0x01
#define STMT_NACK	0x02
#define STMT_CLAIM	0x04
#define STMT_DEAD	0x08

/* The parameters and text of one statement; see build_statement. */
typedef struct statement
{
	int			shape;			/* STMT_* bits: which parts it has */
	pf_buf		sql;
	pf_buf		arrays[6];
	char		claim_max[16];
	char		lease[16];
	const char *params[9];
	int			nparams;
} statement;

/*
 * A part that calls FUNCTION(event_id, error, relay_id) once per outcome
 * and counts the true answers, as ALIAS.n; its two arrays become the next
 * two parameters.
 */
static void
add_per_event_part(statement *st, pf_buf *from, const relay_outcomes *o, int n, const char *function,
				   const char *alias)
{
	int			slot = st->nparams; /* a free pair of st->arrays: $1 is not one */

	array_literal(&st->arrays[slot - 1], o->event_ids, n);
	array_literal(&st->arrays[slot], o->texts, n);
	st->params[st->nparams++] = pf_buf_str(&st->arrays[slot - 1]);
	st->params[st->nparams++] = pf_buf_str(&st->arrays[slot]);
	pf_buf_appendf(from, "%s(SELECT count(*) FILTER (WHERE payflow.%s(x.e, x.m, $1)) AS n "
				   "FROM unnest($%d::uuid[], $%d::text[]) AS x(e, m)) %s",
				   from->len > 0 ? " CROSS JOIN " : "", function, st->nparams - 1, st->nparams, alias);
}

/*
 * One statement for everything due, e.g. with all three parts:
 *
 *	SELECT a.n, k.n, c.* FROM
 *	  (SELECT payflow.outbox_ack($2::uuid[], $3::text[], $1) AS n) a
 *	  CROSS JOIN (SELECT count(*) FILTER (WHERE payflow.outbox_nack(x.e, x.m, $1)) AS n
 *				  FROM unnest($4::uuid[], $5::text[]) AS x(e, m)) k
 *	  LEFT JOIN LATERAL payflow.outbox_claim($6, $1, $7) c ON true
 *
 * Dead letters, rare, are a fourth part of their own (only in the
 * statements that carry one, so that a relay newer than its database's
 * payflow writes acks and nacks all the same):
 *
 *	  CROSS JOIN (SELECT count(*) FILTER (WHERE payflow.outbox_dead_letter(x.e, x.m, $1)) AS n
 *				  FROM unnest($N::uuid[], $M::text[]) AS x(e, m)) d
 *
 * $1 is the relay id: the database takes acks and nacks only from the
 * relay that holds the claim.  The claim is the inner side of the join,
 * so it runs after the acks and may already hand out later events of the
 * acked rows' message groups.
 */
static void
build_statement(relay *r, statement *st, int n_acks, int n_nacks, int n_dead, int claim_max)
{
	const char *ack_count = "NULL::integer";
	const char *nack_count = "NULL::bigint";
	pf_buf		from = PF_BUF_INIT;

	memset(st, 0, sizeof(*st));
	st->params[st->nparams++] = r->relay_id;
	if (n_acks > 0)
	{
		array_literal(&st->arrays[0], r->acks.event_ids, n_acks);
		array_literal(&st->arrays[1], r->acks.texts, n_acks);
		st->params[st->nparams++] = pf_buf_str(&st->arrays[0]);
		st->params[st->nparams++] = pf_buf_str(&st->arrays[1]);
		pf_buf_appendf(&from, "(SELECT payflow.outbox_ack($%d::uuid[], $%d::text[], $1) AS n) a",
					   st->nparams - 1, st->nparams);
		ack_count = "a.n";
		st->shape |= STMT_ACK;
	}
	if (n_nacks > 0)
	{
		add_per_event_part(st, &from, &r->nacks, n_nacks, "outbox_nack", "k");
		nack_count = "k.n";
		st->shape |= STMT_NACK;
	}
	if (n_dead > 0)
	{
		add_per_event_part(st, &from, &r->dead, n_dead, "outbox_dead_letter", "d");
		/* counted with the nacks: no column of its own */
		nack_count = (st->shape & STMT_NACK) ? "k.n + d.n" : "d.n";
		st->shape |= STMT_DEAD;
	}
	if (claim_max > 0)
	{
		snprintf(st->claim_max, sizeof(st->claim_max), "%d", claim_max);
		snprintf(st->lease, sizeof(st->lease), "%d", r->lease_seconds);
		st->params[st->nparams++] = st->claim_max;
		st->params[st->nparams++] = st->lease;
		st->shape |= STMT_CLAIM;
		pf_buf_appendf(&from, "%spayflow.outbox_claim($%d, $1, $%d) c%s",
					   from.len > 0 ? " LEFT JOIN LATERAL " : "",
					   st->nparams - 1, st->nparams, from.len > 0 ? " ON true" : "");
		pf_buf_appendf(&st->sql, "SELECT %s, %s, c.event_id, c.destination, c.message_group_id, "
					   "c.dedup_id, c.body, c.attributes FROM %s", ack_count, nack_count, from.data);
	}
	else
		pf_buf_appendf(&st->sql, "SELECT %s, %s FROM %s", ack_count, nack_count, from.data);
	pf_buf_free(&from);
}

/*
 * libpq prints server notices and unsolicited errors ("FATAL: terminating
 * connection due to administrator command") on stderr by itself; keep the
 * log JSON lines only.
 */
static void
log_notice(void *arg, const char *message)
{
	char		line[512];

	snprintf(line, sizeof(line), "%s", message);
	line[strcspn(line, "\n")] = '\0';
	pf_log_warn(NULL, "PostgreSQL: %s", line);
}

/*
 * A connection not seen before gets the notice hook and starts with no
 * statement prepared. Connections are told apart by pg.c's generation, not
 * by the backend PID: a reconnect can get the PID of the session it lost
 * (through a pooler, or from a server restarted in a fresh PID namespace),
 * and its statements would then all fail with 26000.
 */
static void
adopt_connection(relay *r, PGconn *conn)
{
	unsigned long generation = pf_pg_generation(r->pg);

	if (generation == r->prepared_generation)
		return;
	r->prepared_generation = generation;
	r->prepared_shapes = 0;
	PQsetNoticeProcessor(conn, log_notice, NULL);
}

/* The prepared name of a shape: payflow_relay_ plus a letter per part (a, n, c, d). */
static const char *
statement_name(int shape, char *name, size_t size)
{
	snprintf(name, size, "payflow_relay_%s%s%s%s", (shape & STMT_ACK) ? "a" : "", (shape & STMT_NACK) ? "n" : "",
			 (shape & STMT_CLAIM) ? "c" : "", (shape & STMT_DEAD) ? "d" : "");
	return name;
}

/*
 * Prepare st's shape on this connection unless done already: the outer
 * statement is then parsed and planned once per connection, not per call.
 * A new connection (after a reconnect) starts with none prepared.
 */
static bool
prepare(relay *r, PGconn *conn, const statement *st)
{
	PGresult   *res;
	bool		ok;
	char		name[32];

	adopt_connection(r, conn);
	if (r->prepared_shapes & (1u << st->shape))
		return true;
	res = PQprepare(conn, statement_name(st->shape, name, sizeof(name)), st->sql.data, st->nparams, NULL);
	ok = PQresultStatus(res) == PGRES_COMMAND_OK;
	if (ok)
		r->prepared_shapes |= 1u << st->shape;
	else
		pf_log_warn(NULL, "preparing the outbox statement failed: %s", PQerrorMessage(conn));
	PQclear(res);
	return ok;
}

static void
statement_free(statement *st)
{
	pf_buf_free(&st->sql);
	for (int i = 0; i < 6; i++)
		pf_buf_free(&st->arrays[i]);
}

/*
 * The event's publish span, under its operation's trace, and the message
 * carries the span's context instead of the operation's: the attempt that
 * consumes it is the span's child (submit -> publish -> attempt). An event
 * of an operation without a trace (submitted before 0.5.0) has none.
 */
static void
begin_publish_span(relay_event *ev)
{
	char		name[96];

	if (ev->trace.trace_id[0] == '\0')
		return;
	snprintf(name, sizeof(name), "publish %s", ev->event_type ? ev->event_type : "event");
	pf_span_begin(&ev->otel, name, PF_SPAN_PRODUCER, &ev->trace);
	pf_span_set_str(&ev->otel, "messaging.system", "aws_sqs");
	pf_span_set_str(&ev->otel, "messaging.destination.name", ev->destination);
	pf_span_set_str(&ev->otel, "messaging.message.conversation_id", ev->group_id);
	pf_span_set_str(&ev->otel, "payflow.event.id", ev->event_id);
	pf_span_set_str(&ev->otel, "payflow.operation.id", ev->operation_id);
	for (int i = 0; i < ev->n_attributes; i++)
	{
		if (strcmp(ev->attributes[i].name, "traceparent") != 0)
			continue;
		free(ev->attribute_text[2 * i + 1]);
		ev->attribute_text[2 * i + 1] = pf_malloc(PF_TRACEPARENT_LEN + 1);
		pf_traceparent_format(&ev->otel.ctx, ev->attribute_text[2 * i + 1]);
		ev->attributes[i].value = ev->attribute_text[2 * i + 1];
	}
}

/* Keep the attributes column's string members as SQS String attributes. */
static void
take_attributes(relay_event *ev, const char *text)
{
	json_t	   *attrs = text ? json_loads(text, 0, NULL) : NULL;
	const char *key;
	json_t	   *value;

	json_object_foreach(attrs, key, value)
	{
		const char *v = json_string_value(value);
		int			i = ev->n_attributes;

		/* SQS rejects empty values; the extension strips nulls already */
		if (v == NULL || v[0] == '\0' || i == RELAY_MAX_ATTRIBUTES)
			continue;
		ev->attribute_text[2 * i] = pf_strdup(key);
		ev->attribute_text[2 * i + 1] = pf_strdup(v);
		ev->attributes[i].name = ev->attribute_text[2 * i];
		ev->attributes[i].value = ev->attribute_text[2 * i + 1];
		ev->size += strlen(key) + strlen(v) + strlen("String");
		if (strcmp(key, "operationId") == 0)
			ev->operation_id = ev->attributes[i].value;
		else if (strcmp(key, "correlationId") == 0)
			ev->correlation_id = ev->attributes[i].value;
		else if (strcmp(key, "eventType") == 0)
			ev->event_type = ev->attributes[i].value;
		else if (strcmp(key, "traceparent") == 0 && !pf_traceparent_parse(v, &ev->trace))
			ev->trace.trace_id[0] = '\0';
		ev->n_attributes++;
	}
	json_decref(attrs);
}

static char *
column(PGresult *res, int row, int col)
{
	return PQgetisnull(res, row, col) ? NULL : pf_strdup(PQgetvalue(res, row, col));
}

/* The statement succeeded: forget the written outcomes, queue the claimed rows. */
static void
take_result(relay *r, PGresult *res)
{
	int			rows = PQntuples(res);
	int			claimed = 0;
	long		acked = 0;

	db_succeeded(r);
	if (rows > 0 && !PQgetisnull(res, 0, COL_ACKED))
		acked = atol(PQgetvalue(res, 0, COL_ACKED));
	r->stats.acked += acked;
	r->unacked_calls -= relay_outcomes_drop(&r->acks, r->db.n_acks);
	relay_outcomes_drop(&r->nacks, r->db.n_nacks);
	relay_outcomes_drop(&r->dead, r->db.n_dead);
	/*
	 * Later events of the acked rows' message groups may be claimable now;
	 * a claim in the same statement ran after the acks and took them.
	 */
	if (acked > 0 && r->db.claim_max == 0)
		r->claim_wanted = true;

	for (int i = 0; r->db.claim_max > 0 && i < rows; i++)
	{
		relay_event *ev;

		if (PQgetisnull(res, i, COL_EVENT_ID))
			continue;			/* the one row of a claim that found nothing */
		ev = pf_calloc(1, sizeof(*ev));
		ev->event_id = column(res, i, COL_EVENT_ID);
		ev->destination = column(res, i, COL_DESTINATION);
		ev->group_id = column(res, i, COL_GROUP_ID);
		ev->dedup_id = column(res, i, COL_DEDUP_ID);
		ev->body = column(res, i, COL_BODY);
		ev->size = ev->body ? strlen(ev->body) : 0;
		take_attributes(ev, PQgetisnull(res, i, COL_ATTRIBUTES) ? NULL : PQgetvalue(res, i, COL_ATTRIBUTES));
		begin_publish_span(ev);
		relay_accept(r, ev);
		claimed++;
	}
	if (r->db.claim_max > 0)
	{
		r->stats.claims++;
		r->stats.claimed += claimed;
		/* a full claim means more is waiting */
		r->backlog = claimed == r->db.claim_max;
		if (r->backlog)
			r->claim_wanted = true;
	}
}

/* The statement failed: keep the outcomes for the next one, unless retrying cannot help. */
static void
take_failure(relay *r, const pf_error *err)
{
	db_failed(r, err);
	/* claim again after the back-off: that reconnects and LISTENs again */
	if (r->db.claim_max > 0)
		r->claim_wanted = true;
	if (err->result != PF_ERR_TRANSIENT)
	{
		pf_log_error(NULL, "dropping %d ack(s), %d nack(s) and %d dead letter(s) the database refuses: "
					 "those events are sent again once their claims expire", r->db.n_acks, r->db.n_nacks,
					 r->db.n_dead);
		r->unacked_calls -= relay_outcomes_drop(&r->acks, r->db.n_acks);
		relay_outcomes_drop(&r->nacks, r->db.n_nacks);
		relay_outcomes_drop(&r->dead, r->db.n_dead);
	}
}

static void
request_done(relay *r)
{
	if (pf_log_enabled(PF_LOG_DEBUG))
		pf_log_write(PF_LOG_DEBUG, NULL, json_pack("{s:i,s:i,s:i,s:i,s:I}", "acks", r->db.n_acks, "nacks", r->db.n_nacks,
												   "deadLetters", r->db.n_dead,
												   "claim", r->db.claim_max, "ms", (json_int_t) (pf_now_ms() - r->db.started_ms)),
					 "outbox statement done");
	memset(&r->db, 0, sizeof(r->db));
}

/*
 * Send the outcomes gathered so far, and a claim of up to claim_max rows
 * (0: none), in one statement. Runs asynchronously on a live connection;
 * otherwise synchronously, reconnecting first.
 */
void
relay_db_send(relay *r, int claim_max)
{
	statement	st;
	PGconn	   *conn = pf_pg_conn(r->pg);

	char		name[32];

	if (r->db.active || (r->acks.n == 0 && r->nacks.n == 0 && r->dead.n == 0 && claim_max <= 0))
		return;
	r->db.n_acks = r->acks.n;
	r->db.n_nacks = r->nacks.n;
	r->db.n_dead = r->dead.n;
	r->db.claim_max = claim_max > 0 ? claim_max : 0;
	build_statement(r, &st, r->db.n_acks, r->db.n_nacks, r->db.n_dead, r->db.claim_max);
	r->db.started_ms = pf_now_ms();
	r->stats.statements++;

	if (conn != NULL && PQstatus(conn) == CONNECTION_OK && PQtransactionStatus(conn) == PQTRANS_IDLE &&
		prepare(r, conn, &st) &&
		PQsendQueryPrepared(conn, statement_name(st.shape, name, sizeof(name)), st.nparams, st.params, NULL, NULL, 0))
	{
		r->db.active = true;
	}
	else
	{
		PGresult   *res;
		pf_error	err;

		/* acks, nacks and claims may run twice: a lost claim's rows come back when it expires */
		if (pf_pg_run(r->pg, PF_PG_IDEMPOTENT, st.sql.data, st.nparams, st.params, NULL, NULL, 0, &res,
					  &err) == PF_OK)
		{
			take_result(r, res);
			PQclear(res);
		}
		else
			take_failure(r, &err);
		request_done(r);
	}
	statement_free(&st);
}

static void
connection_lost(relay *r, const char *why)
{
	pf_error	err;

	pf_error_set(&err, PF_ERR_TRANSIENT, "08006", "PostgreSQL connection lost: %s", why);
	pf_pg_disconnect(r->pg);
	take_failure(r, &err);
	request_done(r);
}

/*
 * Read what the connection has: the answer to the statement in flight, if
 * complete, and notifications. Returns the number of notifications.
 */
int
relay_db_poll(relay *r)
{
	PGconn	   *conn = pf_pg_conn(r->pg);
	PGnotify   *n;
	int			notified = 0;
	bool		read_only = false;	/* the answer was 25006 */

	if (conn == NULL)
	{
		if (r->db.active)
			connection_lost(r, "closed");
		return 0;
	}
	adopt_connection(r, conn);
	if (!PQconsumeInput(conn) || PQstatus(conn) != CONNECTION_OK)
	{
		char		why[256];

		snprintf(why, sizeof(why), "%s", PQerrorMessage(conn));
		why[strcspn(why, "\n")] = '\0';
		if (r->db.active)
			connection_lost(r, why);
		else
		{
			pf_log_warn(NULL, "PostgreSQL connection lost: %s; reconnecting at the next statement", why);
			pf_pg_disconnect(r->pg);
		}
		return 1;				/* a new connection listens again: claim then */
	}
	while ((n = PQnotifies(conn)) != NULL)
	{
		notified++;
		PQfreemem(n);
	}
	if (!r->db.active)
		return notified;
	if (PQisBusy(conn))
	{
		if (pf_now_ms() - r->db.started_ms > DB_ANSWER_TIMEOUT_MS)
			connection_lost(r, "no answer in time");
		return notified;
	}

	/* the answer is complete: one result, then NULL */
	{
		PGresult   *res;
		PGresult   *first = NULL;

		while ((res = PQgetResult(conn)) != NULL)
		{
			if (first == NULL)
				first = res;
			else
				PQclear(res);
		}
		if (first != NULL && PQresultStatus(first) == PGRES_TUPLES_OK)
			take_result(r, first);
		else
		{
			const char *sqlstate = first ? PQresultErrorField(first, PG_DIAG_SQLSTATE) : NULL;
			const char *primary = first ? PQresultErrorField(first, PG_DIAG_MESSAGE_PRIMARY) : NULL;
			pf_error	err;

			pf_error_set(&err, pf_pg_sqlstate_result(sqlstate), sqlstate ? sqlstate : "08006", "%s",
						 primary ? primary : PQerrorMessage(conn));
			err.message[strcspn(err.message, "\n")] = '\0';
			if (strcmp(err.code, "25006") == 0)
				read_only = true;
			else if (strcmp(err.code, "26000") == 0)
			{
				/*
				 * The session lost its prepared statements (DISCARD ALL, a
				 * pooler handing out another server connection): prepare
				 * again and keep the outcomes for the next statement.
				 */
				r->prepared_shapes = 0;
				err.result = PF_ERR_TRANSIENT;
			}
			take_failure(r, &err);
		}
		PQclear(first);
		request_done(r);
		/* notifications may have come with the answer */
		while ((n = PQnotifies(conn)) != NULL)
		{
			notified++;
			PQfreemem(n);
		}
	}
	if (read_only)
	{
		/* a standby, or a primary being demoted: the next statement finds the writable host */
		pf_log_warn(NULL, "the PostgreSQL server is read-only; reconnecting");
		pf_pg_disconnect(r->pg);
	}
	return notified;
}
