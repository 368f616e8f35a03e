/*
 * outbox.c
 *		The relay's side of payflow's outbox: claim rows, and hand back the
 *		outcome of each send (outbox_ack for accepted entries, outbox_nack
 *		for failed ones) in one statement per kind and loop turn.
 *
 * A failed database call is not fatal: the rows stay in the outbox and
 * their claims expire, so the relay backs off and tries again. Outcomes
 * that could not be written are kept and written later; if the claim
 * expired meanwhile, another relay may send the row again, which the
 * at-least-once contract allows.
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

static const char *const claim_sql =
"SELECT event_id, destination, message_group_id, dedup_id, body, attributes "
"FROM payflow.outbox_claim($1, $2, $3)";

static const char *const ack_sql =
"SELECT payflow.outbox_ack($1::uuid[], $2::text[])";

/* one round trip for any number of nacks, each with its own error */
static const char *const nack_sql =
"SELECT count(*) FILTER (WHERE payflow.outbox_nack(n.event_id, n.error)) "
"FROM unnest($1::uuid[], $2::text[]) AS n(event_id, error)";

bool
relay_db_ready(const relay *r)
{
	return pf_now_ms() >= r->db_retry_at_ms;
}

void
relay_db_failed(relay *r, const pf_error *err, const char *what)
{
	int			delay = pf_backoff_ms(r->db_failures++, DB_BACKOFF_BASE_MS, DB_BACKOFF_CAP_MS);

	r->db_retry_at_ms = pf_now_ms() + delay;
	pf_log_write(err->result == PF_ERR_TRANSIENT ? PF_LOG_WARN : PF_LOG_ERROR, NULL,
				 json_pack("{s:s,s:s,s:i}", "sqlstate", err->code, "operation", what, "retryInMs", delay),
				 "outbox %s failed: %s", what, err->message);
}

void
relay_db_succeeded(relay *r)
{
	if (r->db_failures > 0)
		pf_log_info(NULL, "the database answers again after %d failed call(s)", r->db_failures);
	r->db_failures = 0;
	r->db_retry_at_ms = 0;
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
		ev->n_attributes++;
	}
	json_decref(attrs);
}

static char *
column(PGresult *res, int row, int col)
{
	return PQgetisnull(res, row, col) ? NULL : pf_strdup(PQgetvalue(res, row, col));
}

/*
 * Claim up to max_events rows and hand each to the publisher. Returns the
 * number of rows claimed, or -1 when the database call failed (then the
 * relay backs off).
 */
int
relay_claim(relay *r, int max_events)
{
	char		n[16];
	char		lease[16];
	const char *params[3] = {n, r->relay_id, lease};
	PGresult   *res;
	pf_error	err;
	int			rows;

	snprintf(n, sizeof(n), "%d", max_events);
	snprintf(lease, sizeof(lease), "%d", r->lease_seconds);
	if (pf_pg_exec(r->pg, claim_sql, 3, params, &res, &err) != PF_OK)
	{
		relay_db_failed(r, &err, "claim");
		return -1;
	}
	relay_db_succeeded(r);
	rows = PQntuples(res);
	r->stats.claims++;
	r->stats.claimed += rows;
	for (int i = 0; i < rows; i++)
	{
		relay_event *ev = pf_calloc(1, sizeof(*ev));

		ev->event_id = column(res, i, 0);
		ev->destination = column(res, i, 1);
		ev->group_id = column(res, i, 2);
		ev->dedup_id = column(res, i, 3);
		ev->body = column(res, i, 4);
		ev->size = ev->body ? strlen(ev->body) : 0;
		take_attributes(ev, PQgetisnull(res, i, 5) ? NULL : PQgetvalue(res, i, 5));
		relay_accept(r, ev);
	}
	PQclear(res);
	return rows;
}

void
relay_outcomes_add(relay_outcomes *o, const char *event_id, const char *text)
{
	if (o->n == o->cap)
	{
		o->cap = o->cap ? o->cap * 2 : 64;
		o->event_ids = pf_realloc(o->event_ids, sizeof(char *) * (size_t) o->cap);
		o->texts = pf_realloc(o->texts, sizeof(char *) * (size_t) o->cap);
	}
	o->event_ids[o->n] = pf_strdup(event_id);
	o->texts[o->n] = text ? pf_strdup(text) : NULL;
	o->n++;
}

static void
outcomes_clear(relay_outcomes *o)
{
	for (int i = 0; i < o->n; i++)
	{
		free(o->event_ids[i]);
		free(o->texts[i]);
	}
	o->n = 0;
	o->first_failure_ms = 0;
}

void
relay_outcomes_free(relay_outcomes *o)
{
	outcomes_clear(o);
	free(o->event_ids);
	free(o->texts);
	memset(o, 0, sizeof(*o));
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

/* Run ack_sql or nack_sql over o; the count it returns goes to *count. */
static pf_result
write_outcomes(relay *r, relay_outcomes *o, const char *sql, long *count, pf_error *err)
{
	pf_buf		ids = PF_BUF_INIT;
	pf_buf		texts = PF_BUF_INIT;
	const char *params[2];
	PGresult   *res;
	pf_result	result;

	array_literal(&ids, o->event_ids, o->n);
	array_literal(&texts, o->texts, o->n);
	params[0] = pf_buf_str(&ids);
	params[1] = pf_buf_str(&texts);
	result = pf_pg_exec(r->pg, sql, 2, params, &res, err);
	if (result == PF_OK)
	{
		*count = PQntuples(res) == 1 ? atol(PQgetvalue(res, 0, 0)) : 0;
		PQclear(res);
	}
	pf_buf_free(&ids);
	pf_buf_free(&texts);
	return result;
}

/* Write one kind of outcome; false when it has to wait for the database. */
static bool
flush_one(relay *r, relay_outcomes *o, const char *sql, const char *what, long *count)
{
	pf_error	err;

	*count = 0;
	if (o->n == 0)
		return true;
	if (write_outcomes(r, o, sql, count, &err) == PF_OK)
	{
		relay_db_succeeded(r);
		outcomes_clear(o);
		return true;
	}
	relay_db_failed(r, &err, what);
	if (err.result != PF_ERR_TRANSIENT)
	{
		/* retrying the same statement cannot help; the claims will expire */
		pf_log_error(NULL, "dropping %d %s(s): the rows are sent again once their claims expire", o->n, what);
		outcomes_clear(o);
	}
	else if (o->first_failure_ms == 0)
		o->first_failure_ms = pf_now_ms();
	return false;
}

/*
 * Write pending acks, then nacks. *acked_any tells whether rows left the
 * outbox (later events of their message groups may now be claimed).
 * Returns false when something is still pending.
 */
bool
relay_flush_outcomes(relay *r, bool *acked_any)
{
	long		acked = 0;
	long		nacked = 0;
	bool		ok;

	*acked_any = false;
	ok = flush_one(r, &r->acks, ack_sql, "ack", &acked);
	if (ok)
	{
		r->stats.acked += acked;
		*acked_any = acked > 0;
		ok = flush_one(r, &r->nacks, nack_sql, "nack", &nacked);
	}
	return ok;
}
