/*
 * step.c
 *		One message on an executor thread: parse the event, claim the step,
 *		read its input through the claim check, let the role do the work,
 *		and commit the outcome (complete_step or fail_step). What the main
 *		thread should then do with the message is left in job->outcome: it
 *		is deleted only after that commit.
 */
#include "worker.h"

#include "batch.h"
#include "stack_trim.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "payflow/aws_client.h"
#include "payflow/aws_credentials.h"
#include "payflow/backoff.h"
#include "payflow/buf.h"
#include "payflow/payload_ref.h"
#include "payflow/s3.h"
#include "payflow/store.h"

/* SQS's largest visibility timeout */
#define MAX_HIDE_SECONDS 43200
#define SLEEP_SLICE_MS 100

/* An executor's own S3 client, made when a payload lives in S3. */
typedef struct executor_s3
{
	pf_aws_credentials_provider *credentials;
	pf_aws_client *aws;
	pf_s3	   *s3;
} executor_s3;

static pf_s3 *
executor_s3_client(worker *w, executor *ex, pf_error *err)
{
	executor_s3 *es = ex->store_s3;

	if (es == NULL)
	{
		pf_aws_credentials_provider *credentials = pf_aws_credentials_provider_create(&w->cfg, err);

		if (credentials == NULL)
			return NULL;
		es = pf_calloc(1, sizeof(*es));
		es->credentials = credentials;
		es->aws = pf_aws_client_create(&w->cfg, credentials);
		es->s3 = pf_s3_create(es->aws, &w->cfg);
		ex->store_s3 = es;
	}
	return es->s3;
}

void
step_executor_cleanup(executor *ex)
{
	executor_s3 *es = ex->store_s3;

	if (es == NULL)
		return;
	pf_s3_destroy(es->s3);
	pf_aws_client_destroy(es->aws);
	pf_aws_credentials_provider_destroy(es->credentials);
	free(es);
	ex->store_s3 = NULL;
}

/* ---- services for roles ---- */

stop_reason
step_stop_requested(step_run *run)
{
	stop_reason r;

	pthread_mutex_lock(&run->w->lock);
	r = run->job->stop;
	pthread_mutex_unlock(&run->w->lock);
	return r;
}

void
step_call_started(step_run *run, int timeout_s)
{
	/* the call may wait for minutes: what the steps before it touched goes back */
	stack_trim();
	pthread_mutex_lock(&run->w->lock);
	run->job->call_deadline_ms = pf_now_ms() + (int64_t) timeout_s * 1000;
	run->job->interrupted = false;
	pthread_mutex_unlock(&run->w->lock);
}

void
step_call_finished(step_run *run)
{
	pthread_mutex_lock(&run->w->lock);
	run->job->call_deadline_ms = 0;
	pthread_mutex_unlock(&run->w->lock);
}

bool
step_sleep(step_run *run, int ms)
{
	int64_t		until = pf_now_ms() + ms;

	for (;;)
	{
		int64_t		left = until - pf_now_ms();

		if (step_stop_requested(run) != STOP_NONE)
			return false;
		if (left <= 0)
			return true;
		pf_sleep_ms(left < SLEEP_SLICE_MS ? (int) left : SLEEP_SLICE_MS);
	}
}

pf_result
step_save_external_ref(step_run *run, const char *ref, pf_error *err)
{
	worker	   *w = run->w;
	pf_pg	   *pg = db_acquire(w->db, DB_WAIT_MS);
	pf_result	r;

	if (pg == NULL)
		return pf_error_set(err, PF_ERR_TRANSIENT, "53300", "no database connection free");
	r = db_save_step_ref(pg, run->operation_id, w->role->step, w->cfg.worker_id, ref, run->lease_token, err);
	db_release(w->db, pg);
	return r;
}

const char *
step_run_step_name(const step_run *run)
{
	return run->w->role->step;
}

void
step_set_error(step_run *run, const char *code, const char *message, json_t *extra)
{
	json_t	   *e = json_pack("{s:s,s:s}", "code", code ? code : "error", "message", message ? message : "");

	if (extra)
	{
		json_object_update(e, extra);
		json_decref(extra);
	}
	json_decref(run->error);
	run->error = e;
}

/*
 * The step's outcome is about to be committed. From then on a renewal round
 * that finds the step no longer RUNNING under this worker may be seeing that
 * commit, not a takeover: the commit's own answer (PF004) says which.
 */
void
step_reporting(step_run *run)
{
	pthread_mutex_lock(&run->w->lock);
	run->job->reporting = true;
	pthread_mutex_unlock(&run->w->lock);
}

