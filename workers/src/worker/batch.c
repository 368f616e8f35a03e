/*
 * batch.c
 *		The executors' claims, completions and failures, gathered into one
 *		statement each (payflow.claim_steps, complete_steps, fail_steps).
 *
 * A receive hands up to ten messages to as many executors at once; each
 * claims its step, and their outcomes come back close together. Instead
 * of a round trip and a transaction each, the first executor to ask
 * becomes the batch's leader: it waits for others (a lone step never
 * waits), until BATCH_MAX are waiting or its window ends, takes them, runs
 * one statement on one
 * pooled connection and hands every executor its own row. The database
 * answers each item on its own (its answer, or its error: one unknown
 * operation never fails its neighbours); a failure of the statement itself
 * (a lost connection) is every item's error, as it was each call's before.
 * The leader of one batch is a follower of none: whoever waits when a
 * batch ends and finds no leader takes the next one.
 *
 * Whom a leader waits for: a claim, for the claims of the messages
 * received and not yet claimed (counted from their dispatch to their
 * executor's request: claims_to_come), up to BATCH_CLAIM_WINDOW_MS; an
 * outcome, for the executors holding a message, up to BATCH_WINDOW_MS
 * (their calls end when they end: a longer wait would gather nothing).
 *
 * Each statement is as safe to run twice as the single calls were
 * (db.c): a repeated claim finds the step leased by us, a repeated
 * completion gets its first answer, a repeated failure is recognised.
 *
 * A role whose step is a SQL function in payflow's database gathers its
 * claims as KIND_RUN: payflow.run_hook_steps claims the batch, runs the
 * hook for each step and completes them, in one transaction.
 */
#include "batch.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "payflow/clock.h"
#include "payflow/buf.h"

#define BATCH_MAX 10
#define BATCH_WINDOW_MS 5
/*
 * The claims a batch waits for are the messages of a receive, whose
 * executors wake one by one: on a busy machine not all of them within
 * BATCH_WINDOW_MS (with receives of ten, 6.5 steps a claim statement in the
 * pipeline bench). They come for certain, so waiting for them delays no
 * claim beyond the last executor's start; the window only bounds the wait
 * for a message its executor drops without a claim.
 */
#define BATCH_CLAIM_WINDOW_MS 20

typedef enum
{
	KIND_CLAIM,
	KIND_COMPLETE,
	KIND_FAIL,
	KIND_RUN,					/* claim, hook, complete: run_hook_steps */
	N_KINDS
} batch_kind;

typedef struct request
{
	const char *operation_id;
	char	   *item;			/* complete/fail: the item sent (JSON text), owned */
	const char *hook;			/* run: the hook function, the same for every request */

	/* set by the leader; read once done (under batch_lock) */
	bool		done;
	pf_result	r;
	pf_error	err;
	json_t	   *answer;
	double		lease_left_s;	/* claim: until the answer's leaseExpiresAt; < 0 unknown */
	pf_buf		input;			/* claim: the inline input */
	bool		has_input;
	json_t	   *completion;		/* run: complete_steps' answer, when the step was done */
	json_t	   *item_error;		/* run: the hook's error of a step claimed (answer set) */
	/* its thread waits here: for its row, or to be handed the lead */
	pthread_cond_t wake;
	struct request *next;
} request;

typedef struct batch_queue
{
	request    *head;
	request    *tail;
	int			n;
	bool		leader;			/* a thread gathers or runs a batch */
	int			want;			/* outcomes: how many the gathering leader waits for */
	pthread_cond_t more;		/* it waits here: signalled once they are in */
} batch_queue;

/*
 * Who waits is woken alone: a request when its row is in (or when the lead
 * passes to it), the gathering leader once as many requests as it waits
 * for are in (or its window ends). One condition variable for everything,
 * broadcast at every request and every batch's end, woke every waiting
 * executor of every kind each time to find nothing to do: 27.8 context
 * switches an operation in the payment worker, 13.6 after
 * (test/bench/README.md).
 */
