/*
 * db.c
 *		The executors' share of PostgreSQL connections (pg_pool.h), and the
 *		other step functions of payflow's SQL API as C calls.
 *
 * Executors spend their time in external calls, not in PostgreSQL, so they
 * share a few connections (PAYFLOW_DB_CONNECTIONS) instead of holding one
 * each: a worker carrying 256 fifteen-minute calls needs 256 connections to
 * the legacy DBMS, but only a handful to payflow's database.
 *
 * Claims and outcomes go through batch.c (claim_steps, complete_steps,
 * fail_steps). Each statement says whether it may run twice (pg.h):
 * save_step_ref and heartbeat are idempotent; record_dead_letter inserts a
 * row per call, so it runs at most once.
 */
#include "worker.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "payflow/buf.h"
#include "payflow/pg_pool.h"

#define STATEMENT_TIMEOUT_MS 30000

/*
 * The executors' connections: pg_pool.h, with the worker's options.
 * application_name names the role ("payflow-worker payment"), so that
 * pg_stat_activity, the server's logs and make bench tell the roles apart.
 */
db_pool *
db_pool_create(const char *conninfo, const char *application_name, int size,
			   const volatile sig_atomic_t *stop)
{
	pf_pg_options opt = {0};

	opt.application_name = application_name;
	opt.connect_timeout_s = 10;
	opt.statement_timeout_ms = STATEMENT_TIMEOUT_MS;
	opt.max_attempts = 4;
	opt.stop = stop;
	/* a few statements (batch.c, db.c, store.c) run thousands of times: parse and plan them once */
	opt.prepare = true;
	return pf_pg_pool_create(conninfo, size, &opt);
}

void
db_pool_destroy(db_pool *pool)
{
	pf_pg_pool_destroy(pool, NULL);
}

pf_pg *
db_acquire(db_pool *pool, int timeout_ms)
{
	pf_pg_slot *slot = pf_pg_pool_acquire(pool, timeout_ms);

	return slot ? slot->pg : NULL;
}

void
db_release(db_pool *pool, pf_pg *pg)
{
	pf_pg_pool_release_pg(pool, pg);
}

/* Run a statement returning one jsonb value; *out is the parsed value. */
pf_result
db_exec_json(pf_pg *pg, const char *sql, int nparams, const char *const *values, json_t **out, pf_error *err)
{
	PGresult   *res;
	pf_result	r = pf_pg_run(pg, PF_PG_IDEMPOTENT, sql, nparams, values, NULL, NULL, 0, &res, err);
	json_error_t jerr;

	*out = NULL;
	if (r != PF_OK)
		return r;
	if (PQntuples(res) != 1 || PQgetisnull(res, 0, 0))
		r = pf_error_set(err, PF_ERR_FINAL, "XX000", "no answer from %.60s", sql);
	else if ((*out = json_loads(PQgetvalue(res, 0, 0), 0, &jerr)) == NULL)
		r = pf_error_set(err, PF_ERR_FINAL, "XX000", "unparsable answer from %.60s", sql);
	PQclear(res);
	return r;
}

static char *
dup_member(json_t *obj, const char *name)
{
	const char *v = json_string_value(json_object_get(obj, name));

	return v ? pf_strdup(v) : NULL;
}

pf_result
db_claim_from_answer(json_t *answer, step_claim *claim, pf_error *err)
{
	const char *reason = json_string_value(json_object_get(answer, "reason"));

	memset(claim, 0, sizeof(*claim));
	claim->lease_left_s = -1;
	if (!json_is_object(answer) || !json_is_string(json_object_get(answer, "action")))
		return pf_error_set(err, PF_ERR_FINAL, "XX000", "payflow.claim_step gave no action");
	snprintf(claim->action, sizeof(claim->action), "%s", json_string_value(json_object_get(answer, "action")));
	snprintf(claim->reason, sizeof(claim->reason), "%s", reason ? reason : "");
	claim->attempt = (int) json_integer_value(json_object_get(answer, "attempt"));
	claim->takeover = json_is_true(json_object_get(answer, "takeover"));
	claim->retry_after_s = (int) json_integer_value(json_object_get(answer, "retryAfterSeconds"));
	claim->idempotency_key = dup_member(answer, "idempotencyKey");
	claim->lease_token = dup_member(answer, "leaseToken");
	claim->external_ref = dup_member(answer, "externalRef");
	claim->payment_id = dup_member(answer, "paymentId");
	claim->result_name = dup_member(answer, "resultName");
	if (json_is_object(json_object_get(answer, "input")))
		claim->input = json_incref(json_object_get(answer, "input"));
	return PF_OK;
}