/* A commit refused with PF004: the loss, unless a renewal round counted it already. */
void
step_count_lost_lease(step_run *run)
{
	if (step_stop_requested(run) != STOP_LEASE_LOST)
		atomic_fetch_add(&run->w->stats.leases_lost, 1);
}

pf_result
step_complete_with_sql(step_run *run, const char *sql, int n_extra, const char *const *extra, pf_error *err)
{
	worker	   *w = run->w;
	const char **values = pf_calloc((size_t) n_extra + 2, sizeof(char *));
	json_t	   *answer = NULL;
	pf_pg	   *pg;
	pf_result	r;

	values[0] = run->operation_id;
	values[1] = w->cfg.worker_id;
	for (int i = 0; i < n_extra; i++)
		values[2 + i] = extra[i];
	step_reporting(run);
	if ((pg = db_acquire(w->db, DB_WAIT_MS)) == NULL)
		r = pf_error_set(err, PF_ERR_TRANSIENT, "53300", "no database connection free");
	else
	{
		r = db_exec_json(pg, sql, n_extra + 2, values, &answer, err);
		db_release(w->db, pg);
	}
	free(values);
	if (r == PF_OK)
	{
		json_decref(run->completion);
		run->completion = answer;
	}
	return r;
}

/* ---- one message ---- */

/*
 * Ends the attempt's span once step_execute is done with the message (the
 * executor calls it under worker.lock: the heartbeat adds to the span).
 */
void
step_attempt_span_end(job *j)
{
	static const char *const outcomes[] = {"leave", "delete", "release", "hide"};

	pf_span_set_str(&j->otel, "payflow.message.outcome",
					(int) j->outcome >= 0 && (size_t) j->outcome < sizeof(outcomes) / sizeof(outcomes[0])
					? outcomes[j->outcome] : "unknown");
	pf_span_end(&j->otel);
}

static const char *
status_class(step_status status)
{
	switch (status)
	{
		case STEP_SUCCEEDED:
			return "succeeded";
		case STEP_RETRYABLE:
			return "retryable";
		case STEP_PERMANENT:
			return "permanent";
		case STEP_ABANDONED:
			return "abandoned";
		case STEP_COMMITTED:
			return "committed";
	}
	return "unknown";
}

/*
 * A span of a database call of this attempt (claim, completion): db
 * attributes only, never the statement's values.
 */
static void
db_span_begin(pf_span *span, const job *j, const char *function)
{
	char		name[64];

	snprintf(name, sizeof(name), "payflow.%s", function);
	pf_span_begin(span, name, PF_SPAN_CLIENT, &j->otel.ctx);
	pf_span_set_str(span, "db.system", "postgresql");
	pf_span_set_str(span, "db.operation.name", function);
}

static void
db_span_end(pf_span *span, pf_result r, const pf_error *err)
{
	if (r != PF_OK)
	{
		pf_span_set_str(span, "db.response.status_code", err->code);
		pf_span_set_error(span, err->code);
	}
	pf_span_end(span);
}

/* A log line about a message: its id and receive count ride along. */
static void log_job(pf_log_level level, const pf_log_ids *ids, const job *j, json_t *fields,
					const char *fmt,...) __attribute__((format(printf, 5, 6)));

static void
log_job(pf_log_level level, const pf_log_ids *ids, const job *j, json_t *fields, const char *fmt,...)
{
	char		text[1024];
	va_list		ap;

	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	if (fields == NULL)
		fields = json_object();
	json_object_set_new(fields, "messageId", json_string(j->msg->id));
	json_object_set_new(fields, "receiveCount", json_integer(j->msg->receive_count));
	pf_log_write(level, ids, fields, "%s", text);
}

/*
 * A message no worker can handle: log it and leave it to the queue's
 * redrive policy. On its last receive before the DLQ it is also kept in
 * payflow.dead_letters, where operators look.
 */