static pthread_mutex_t batch_lock = PTHREAD_MUTEX_INITIALIZER;
static batch_queue queues[N_KINDS] = {
	{.more = PTHREAD_COND_INITIALIZER},
	{.more = PTHREAD_COND_INITIALIZER},
	{.more = PTHREAD_COND_INITIALIZER},
	{.more = PTHREAD_COND_INITIALIZER},
};

_Static_assert(N_KINDS == 4, "one initializer a kind");

/*
 * Messages dispatched whose executor has not yet asked for their claim nor
 * ended without one: the claims a gathering leader waits for. Under
 * batch_lock, like each job's claim_expected, so that a request leaves this
 * count as it enters its queue, never counted twice or not at all.
 */
static int	claims_to_come;

static bool
is_claim(batch_kind kind)
{
	return kind == KIND_CLAIM || kind == KIND_RUN;
}

/* Whether the gathering leader of q has what it waits for. Under batch_lock. */
static bool
batch_ready(batch_kind kind, const batch_queue *q)
{
	if (q->n >= BATCH_MAX)
		return true;
	return is_claim(kind) ? claims_to_come <= 0 : q->n >= q->want;
}

static const char *const batch_sql[N_KINDS] = {
	"SELECT c.item, c.answer, c.input, c.error, "
	"extract(epoch FROM (c.answer->>'leaseExpiresAt')::timestamptz - now()) "
	"FROM payflow.claim_steps($1, $2, $3::text[], $4::int) AS c",
	"SELECT c.item, c.answer, NULL, c.error, NULL FROM payflow.complete_steps($1, $2, $3::jsonb) AS c",
	"SELECT c.item, c.answer, NULL, c.error, NULL FROM payflow.fail_steps($1, $2, $3::jsonb) AS c",
	"SELECT c.item, c.answer, c.completion, c.error, "
	"extract(epoch FROM (c.answer->>'leaseExpiresAt')::timestamptz - now()) "
	"FROM payflow.run_hook_steps($1, $2, $5::regprocedure, $3::text[], $4::int) AS c",
};

/* One row of the batch's answer into its request. */
static void
take_row(batch_kind kind, PGresult *res, int row, request *req)
{
	json_error_t jerr;

	/* a hook that raised after its step was claimed: the claim stands */
	if (kind == KIND_RUN && !PQgetisnull(res, row, 3) && !PQgetisnull(res, row, 1))
		req->item_error = json_loads(PQgetvalue(res, row, 3), 0, &jerr);
	else if (!PQgetisnull(res, row, 3))
	{
		json_t	   *e = json_loads(PQgetvalue(res, row, 3), 0, &jerr);
		const char *code = json_string_value(json_object_get(e, "code"));
		const char *message = json_string_value(json_object_get(e, "message"));

		req->r = pf_error_set(&req->err, PF_ERR_FINAL, code ? code : "XX000", "%s", message ? message : "error");
		json_decref(e);
		return;
	}
	if (PQgetisnull(res, row, 1) || (req->answer = json_loads(PQgetvalue(res, row, 1), 0, &jerr)) == NULL)
	{
		req->r = pf_error_set(&req->err, PF_ERR_FINAL, "XX000", "no answer for this item");
		return;
	}
	if (!PQgetisnull(res, row, 4))
		req->lease_left_s = atof(PQgetvalue(res, row, 4));
	if (kind == KIND_RUN)
	{
		if (!PQgetisnull(res, row, 2))
			req->completion = json_loads(PQgetvalue(res, row, 2), 0, &jerr);
	}
	else if (!PQgetisnull(res, row, 2))
	{
		size_t		len = 0;
		unsigned char *bytes = PQunescapeBytea((const unsigned char *) PQgetvalue(res, row, 2), &len);

		if (bytes != NULL)
		{
			pf_buf_append(&req->input, (const char *) bytes, len);
			req->has_input = true;
			PQfreemem(bytes);
		}
	}
	req->r = PF_OK;
}

