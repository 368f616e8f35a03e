/*
 * submit_batch.c
 *		POST /payments' submits: alone while the load is light, gathered
 *		into payflow.submit_many while they wait (submit_batch.h).
 */
#include "api.h"
#include "submit_batch.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "payflow/backoff.h"
#include "payflow/buf.h"

#define BATCH_MAX 100			/* submit_many takes up to 1,000 */
#define BATCH_MAX_BYTES (1024 * 1024)

/*
 * authenticate binds the key's tenant to the transaction first (OFFSET 0
 * keeps it a subquery of its own, run before the submit); the status is
 * that of an operation the key already named (NULL, so "PENDING", for a
 * new one: the statement's snapshot predates it).
 */
static const char SUBMIT_SQL[] =
"SELECT s.id, o.status FROM ("
"  SELECT payflow.submit($2, $3::jsonb, $4, $5, $6::integer, $7) AS id FROM payflow.authenticate($1) OFFSET 0) s"
"  LEFT JOIN payflow.operations o ON o.id = s.id";

/*
 * The same for a batch; submit_many's argument names the tenant, so it runs
 * after authenticate. The status is a probe of the key per row: a join
 * would be planned for the thousand rows a set-returning function is
 * guessed to return, as a scan of every operation.
 */
static const char SUBMIT_MANY_SQL[] =
"SELECT s.item, s.operation_id, (SELECT o.status FROM payflow.operations o WHERE o.id = s.operation_id)"
"  FROM (SELECT payflow.authenticate($1) OFFSET 0) k(tenant)"
"  CROSS JOIN LATERAL payflow.submit_many(CASE WHEN k.tenant IS NOT NULL THEN $2::jsonb END) s";

struct api_submits
{
	pthread_mutex_t lock;
	pthread_condattr_t clock;	/* CLOCK_MONOTONIC, for each request's wake */
	api_submit *head;			/* waiting, not taken, in arrival order */
	api_submit *tail;
	int			running;		/* submit statements under way */
	int			limit;
	unsigned long long statements;	/* for /metrics */
	unsigned long long requests;
};

api_submits *
api_submits_create(int pool_size)
{
	api_submits *q = pf_calloc(1, sizeof(*q));

	pthread_mutex_init(&q->lock, NULL);
	pthread_condattr_init(&q->clock);
	pthread_condattr_setclock(&q->clock, CLOCK_MONOTONIC);
	/*
	 * All the pool's connections but one: the other endpoints (status,
	 * /readyz, /metrics) keep a connection under a storm of POSTs. Not
	 * fewer: gathering is for requests that would wait for a connection
	 * anyway, not a reason to hold back one that could run at once.
	 */
	q->limit = pool_size > 1 ? pool_size - 1 : 1;
	return q;
}

void
api_submits_destroy(api_submits *q)
{
	if (q == NULL)
		return;
	pthread_condattr_destroy(&q->clock);
	pthread_mutex_destroy(&q->lock);
	free(q);
}

void
api_submits_render(api_submits *q, pf_buf *out)
{
	unsigned long long statements;
	unsigned long long requests;
	int			waiting = 0;

	pthread_mutex_lock(&q->lock);
	statements = q->statements;
	requests = q->requests;
	for (api_submit *c = q->head; c != NULL; c = c->next)
		waiting++;
	pthread_mutex_unlock(&q->lock);
	pf_buf_appendf(out, "# HELP payflow_api_submit_statements_total Statements run for POST /payments' submits "
				   "(one per request, or one submit_many for several; a failed submit_many, then one per request).\n"
				   "# TYPE payflow_api_submit_statements_total counter\npayflow_api_submit_statements_total %llu\n"
				   "# HELP payflow_api_submit_requests_total Requests those statements answered.\n"
				   "# TYPE payflow_api_submit_requests_total counter\npayflow_api_submit_requests_total %llu\n"
				   "# HELP payflow_api_submits_waiting POST /payments' requests waiting for a submit statement.\n"
				   "# TYPE payflow_api_submits_waiting gauge\npayflow_api_submits_waiting %d\n",
				   statements, requests, waiting);
}

/* ,"name":<value as a JSON string>; false if the value is no valid UTF-8 */
static bool
append_member(pf_buf *b, const char *name, const char *value)
{
	json_t	   *s;
	char	   *text;

	if (value == NULL)
		return true;
	if ((s = json_string(value)) == NULL)
		return false;
	text = json_dumps(s, JSON_ENCODE_ANY);
	json_decref(s);
	if (text == NULL)
		return false;
	pf_buf_appendf(b, ",\"%s\":%s", name, text);
	free(text);
	return true;
}