static void
bad_message(worker *w, job *j, const char *code, const char *why)
{
	transport_message *m = j->msg;
	int			max = w->transport->max_receive_count;
	json_t	   *body = json_loadb(m->body, m->body_len, 0, NULL);
	const char *op = json_string_value(json_object_get(body, "operationId"));
	pf_log_ids	ids = {op && pf_operation_id_valid(op) ? op : NULL,
	json_string_value(json_object_get(body, "eventId")), NULL, j->otel.ctx.trace_id, j->otel.ctx.span_id};

	j->outcome = OUTCOME_LEAVE;
	log_job(PF_LOG_WARN, &ids, j, json_pack("{s:s,s:i}", "code", code, "maxReceiveCount", max),
			"message left to the queue's redrive policy: %s", why);
	if (max > 0 && m->receive_count >= max)
	{
		pf_pg	   *pg = db_acquire(w->db, DB_WAIT_MS);
		char	   *text = pf_strndup(m->body, m->body_len);
		json_t	   *error = json_pack("{s:s,s:s,s:s,s:i}", "code", code, "message", why, "messageId", m->id,
									  "receiveCount", m->receive_count);

		/* where a person looks for it: the trace of the message's operation (or its own) */
		if (j->otel.ctx.trace_id[0])
			json_object_set_new(error, "traceId", json_string(j->otel.ctx.trace_id));
		pf_error	err;

		pf_utf8_sanitize(text, strlen(text));
		if (pg != NULL && db_record_dead_letter(pg, w->transport->queue_name, text, error, ids.operation_id,
												&err) == PF_OK)
			log_job(PF_LOG_WARN, &ids, j, NULL, "%s", "recorded as a dead letter; the queue moves it to its DLQ");
		else
			log_job(PF_LOG_ERROR, &ids, j, json_pack("{s:s}", "code", pg ? err.code : "53300"),
					"cannot record the dead letter: %s", pg ? err.message : "no database connection free");
		db_release(w->db, pg);
		json_decref(error);
		free(text);
	}
	json_decref(body);
}

void
step_bad_message(step_run *run, const char *code, const char *why)
{
	bad_message(run->w, run->job, code, why);
}

/*
 * The installation's payload checksum key, read from the database on first
 * use (payflow.payload_mac_key()); pg may be NULL, then a connection is
 * taken for it. False with err set when it cannot be read.
 */
static bool
payload_mac(worker *w, pf_pg *pg, pf_checksum_key *key, pf_error *err)
{
	pf_pg	   *own = NULL;
	pf_result	r;

	pthread_mutex_lock(&w->lock);
	*key = w->payload_mac;
	pthread_mutex_unlock(&w->lock);
	if (key->set)
		return true;
	if (pg == NULL && (pg = own = db_acquire(w->db, DB_WAIT_MS)) == NULL)
	{
		pf_error_set(err, PF_ERR_TRANSIENT, "53300", "no database connection free to read the payload key");
		return false;
	}
	r = pf_checksum_key_load(pg, key, err);
	if (own)
		db_release(w->db, own);
	if (r != PF_OK)
		return false;
	pthread_mutex_lock(&w->lock);
	w->payload_mac = *key;
	pthread_mutex_unlock(&w->lock);
	return true;
}

/* Read the step's input through the claim check; STEP_SUCCEEDED when read. */
static step_status
read_input(worker *w, executor *ex, const step_claim *claim, const pf_event *ev, pf_buf *input, step_run *run)
{
	pf_payload_ref ref;
	pf_error	err;
	pf_result	r;
	pf_pg	   *pg;
	pf_s3	   *s3 = NULL;
	pf_store   *store;
	pf_checksum_key mac;

	memset(&ref, 0, sizeof(ref));
	if (claim->input != NULL)
	{
		if (pf_payload_ref_from_json(claim->input, &ref, &err) != PF_OK)
		{
			step_set_error(run, "invalid_input_ref", err.message, NULL);
			return STEP_PERMANENT;
		}
	}
	else if (ev->has_ref)
		pf_payload_ref_copy(&ref, &ev->ref);
	else
	{
		step_set_error(run, "missing_input", "the step has no input reference", NULL);
		return STEP_PERMANENT;
	}

	if (ref.store == PF_STORE_S3 && (s3 = executor_s3_client(w, ex, &err)) == NULL)
	{
		pf_payload_ref_free(&ref);
		step_set_error(run, err.code, err.message, NULL);
		return STEP_RETRYABLE;
	}
	if ((pg = db_acquire(w->db, DB_WAIT_MS)) == NULL)
	{
		pf_payload_ref_free(&ref);
		step_set_error(run, "53300", "no database connection free to read the input", NULL);
		return STEP_RETRYABLE;
	}
	if (!payload_mac(w, pg, &mac, &err))
	{
		db_release(w->db, pg);
		pf_payload_ref_free(&ref);
		step_set_error(run, err.code, err.message, NULL);
		return err.result == PF_ERR_TRANSIENT ? STEP_RETRYABLE : STEP_PERMANENT;
	}
	store = pf_store_create(pg, s3, &w->cfg);
	pf_store_set_checksum_key(store, &mac);
	r = pf_store_read(store, &ref, input, &err);
	pf_store_destroy(store);
	db_release(w->db, pg);

	if (r != PF_OK)
	{
		json_t	   *extra = json_pack("{s:s,s:s}", "payloadKey", ref.key ? ref.key : "",
									  "store", pf_store_kind_name(ref.store));

		pf_payload_ref_free(&ref);
		switch (r)
		{
			case PF_ERR_CHECKSUM:
				step_set_error(run, "PF005", err.message, extra);
				return STEP_PERMANENT;
			case PF_ERR_NOT_FOUND:
				step_set_error(run, "payload_missing", err.message, extra);
				return STEP_PERMANENT;
			case PF_ERR_TRANSIENT:
				step_set_error(run, err.code, err.message, extra);
				return STEP_RETRYABLE;
			default:
				step_set_error(run, err.code[0] ? err.code : "invalid_input", err.message, extra);
				return STEP_PERMANENT;
		}
	}
	pf_payload_ref_free(&ref);
	return STEP_SUCCEEDED;
}