static int
compare_requests(const void *a, const void *b)
{
	return strcmp((*(request *const *) a)->operation_id, (*(request *const *) b)->operation_id);
}

/* Run one batch (the leader, without the lock). */
static void
run_batch(worker *w, batch_kind kind, request **reqs, int n)
{
	pf_buf		arg = PF_BUF_INIT;
	char		lease[16];
	const char *values[5];
	PGresult   *res = NULL;
	pf_error	err;
	pf_result	r;
	pf_pg	   *pg;

	/*
	 * In operation-id order, as the lease renewer sends its rows: the
	 * functions that go through their items one by one then lock in the
	 * renewer's order (a set-based fast path locks in its plan's order;
	 * there the renewer's lock_timeout gives way before a deadlock).
	 */
	qsort(reqs, (size_t) n, sizeof(*reqs), compare_requests);
	for (int i = 0; i < n; i++)
	{
		reqs[i]->r = PF_ERR_FINAL;
		reqs[i]->lease_left_s = -1;
	}
	if (kind == KIND_CLAIM || kind == KIND_RUN)
	{
		const char *ids[BATCH_MAX];

		for (int i = 0; i < n; i++)
			ids[i] = reqs[i]->operation_id;
		db_append_text_array(&arg, ids, n);
	}
	else
	{
		/* as text: a result is sent as the role wrote it (12.50 stays 12.50) */
		pf_buf_append_char(&arg, '[');
		for (int i = 0; i < n; i++)
		{
			if (i > 0)
				pf_buf_append_char(&arg, ',');
			pf_buf_append_str(&arg, reqs[i]->item);
		}
		pf_buf_append_char(&arg, ']');
	}
	snprintf(lease, sizeof(lease), "%d", w->lease_s);
	values[0] = w->role->step;
	values[1] = w->cfg.worker_id;
	values[2] = arg.data;
	values[3] = lease;
	values[4] = reqs[0]->hook;

	if ((pg = db_acquire(w->db, DB_WAIT_MS)) == NULL)
		r = pf_error_set(&err, PF_ERR_TRANSIENT, "53300", "no database connection free");
	else
	{
		r = pf_pg_run(pg, PF_PG_IDEMPOTENT, batch_sql[kind], kind == KIND_RUN ? 5 : kind == KIND_CLAIM ? 4 : 3,
					  values, NULL, NULL, 0, &res, &err);
		db_release(w->db, pg);
	}
	pf_buf_free(&arg);
	if (r != PF_OK)
	{
		for (int i = 0; i < n; i++)
		{
			reqs[i]->r = r;
			reqs[i]->err = err;
		}
		return;
	}
	for (int i = 0; i < n; i++)
		pf_error_set(&reqs[i]->err, PF_ERR_FINAL, "XX000", "the batch gave no row for this item");
	for (int row = 0; row < PQntuples(res); row++)
	{
		int			item = atoi(PQgetvalue(res, row, 0));

		if (item >= 1 && item <= n)
			take_row(kind, res, row, reqs[item - 1]);
	}
	PQclear(res);
}

void
batch_claim_expected(job *j)
{
	pthread_mutex_lock(&batch_lock);
	j->claim_expected = true;
	claims_to_come++;
	pthread_mutex_unlock(&batch_lock);
}

void
batch_claim_forgone(job *j)
{
	pthread_mutex_lock(&batch_lock);
	if (j->claim_expected)
	{
		j->claim_expected = false;
		claims_to_come--;
		/* a leader may have waited for it alone */
		for (int k = 0; k < N_KINDS; k++)
			if (is_claim((batch_kind) k) && queues[k].leader && batch_ready((batch_kind) k, &queues[k]))
				pthread_cond_signal(&queues[k].more);
	}
	pthread_mutex_unlock(&batch_lock);
}

/*
 * The most outcomes a batch may wait for: the executors holding a message
 * (a completion never counts queued jobs: their steps have not run yet).
 */