/* The request as a submit_many item, or NULL when it must run alone. */
static char *
make_item(const api_submit *s)
{
	pf_buf		b = PF_BUF_INIT;

	pf_buf_append_str(&b, "{\"details\":");
	pf_buf_append_str(&b, s->details);
	if (append_member(&b, "payment_id", s->payment_id) && append_member(&b, "idempotency_key", s->idempotency_key) &&
		append_member(&b, "correlation_id", s->correlation_id) && append_member(&b, "traceparent", s->traceparent))
	{
		if (s->priority != NULL)
			pf_buf_appendf(&b, ",\"priority\":%s", s->priority);
		pf_buf_append_char(&b, '}');
		return pf_buf_steal(&b);
	}
	pf_buf_free(&b);
	return NULL;
}

static void
take_answer(api_submit *s, PGresult *res, int row, int id_column)
{
	snprintf(s->operation_id, sizeof(s->operation_id), "%s", PQgetvalue(res, row, id_column));
	snprintf(s->status, sizeof(s->status), "%s",
			 PQgetisnull(res, row, id_column + 1) ? "PENDING" : PQgetvalue(res, row, id_column + 1));
	s->r = PF_OK;
}

static void
run_alone(api_slot *slot, api_submit *s)
{
	const char *values[7] = {s->api_key, s->payment_id, s->details, s->idempotency_key, s->correlation_id,
	s->priority, s->traceparent};
	PGresult   *res = NULL;

	s->r = pf_pg_exec(slot->pg, SUBMIT_SQL, 7, values, &res, &s->err);
	if (s->r != PF_OK)
		return;
	if (PQntuples(res) == 1 && !PQgetisnull(res, 0, 0))
		take_answer(s, res, 0, 0);
	else
		s->r = pf_error_set(&s->err, PF_ERR_FINAL, "XX000", "payflow.submit returned no operation id");
	PQclear(res);
}

/*
 * One submit_many for batch[0..n). PF_OK: every request has its answer.
 * Else the statement failed as a whole, with err.
 */
static pf_result
run_together(api_slot *slot, api_submit **batch, int n, pf_error *err)
{
	pf_buf		items = PF_BUF_INIT;
	const char *values[2];
	PGresult   *res = NULL;
	pf_result	r;

	pf_buf_append_char(&items, '[');
	for (int i = 0; i < n; i++)
	{
		if (i > 0)
			pf_buf_append_char(&items, ',');
		pf_buf_append_str(&items, batch[i]->item);
	}
	pf_buf_append_char(&items, ']');
	values[0] = batch[0]->api_key;
	values[1] = items.data;
	r = pf_pg_exec(slot->pg, SUBMIT_MANY_SQL, 2, values, &res, err);
	pf_buf_free(&items);
	if (r != PF_OK)
		return r;
	for (int i = 0; i < n; i++)
		batch[i]->r = pf_error_set(&batch[i]->err, PF_ERR_FINAL, "XX000", "payflow.submit_many gave no row for it");
	for (int row = 0; row < PQntuples(res); row++)
	{
		int			item = atoi(PQgetvalue(res, row, 0));

		if (item >= 1 && item <= n && !PQgetisnull(res, row, 1))
			take_answer(batch[item - 1], res, row, 1);
	}
	PQclear(res);
	return PF_OK;
}

/* Run batch[0..n): every request answered. Returns the statements it took. */
static int
run_batch(api_context *ctx, api_submit **batch, int n)
{
	api_slot   *slot = api_pool_acquire(&ctx->pool);
	pf_error	err;
	pf_result	r;

	for (int i = 0; i < n; i++)
		batch[i]->batch_size = n;
	if (slot == NULL)
	{
		for (int i = 0; i < n; i++)
			batch[i]->pool_exhausted = true;
		return 0;
	}
	if (n == 1)
		run_alone(slot, batch[0]);
	else if ((r = run_together(slot, batch, n, &err)) != PF_OK)
	{
		/*
		 * Transient, or the key (28000): what each would have got alone.
		 * Else one request's fault failed them all: each alone, for its own
		 * answer.
		 */
		bool		shared = r == PF_ERR_TRANSIENT || strcmp(err.code, "28000") == 0;

		for (int i = 0; i < n; i++)
		{
			batch[i]->batch_size = 1;
			if (shared)
			{
				batch[i]->r = r;
				batch[i]->err = err;
			}
			else
				run_alone(slot, batch[i]);
		}
		api_pool_release(&ctx->pool, slot);
		return shared ? 1 : 1 + n;
	}
	api_pool_release(&ctx->pool, slot);
	return 1;
}