/*
 * The S3 name of an attempt's result: the step's resultName with the
 * attempt before its extension ("payment-result.attempt-2.json").  Each
 * attempt writes its own object, so a worker that lost its lease and
 * writes late cannot change the object a newer attempt's completion
 * references (S3 objects are overwritable; the pg store refuses such a
 * write instead: payload_put checks the lease).
 */
static void
attempt_result_name(const char *result_name, int attempt, char *out, size_t size)
{
	const char *dot = strrchr(result_name, '.');
	int			base = dot ? (int) (dot - result_name) : (int) strlen(result_name);

	snprintf(out, size, "%.*s.attempt-%d%s", base, result_name, attempt, dot ? dot : "");
}

/*
 * With PAYFLOW_STORE=s3 the result goes to S3, under the name the claim
 * answer gives it (the step's resultName) with the attempt in it, and
 * complete_step gets its ref.
 */
static pf_result
store_result(worker *w, executor *ex, step_run *run, const char *text, json_t **result_ref, pf_error *err)
{
	char		name[160];
	pf_s3	   *s3;
	pf_store   *store;
	pf_payload_ref ref;
	pf_result	r;
	pf_checksum_key mac;

	*result_ref = NULL;
	if (w->cfg.store != PF_STORE_S3 || run->result_name == NULL)
		return PF_OK;			/* the extension writes it into its own store, or keeps it inline */
	attempt_result_name(run->result_name, run->attempt, name, sizeof(name));
	if ((s3 = executor_s3_client(w, ex, err)) == NULL)
		return err->result;
	if (!payload_mac(w, NULL, &mac, err))
		return err->result;
	store = pf_store_create(NULL, s3, &w->cfg);
	pf_store_set_checksum_key(store, &mac);
	r = pf_store_write(store, run->operation_id, name, text, strlen(text), &ref, err);
	if (r == PF_OK)
	{
		*result_ref = pf_payload_ref_to_json(&ref);
		pf_payload_ref_free(&ref);
	}
	pf_store_destroy(store);
	return r;
}

/* The lease is given back (1 s left) so another worker can take over at once. */
static void
release_lease(worker *w, step_run *run)
{
	pf_pg	   *pg = db_acquire(w->db, 5000);
	char		key[DB_LEASE_KEY_LEN + 1];
	const char *ids[1] = {key};
	bool		held;
	pf_error	err;

	if (pg == NULL)
		return;
	db_lease_key(key, sizeof(key), run->operation_id, run->lease_token);
	if (db_heartbeat(pg, ids, 1, w->role->step, w->cfg.worker_id, 1, &held, &err) != PF_OK)
		pf_log_warn(&run->ids, "cannot shorten the lease: %s", err.message);
	db_release(w->db, pg);
}

/*
 * The step succeeded (for a payment: the legacy DBMS charged) after its
 * operation had ended (FAILED when its lease expired on its last attempt,
 * while the call ran on): complete_step answers PF006 and nothing in the
 * operation records the result.  It goes to payflow.dead_letters with the
 * result, where reconciliation finds a charge the operation does not show;
 * a log line alone would be lost.  Returns whether it was recorded.
 */
static bool
record_result_after_end(worker *w, job *j, step_run *run, const pf_error *refusal)
{
	pf_pg	   *pg = db_acquire(w->db, DB_WAIT_MS);
	char	   *body = pf_strndup(j->msg->body, j->msg->body_len);
	json_t	   *error = json_pack("{s:s,s:s,s:s,s:i,s:O,s:s}", "code", "result_after_end",
								  "message", "the step succeeded after its operation had ended; its result is kept here",
								  "step", w->role->step ? w->role->step : "", "attempt", run->attempt,
								  "result", run->result, "refusal", refusal->message);
	pf_error	err;
	bool		recorded;

	pf_utf8_sanitize(body, strlen(body));
	recorded = pg != NULL && db_record_dead_letter(pg, w->transport->queue_name, body, error, run->operation_id,
												   &err) == PF_OK;
	if (!recorded)
		log_job(PF_LOG_ERROR, &run->ids, j, json_pack("{s:s,s:O}", "code", pg ? err.code : "53300", "result", run->result),
				"cannot record the result of a step whose operation ended: %s",
				pg ? err.message : "no database connection free");
	db_release(w->db, pg);
	json_decref(error);
	free(body);
	return recorded;
}