static int
executors_busy(worker *w)
{
	int			busy = 0;

	pthread_mutex_lock(&w->lock);
	for (int i = 0; i < w->concurrency; i++)
		if (w->executors[i].current != NULL)
			busy++;
	pthread_mutex_unlock(&w->lock);
	return busy;
}

/*
 * Queue req (of job j, for a claim), and wait until some leader (perhaps
 * this thread) has run it.
 */
static void
submit(worker *w, batch_kind kind, job *j, request *req)
{
	batch_queue *q = &queues[kind];

	/* before batch_lock: never both at once */
	int			busy = is_claim(kind) ? 0 : executors_busy(w);

	pthread_cond_init(&req->wake, NULL);
	pthread_mutex_lock(&batch_lock);
	if (j != NULL && j->claim_expected)
	{
		j->claim_expected = false;
		claims_to_come--;
	}
	req->next = NULL;
	if (q->tail)
		q->tail->next = req;
	else
		q->head = req;
	q->tail = req;
	q->n++;
	if (q->leader && batch_ready(kind, q))
		pthread_cond_signal(&q->more);
	while (!req->done)
	{
		request    *batch[BATCH_MAX];
		struct timespec until;
		int			n = 0;

		/*
		 * A thread enqueues and then waits, or leads, under one hold of the
		 * lock: whoever is queued and not leading waits on its own wake,
		 * so a signal to it is never lost.
		 */
		if (q->leader)
		{
			pthread_cond_wait(&req->wake, &batch_lock);
			continue;
		}
		q->leader = true;
		q->want = busy < BATCH_MAX ? busy : BATCH_MAX;
		pf_deadline_in(&until, CLOCK_REALTIME, is_claim(kind) ? BATCH_CLAIM_WINDOW_MS : BATCH_WINDOW_MS);
		while (!batch_ready(kind, q) &&
			   pthread_cond_timedwait(&q->more, &batch_lock, &until) != ETIMEDOUT)
			;
		while (q->head && n < BATCH_MAX)
		{
			batch[n++] = q->head;
			q->head = q->head->next;
			q->n--;
		}
		if (q->head == NULL)
			q->tail = NULL;
		pthread_mutex_unlock(&batch_lock);

		run_batch(w, kind, batch, n);

		pthread_mutex_lock(&batch_lock);
		for (int i = 0; i < n; i++)
		{
			batch[i]->done = true;
			/* (its thread returns, and its request goes, once we unlock) */
			if (batch[i] != req)
				pthread_cond_signal(&batch[i]->wake);
		}
		q->leader = false;
		/*
		 * The lead passes to the first request still queued (this thread
		 * keeps it while its own is one of them). A newcomer may take it
		 * first: the woken one then waits again, in the newcomer's batch.
		 */
		if (req->done && q->head != NULL)
			pthread_cond_signal(&q->head->wake);
	}
	pthread_mutex_unlock(&batch_lock);
	pthread_cond_destroy(&req->wake);
}

/*
 * Queue a claim of kind (KIND_CLAIM, KIND_RUN) and wait for its row: the
 * answer into *claim. The caller takes what else it needs from req and
 * frees it (request_free).
 */
static pf_result
claim_and_wait(worker *w, batch_kind kind, job *j, request *req, step_claim *claim, pf_error *err)
{
	pf_result	r;

	memset(claim, 0, sizeof(*claim));
	claim->lease_left_s = -1;
	submit(w, kind, j, req);
	r = req->r;
	if (r == PF_OK)
		r = db_claim_from_answer(req->answer, claim, err);
	else
		*err = req->err;
	if (r == PF_OK)
		claim->lease_left_s = req->lease_left_s;
	return r;
}

static void
request_free(request *req)
{
	json_decref(req->answer);
	json_decref(req->completion);
	json_decref(req->item_error);
	pf_buf_free(&req->input);
}