static void
unlink_request(api_submits *q, api_submit *s)
{
	api_submit *prev = NULL;

	for (api_submit *c = q->head; c != NULL; prev = c, c = c->next)
		if (c == s)
		{
			if (prev)
				prev->next = c->next;
			else
				q->head = c->next;
			if (q->tail == c)
				q->tail = prev;
			c->next = NULL;
			return;
		}
}

/* s, at the queue's head, and the waiting requests that can go with it. */
static int
take_batch(api_submits *q, api_submit *s, api_submit **batch)
{
	int			n = 0;
	size_t		bytes = s->item ? strlen(s->item) : 0;
	api_submit *c;

	unlink_request(q, s);
	s->taken = true;
	batch[n++] = s;
	for (c = q->head; s->item != NULL && c != NULL && n < BATCH_MAX;)
	{
		api_submit *next = c->next;
		size_t		len = c->item ? strlen(c->item) : 0;

		if (c->item != NULL && strcmp(c->api_key, s->api_key) == 0 && bytes + len <= BATCH_MAX_BYTES)
		{
			unlink_request(q, c);
			c->taken = true;
			batch[n++] = c;
			bytes += len;
		}
		c = next;
	}
	return n;
}

/*
 * The queue's head is the one request that may take a turn: woken when it
 * becomes the head or a statement ends (one thread, not every waiting one).
 */
static void
wake_head(api_submits *q)
{
	if (q->head != NULL)
		pthread_cond_signal(&q->head->wake);
}

/*
 * A turn for batch[0..n) (taken, out of the queue), with q->lock held:
 * released while the statement runs, held again when it returns, every
 * request of the batch answered and woken, and the queue's head too.
 */
static void
take_turn(api_context *ctx, api_submits *q, api_submit **batch, int n)
{
	int			statements;

	q->running++;
	wake_head(q);				/* the next head may have a turn too */
	pthread_mutex_unlock(&q->lock);

	statements = run_batch(ctx, batch, n);

	pthread_mutex_lock(&q->lock);
	q->running--;
	q->statements += (unsigned long long) statements;
	q->requests += statements > 0 ? (unsigned long long) n : 0;
	for (int i = 0; i < n; i++)
	{
		batch[i]->done = true;
		pthread_cond_signal(&batch[i]->wake);
	}
	wake_head(q);
}

void
api_submit_run(api_context *ctx, api_submit *s)
{
	api_submits *q = ctx->submits;
	struct timespec deadline;

	s->item = NULL;
	s->taken = s->done = s->pool_exhausted = false;
	s->next = NULL;
	s->batch_size = 1;
	s->r = PF_ERR_FINAL;
	pf_error_clear(&s->err);
	pthread_cond_init(&s->wake, &q->clock);
	/* as long as a request waits for a connection, then 503 */
	pf_deadline_in(&deadline, CLOCK_MONOTONIC, ctx->pool.wait_ms);

	pthread_mutex_lock(&q->lock);
	if (q->head == NULL && q->running < q->limit)
	{
		/* no one waits and a turn is free: alone, no item made */
		s->taken = true;
		take_turn(ctx, q, &s, 1);
	}
	else
	{
		/* its submit_many item, made outside the lock */
		pthread_mutex_unlock(&q->lock);
		s->item = make_item(s);
		pthread_mutex_lock(&q->lock);
		if (q->tail)
			q->tail->next = s;
		else
			q->head = s;
		q->tail = s;
	}
	while (!s->done)
	{
		if (!s->taken && q->head == s && q->running < q->limit)
		{
			api_submit *batch[BATCH_MAX];

			take_turn(ctx, q, batch, take_batch(q, s, batch));
		}
		else if (s->taken)
			pthread_cond_wait(&s->wake, &q->lock);	/* its leader answers it */
		else if (pthread_cond_timedwait(&s->wake, &q->lock, &deadline) == ETIMEDOUT)
		{
			unlink_request(q, s);
			s->pool_exhausted = true;
			s->done = true;
			wake_head(q);
		}
	}
	pthread_mutex_unlock(&q->lock);
	pthread_cond_destroy(&s->wake);
	free(s->item);
	s->item = NULL;
}