/* Commit what the role decided, then say what becomes of the message. */
static void
record_outcome(worker *w, executor *ex, job *j, step_run *run, step_status status)
{
	const char *kind = status == STEP_SUCCEEDED ? "complete_step" : "fail_step";
	json_t	   *answer = NULL;
	json_t	   *result_ref = NULL;
	char	   *text = NULL;
	pf_error	err;
	pf_result	r;

	if (status == STEP_COMMITTED)
	{
		j->outcome = OUTCOME_DELETE;
		log_job(PF_LOG_INFO, &run->ids, j, json_pack("{s:O,s:i}", "answer", run->completion, "attempt", run->attempt),
				"%s", "step completed");
		return;
	}

	if (status == STEP_ABANDONED)
	{
		stop_reason why = step_stop_requested(run);

		if (why == STOP_SHUTDOWN)
		{
			release_lease(w, run);
			j->outcome = OUTCOME_RELEASE;
			log_job(PF_LOG_WARN, &run->ids, j, NULL, "%s", "step abandoned at shutdown; message made visible again");
		}
		else
		{
			j->outcome = OUTCOME_LEAVE;
			log_job(PF_LOG_WARN, &run->ids, j, NULL, "%s", "step abandoned: another worker holds its lease now");
		}
		return;
	}

	if (status == STEP_SUCCEEDED)
		text = run->result_text ? pf_strdup(run->result_text) : json_dumps(run->result, JSON_COMPACT);
	if (status == STEP_SUCCEEDED && store_result(w, ex, run, text, &result_ref, &err) != PF_OK)
	{
		j->outcome = OUTCOME_LEAVE;
		log_job(PF_LOG_ERROR, &run->ids, j, json_pack("{s:s,s:O}", "code", err.code, "result", run->result),
				"cannot store the result, message left for a later attempt: %s", err.message);
		free(text);
		return;
	}
	/* gathered with the other executors' outcomes into one statement (batch.c) */
	step_reporting(run);
	{
		pf_span		call;

		db_span_begin(&call, j, kind);
		if (status == STEP_SUCCEEDED)
			r = batch_complete(w, run->operation_id, run->lease_token, text, result_ref, &answer, &err);
		else
			r = batch_fail(w, run->operation_id, run->lease_token, run->error, status == STEP_RETRYABLE, &answer,
						   &err);
		db_span_end(&call, r, &err);
	}
	json_decref(result_ref);
	free(text);

	if (r == PF_OK)
	{
		json_t	   *fields = json_pack("{s:O,s:i}", "answer", answer, "attempt", run->attempt);

		if (status == STEP_SUCCEEDED)
			json_object_set(fields, "result", run->result);
		else
			json_object_set(fields, "error", run->error);
		const char *action = json_string_value(json_object_get(answer, "action"));

		j->outcome = OUTCOME_DELETE;
		log_job(status == STEP_SUCCEEDED ? PF_LOG_INFO : PF_LOG_WARN, &run->ids, j, fields, "%s",
				status == STEP_SUCCEEDED ? "step completed" :
				action && strcmp(action, "retry") == 0 ? "step failed, retry left to the database" :
				status == STEP_RETRYABLE ? "step failed, no attempts left: operation failed" :
				"step failed for good: operation failed");
	}
	else if (strcmp(err.code, "PF004") == 0)
	{
		/* taken over after our lease expired: the new holder reports */
		step_count_lost_lease(run);
		j->outcome = OUTCOME_LEAVE;
		log_job(PF_LOG_WARN, &run->ids, j, json_pack("{s:s}", "code", err.code),
				"lease taken over, outcome not recorded: %s", err.message);
	}
	else if (strcmp(err.code, "PF006") == 0 && status == STEP_SUCCEEDED)
	{
		/* recorded or not, the message has nothing more to do: its operation ended */
		j->outcome = OUTCOME_DELETE;
		if (record_result_after_end(w, j, run, &err))
			log_job(PF_LOG_ERROR, &run->ids, j, json_pack("{s:s,s:O}", "code", err.code, "result", run->result),
					"operation already ended: the step's result is recorded as a dead letter for reconciliation");
	}
	else if (strcmp(err.code, "PF006") == 0)
	{
		/* a failure of a step whose operation ended: nothing was done to record */
		j->outcome = OUTCOME_DELETE;
		log_job(PF_LOG_WARN, &run->ids, j, json_pack("{s:s,s:O*}", "code", err.code, "error", run->error),
				"operation already ended, failure not recorded: %s", err.message);
	}
	else
	{
		/* the lease runs out; whoever takes over looks the outcome up */
		j->outcome = OUTCOME_LEAVE;
		log_job(PF_LOG_ERROR, &run->ids, j,
				json_pack("{s:s,s:s,s:O*,s:O*}", "code", err.code, "call", kind, "result", run->result,
						  "error", run->error),
				"cannot record the step's outcome: %s", err.message);
	}
	json_decref(answer);
}