pf_result
batch_claim(worker *w, job *j, const char *operation_id, step_claim *claim, pf_buf *input, bool *has_input,
			pf_error *err)
{
	request		req;
	pf_result	r;

	memset(&req, 0, sizeof(req));
	req.operation_id = operation_id;
	*has_input = false;
	r = claim_and_wait(w, KIND_CLAIM, j, &req, claim, err);
	if (r == PF_OK && req.has_input)
	{
		pf_buf_append(input, req.input.data, req.input.len);
		*has_input = true;
	}
	request_free(&req);
	return r;
}

pf_result
batch_claim_run_complete(worker *w, job *j, const char *hook, const char *operation_id, step_claim *claim,
						 json_t **completion, json_t **hook_error, pf_error *err)
{
	request		req;
	pf_result	r;

	memset(&req, 0, sizeof(req));
	req.operation_id = operation_id;
	req.hook = hook;
	*completion = NULL;
	*hook_error = NULL;
	r = claim_and_wait(w, KIND_RUN, j, &req, claim, err);
	if (r == PF_OK)
	{
		/* handed over: not freed with the request */
		*completion = req.completion;
		*hook_error = req.item_error;
		req.completion = req.item_error = NULL;
	}
	request_free(&req);
	return r;
}

/* complete_steps / fail_steps of one item */
static pf_result
submit_outcome(worker *w, batch_kind kind, const char *operation_id, char *item, json_t **answer, pf_error *err)
{
	request		req;

	memset(&req, 0, sizeof(req));
	req.operation_id = operation_id;
	req.item = item;
	submit(w, kind, NULL, &req);
	free(item);
	*answer = req.answer;
	if (req.r != PF_OK)
		*err = req.err;
	return req.r;
}

pf_result
batch_complete(worker *w, const char *operation_id, const char *lease_token, const char *result, json_t *result_ref,
			   json_t **answer, pf_error *err)
{
	json_error_t jerr;
	json_t	   *doc = json_loads(result, 0, &jerr);
	json_t	   *id = json_string(operation_id);
	char	   *id_text = json_dumps(id, JSON_ENCODE_ANY);
	char	   *ref_text = result_ref ? json_dumps(result_ref, JSON_COMPACT) : NULL;
	pf_buf		item = PF_BUF_INIT;

	*answer = NULL;
	/* checked here: one item that is no JSON would fail the whole statement */
	if (doc == NULL || id_text == NULL)
	{
		json_decref(doc);
		json_decref(id);
		free(id_text);
		free(ref_text);
		return pf_error_set(err, PF_ERR_FINAL, "22P02", "the result is not JSON: %s", doc ? "" : jerr.text);
	}
	json_decref(doc);
	json_decref(id);
	pf_buf_append_str(&item, "{\"operationId\":");
	pf_buf_append_str(&item, id_text);
	pf_buf_append_str(&item, ",\"result\":");
	pf_buf_append_str(&item, result);
	pf_buf_append_str(&item, ",\"resultRef\":");
	pf_buf_append_str(&item, ref_text ? ref_text : "null");
	if (lease_token != NULL)
	{
		json_t	   *token = json_string(lease_token);
		char	   *token_text = json_dumps(token, JSON_ENCODE_ANY);

		pf_buf_append_str(&item, ",\"leaseToken\":");
		pf_buf_append_str(&item, token_text ? token_text : "null");
		free(token_text);
		json_decref(token);
	}
	pf_buf_append_char(&item, '}');
	free(id_text);
	free(ref_text);
	return submit_outcome(w, KIND_COMPLETE, operation_id, item.data, answer, err);
}

pf_result
batch_fail(worker *w, const char *operation_id, const char *lease_token, json_t *error, bool retryable,
		   json_t **answer, pf_error *err)
{
	json_t	   *item = json_pack("{s:s,s:O,s:b,s:s*}", "operationId", operation_id, "error", error,
								 "retryable", retryable, "leaseToken", lease_token);
	char	   *text = json_dumps(item, JSON_COMPACT);

	json_decref(item);
	return submit_outcome(w, KIND_FAIL, operation_id, text, answer, err);
}