void
step_claim_free(step_claim *claim)
{
	free(claim->idempotency_key);
	free(claim->lease_token);
	free(claim->external_ref);
	free(claim->payment_id);
	free(claim->result_name);
	json_decref(claim->input);
	memset(claim, 0, sizeof(*claim));
}

pf_result
db_save_step_ref(pf_pg *pg, const char *operation_id, const char *step, const char *worker_id, const char *ref,
				 const char *lease_token, pf_error *err)
{
	const char *values[5] = {operation_id, step, worker_id, ref, lease_token};

	return pf_pg_run(pg, PF_PG_IDEMPOTENT, "SELECT payflow.save_step_ref($1, $2, $3, $4, $5)", 5, values, NULL,
					 NULL, 0, NULL, err);
}

void
db_lease_key(char *out, size_t size, const char *operation_id, const char *lease_token)
{
	if (lease_token != NULL && *lease_token != '\0')
		snprintf(out, size, "%s %s", operation_id, lease_token);
	else
		snprintf(out, size, "%s", operation_id);
}

void
db_append_text_array(pf_buf *buf, const char *const *items, int n)
{
	pf_buf_append_char(buf, '{');
	for (int i = 0; i < n; i++)
	{
		if (i > 0)
			pf_buf_append_char(buf, ',');
		pf_buf_append_char(buf, '"');
		for (const char *p = items[i]; *p; p++)
		{
			if (*p == '"' || *p == '\\')
				pf_buf_append_char(buf, '\\');
			pf_buf_append_char(buf, *p);
		}
		pf_buf_append_char(buf, '"');
	}
	pf_buf_append_char(buf, '}');
}

pf_result
db_heartbeat(pf_pg *pg, const char *const *lease_keys, int n, const char *step, const char *worker_id,
			 int lease_s, bool *held, pf_error *err)
{
	pf_buf		keys = PF_BUF_INIT;
	char		lease[16];
	const char *values[4];
	PGresult   *res;
	pf_result	r;

	if (n == 0)
		return PF_OK;
	/* each key split in the statement: "<id> <token>", or "<id>" (no token) */
	db_append_text_array(&keys, lease_keys, n);
	snprintf(lease, sizeof(lease), "%d", lease_s);
	values[0] = keys.data;
	values[1] = step;
	values[2] = worker_id;
	values[3] = lease;
	/*
	 * One update for the chunk (heartbeat_steps). An item answered with an
	 * error of its own (an operation purged under us: PF003) counts as held:
	 * the step finds out when it reports, as it did when each key was a
	 * heartbeat call of its own.
	 */
	r = pf_pg_run(pg, PF_PG_IDEMPOTENT,
				  "SELECT h.held IS NOT FALSE FROM payflow.heartbeat_steps($2, $3, "
				  "ARRAY(SELECT split_part(t.k, ' ', 1) FROM unnest($1::text[]) WITH ORDINALITY AS t(k, i) ORDER BY t.i), "
				  "$4::int, "
				  "ARRAY(SELECT nullif(split_part(t.k, ' ', 2), '') FROM unnest($1::text[]) WITH ORDINALITY AS t(k, i) "
				  "ORDER BY t.i)) h ORDER BY h.item",
				  4, values, NULL, NULL, 0, &res, err);
	pf_buf_free(&keys);
	if (r != PF_OK)
		return r;
	for (int i = 0; i < n; i++)
		held[i] = i < PQntuples(res) && strcmp(PQgetvalue(res, i, 0), "t") == 0;
	PQclear(res);
	return PF_OK;
}

pf_result
db_record_dead_letter(pf_pg *pg, const char *queue, const char *body, json_t *error, const char *operation_id,
					  pf_error *err)
{
	char	   *error_text = json_dumps(error, JSON_COMPACT);
	const char *values[4] = {queue, body, error_text, operation_id};
	pf_result	r;

	/* lost in flight it may have been recorded already; the queue's DLQ keeps the message either way */
	r = pf_pg_run(pg, PF_PG_ONCE, "SELECT payflow.record_dead_letter($1, $2, $3::jsonb, $4)", 4, values, NULL,
				  NULL, 0, NULL, err);
	free(error_text);
	return r;
}