static void
run_step(worker *w, executor *ex, job *j, const pf_event *ev, const step_claim *claim, const pf_log_ids *ids,
		 pf_buf *claimed_input)
{
	step_run	run;
	pf_buf		input = PF_BUF_INIT;
	step_status status;

	memset(&run, 0, sizeof(run));
	run.event = ev;
	run.operation_id = ev->operation_id;
	run.payment_id = claim->payment_id ? claim->payment_id : ev->payment_id;
	run.idempotency_key = claim->idempotency_key;
	run.lease_token = claim->lease_token;
	run.external_ref = claim->external_ref;
	run.attempt = claim->attempt;
	run.takeover = claim->takeover;
	run.result_name = claim->result_name;
	run.ids = *ids;
	run.trace = &j->otel.ctx;
	run.w = w;
	run.ex = ex;
	run.job = j;

	if (claimed_input != NULL)
	{
		/* a "pg" payload whose checksum the database checked in the claim */
		pf_buf_append(&input, claimed_input->data, claimed_input->len);
		status = STEP_SUCCEEDED;
	}
	else
		status = read_input(w, ex, claim, ev, &input, &run);
	if (status == STEP_SUCCEEDED)
	{
		pf_span		call;
		char		name[96];

		run.input = pf_buf_str(&input);
		run.input_len = input.len;
		/* the role's work (the legacy call, the invoice API, a hook): its calls are children */
		snprintf(name, sizeof(name), "%s %s", w->role->name, w->role->step ? w->role->step : "step");
		pf_span_begin(&call, name, PF_SPAN_INTERNAL, &j->otel.ctx);
		run.trace = &call.ctx;
		status = w->role->run(ex->role_thread, &run);
		pf_span_set_str(&call, "payflow.outcome", status_class(status));
		if (run.error != NULL)
			pf_span_set_str(&call, "payflow.error.code", json_string_value(json_object_get(run.error, "code")));
		if (status == STEP_RETRYABLE || status == STEP_PERMANENT)
			pf_span_set_error(&call, status_class(status));
		pf_span_end(&call);
		run.trace = &j->otel.ctx;
		if (status == STEP_SUCCEEDED && !json_is_object(run.result))
		{
			json_decref(run.result);
			run.result = NULL;
			step_set_error(&run, "invalid_result", "the role returned no result object", NULL);
			status = STEP_PERMANENT;
		}
		if (status == STEP_COMMITTED && run.completion == NULL)
		{
			step_set_error(&run, "not_committed", "the role said it completed the step, but did not", NULL);
			status = STEP_RETRYABLE;
		}
		if ((status == STEP_RETRYABLE || status == STEP_PERMANENT) && run.error == NULL)
			step_set_error(&run, "error", "the role failed without saying why", NULL);
	}
	record_outcome(w, ex, j, &run, status);
	json_decref(run.result);
	free(run.result_text);
	json_decref(run.error);
	json_decref(run.completion);
	pf_buf_free(&input);
}

/* A role without a step of its own (webhook) handles the event itself. */
static void
handle_event(worker *w, executor *ex, job *j, const pf_event *ev)
{
	step_run	run;
	int			hide_s = 0;

	memset(&run, 0, sizeof(run));
	run.event = ev;
	run.operation_id = ev->operation_id;
	run.payment_id = ev->payment_id;
	run.attempt = j->msg->receive_count;
	run.input = j->msg->body;
	run.input_len = j->msg->body_len;
	run.ids.operation_id = ev->operation_id;
	run.ids.event_id = ev->event_id;
	run.ids.correlation_id = ev->correlation_id;
	run.ids.trace_id = j->otel.ctx.trace_id;
	run.ids.span_id = j->otel.ctx.span_id;
	run.trace = &j->otel.ctx;
	run.w = w;
	run.ex = ex;
	run.job = j;
	j->outcome = w->role->handle_event(ex->role_thread, &run, &hide_s);
	j->hide_s = hide_s < 1 ? 1 : hide_s > MAX_HIDE_SECONDS ? MAX_HIDE_SECONDS : hide_s;
}

/*
 * The role's one-transaction step (role_ops.one_transaction_hook), if it
 * has one: claim, hook and completion for a batch of executors at once
 * (batch_claim_run_complete). False when it has none or the claim failed
 * (nothing of it stays; the caller takes the usual path). Else *claim
 * holds the claim's answer and *done says whether the step was completed
 * too (the outcome is then set and logged). A hook that raised leaves the
 * step claimed and not done: the usual path runs it again and classifies
 * its error.
 */
static bool
claim_run_complete(worker *w, job *j, const pf_log_ids *ids, step_claim *claim, bool *done)
{
	const char *hook = w->role->one_transaction_hook ? w->role->one_transaction_hook(w->role_state) : NULL;
	json_t	   *completion = NULL;
	json_t	   *hook_error = NULL;
	pf_error	err;
	pf_span		call;
	pf_result	r;

	*done = false;
	if (hook == NULL)
		return false;
	/* the SQL hook's call: claim, hook and completion in one statement */
	db_span_begin(&call, j, "run_hook_steps");
	pf_span_set_str(&call, "payflow.hook", hook);
	r = batch_claim_run_complete(w, j, hook, ids->operation_id, claim, &completion, &hook_error, &err);
	if (r == PF_OK && hook_error != NULL)
	{
		pf_span_set_str(&call, "payflow.error.code", json_string_value(json_object_get(hook_error, "code")));
		pf_span_set_error(&call, "the hook raised");
	}
	db_span_end(&call, r, &err);
	if (r != PF_OK)
	{
		log_job(PF_LOG_DEBUG, ids, j, json_pack("{s:s}", "code", err.code),
				"the step did not complete in one transaction (%s); claiming it the usual way", err.message);
		return false;
	}
	if (hook_error != NULL)
		log_job(PF_LOG_DEBUG, ids, j, json_pack("{s:O}", "code", json_object_get(hook_error, "code")),
				"the hook raised in the batch; running the step the usual way");
	json_decref(hook_error);
	if (completion != NULL)
	{
		*done = true;
		j->outcome = OUTCOME_DELETE;
		log_job(PF_LOG_INFO, ids, j, json_pack("{s:o,s:i,s:b}", "answer", completion, "attempt", claim->attempt,
											   "oneTransaction", true),
				"%s", "step completed");
	}
	return true;
}

void
step_execute(worker *w, executor *ex, job *j)
{
	transport_message *m = j->msg;
	pf_event	ev;
	char		why[256];
	pf_event_status st;
	step_claim	claim;
	pf_log_ids	ids;
	pf_error	err;
	pf_result	r;
	pf_buf		input = PF_BUF_INIT;	/* the input, when the claim brought it */
	bool		has_input = false;
	bool		done = false;

	j->outcome = OUTCOME_LEAVE;
	/*
	 * A span of its own under the operation's trace: the logs name both,
	 * and a retry or a takeover is an attempt span of its own. It ends
	 * when the message's outcome is known (step_attempt_span_end).
	 */
	pf_span_begin_text(&j->otel, w->role->name, PF_SPAN_CONSUMER, m->traceparent);
	pf_span_set_str(&j->otel, "messaging.system", "aws_sqs");
	pf_span_set_str(&j->otel, "messaging.destination.name", w->transport->queue_name);
	pf_span_set_str(&j->otel, "messaging.message.id", m->id);
	pf_span_set_int(&j->otel, "messaging.aws_sqs.receive_count", m->receive_count);
	st = pf_event_parse(m->body, m->body_len, &ev, why, sizeof(why));
	if (st == PF_EVENT_OK)
	{
		char		name[96];

		snprintf(name, sizeof(name), "%s %s", w->role->step ? w->role->step : pf_event_type_name(ev.type),
				 "attempt");
		pf_span_set_name(&j->otel, name);
		pf_span_set_str(&j->otel, "payflow.operation.id", ev.operation_id);
		pf_span_set_str(&j->otel, "payflow.event.type", pf_event_type_name(ev.type));
	}
	if (st != PF_EVENT_OK)
	{
		bad_message(w, j, pf_event_status_name(st), why);
		pf_event_free(&ev);
		return;
	}
	if (w->role->handle_event != NULL)
	{
		handle_event(w, ex, j, &ev);
		pf_event_free(&ev);
		return;
	}
	if (ev.type != w->event_type)
	{
		snprintf(why, sizeof(why), "a %s event on the queue of the %s role", pf_event_type_name(ev.type),
				 w->role->name);
		bad_message(w, j, "unexpected_event_type", why);
		pf_event_free(&ev);
		return;
	}
	ids.operation_id = ev.operation_id;
	ids.event_id = ev.event_id;
	ids.correlation_id = ev.correlation_id;
	ids.trace_id = j->otel.ctx.trace_id;
	ids.span_id = j->otel.ctx.span_id;

	if (!claim_run_complete(w, j, &ids, &claim, &done))
	{
		pf_span		call;

		db_span_begin(&call, j, "claim_step");
		r = batch_claim(w, j, ev.operation_id, &claim, &input, &has_input, &err);
		if (r == PF_OK)
			pf_span_set_str(&call, "payflow.claim.action", claim.action);
		db_span_end(&call, r, &err);
	}
	else if (done)
	{
		step_claim_free(&claim);
		pf_event_free(&ev);
		return;
	}
	else
		r = PF_OK;				/* claimed (or not) by that statement: go on with its answer */
	if (r != PF_OK)
	{
		if (strcmp(err.code, "PF003") == 0)
			bad_message(w, j, "unknown_operation", err.message);
		else
			log_job(PF_LOG_WARN, &ids, j, json_pack("{s:s}", "code", err.code),
					"claim_step failed, message left: %s", err.message);
		pf_event_free(&ev);
		pf_buf_free(&input);
		return;
	}

	if (strcmp(claim.action, "skip") == 0)
	{
		j->outcome = OUTCOME_DELETE;
		log_job(PF_LOG_INFO, &ids, j, json_pack("{s:s}", "reason", claim.reason), "step skipped (%s), message deleted",
				claim.reason);
	}
	else if (strcmp(claim.action, "limited") == 0)
	{
		int			max = w->transport->max_receive_count;

		if (max > 0 && m->receive_count >= max - 1)
		{
			/*
			 * One more receive would move it to the DLQ. The step waits
			 * PENDING with nothing of its payment in the outbox: the
			 * scheduler sends its request again after payflow.stuck_after.
			 */
			j->outcome = OUTCOME_DELETE;
			log_job(PF_LOG_WARN, &ids, j, json_pack("{s:s,s:i}", "reason", claim.reason, "receiveCount", m->receive_count),
					"step still limited (%s) after %d receives: message deleted before it reaches the DLQ, "
					"the scheduler sends the request again", claim.reason, m->receive_count);
		}
		else
		{
			/* handed back for as long as the limit says, no executor held, no attempt used */
			j->outcome = OUTCOME_HIDE;
			j->hide_s = claim.retry_after_s > 0 ? claim.retry_after_s : w->visibility_s;
			if (j->hide_s > MAX_HIDE_SECONDS)
				j->hide_s = MAX_HIDE_SECONDS;
			log_job(PF_LOG_INFO, &ids, j, json_pack("{s:s,s:i}", "reason", claim.reason, "hideSeconds", j->hide_s),
					"step limited (%s), message handed back for %d s", claim.reason, j->hide_s);
		}
	}
	else if (strcmp(claim.action, "busy") == 0)
	{
		int			max = w->transport->max_receive_count;

		if (strcmp(claim.reason, "leased") == 0 && max > 0 && m->receive_count >= max)
		{
			/*
			 * A live worker holds the step; should it die, the database
			 * re-emits the request when its lease expires. This copy would
			 * only reach the DLQ.
			 */
			j->outcome = OUTCOME_DELETE;
			log_job(PF_LOG_INFO, &ids, j, json_pack("{s:s}", "reason", claim.reason),
					"%s", "duplicate of a step another worker holds, deleted before it reaches the DLQ");
		}
		else
		{
			double		left = claim.lease_left_s;

			j->outcome = OUTCOME_HIDE;
			j->hide_s = left >= 0 ? (int) ceil(left) + 1 : w->visibility_s;
			if (j->hide_s > MAX_HIDE_SECONDS)
				j->hide_s = MAX_HIDE_SECONDS;
			log_job(PF_LOG_INFO, &ids, j, json_pack("{s:s,s:i}", "reason", claim.reason, "hideSeconds", j->hide_s),
					"step busy (%s), message hidden until the other lease may have expired", claim.reason);
		}
	}
	else if (strcmp(claim.action, "run") == 0)
	{
		pthread_mutex_lock(&w->lock);
		j->claimed = true;
		j->claimed_ms = pf_now_ms();
		memcpy(j->operation_id, ev.operation_id, sizeof(j->operation_id));
		db_lease_key(j->lease_key, sizeof(j->lease_key), ev.operation_id, claim.lease_token);
		pthread_mutex_unlock(&w->lock);
		log_job(PF_LOG_INFO, &ids, j,
				json_pack("{s:i,s:b,s:s*}", "attempt", claim.attempt, "takeover", claim.takeover,
						  "externalRef", claim.external_ref),
				"%s", "step claimed");
		run_step(w, ex, j, &ev, &claim, &ids, has_input ? &input : NULL);
	}
	else
		log_job(PF_LOG_ERROR, &ids, j, json_pack("{s:s}", "action", claim.action),
				"%s", "claim_step answered an unknown action; message left");
	step_claim_free(&claim);
	pf_event_free(&ev);
	pf_buf_free(&input);
}
