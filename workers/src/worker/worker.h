/*
 * worker.h
 *		payflow-worker: consumes one queue and runs one step of each operation
 *		(--role payment|postprocess|invoice, or --role http|sql --step NAME
 *		for a step added by SQL), or delivers its events
 *		(--role webhook), correctly when a call takes
 *		15 minutes, a message arrives twice, or the process dies half-way.
 *
 * Threads. The main thread owns the transport (SQS on one curl multi
 * handle: long-poll receives, deletes, visibility changes) and one
 * PostgreSQL connection for heartbeats; it never blocks on a step. N
 * executor threads (PAYFLOW_CONCURRENCY) each run one message at a time
 * from claim to commit, because the calls they make (ODBC, HTTP) block; they
 * borrow PostgreSQL connections from a small pool for the short SQL calls.
 * Finished messages come back to the main thread through an eventfd, which
 * sits in one epoll set with a signalfd for SIGTERM/SIGINT: the main thread
 * sleeps in curl's poll on that single descriptor, and no signal handler
 * or global variable is needed.
 *
 * Leases. Every held message's visibility is renewed every visibility/3
 * (ChangeMessageVisibilityBatch) and every claimed step's lease in the
 * same tick (one statement for all): lease = visibility + max(2, v/4), so a
 * message that comes back from a dead worker finds the step still leased
 * ("busy"), is hidden for the rest of that lease, and is taken over once
 * the lease ran out. A message is deleted only after the step's outcome is
 * committed; retries are scheduled by the database (fail_step), never by
 * spinning on the message.
 *
 *		main.c			arguments, settings, signals, start and exit
 *		loop.c			the consume loop: receive, dispatch, heartbeats, drain
 *		executor.c		executor threads and their queue
 *		step.c			one message: parse, claim, input, role, complete/fail
 *		db.c			connection pool and payflow's step functions
 *		transport_sqs.c	the SQS transport
 *		protection.c	ECS task scale-in protection while messages are held
 *		pipeline_check.c	at start-up: the database's pipeline against the role's events
 *		role_payment.c	the payment role: the legacy DBMS over ODBC
 *		step_hook*.c	a step whose work is one HTTP call or one SQL function
 *		role_postprocess.c	the post-processing role: a SQL or an HTTP hook step
 *		role_invoice.c	the invoice role: the invoice API, an HTTP hook step
 *		role_generic.c	--role http|sql --step NAME: any step, by configuration
 *		role_webhook.c	the webhook role: terminal events to tenants' URLs, signed
 */
#ifndef PAYFLOW_WORKER_H
#define PAYFLOW_WORKER_H

#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "payflow/buf.h"
#include "payflow/config.h"
#include "payflow/error.h"
#include "payflow/event.h"
#include "payflow/log.h"
#include "payflow/pg.h"
#include "payflow/trace_context.h"
#include "payflow/tracer.h"

#include "metrics_http.h"
#include "receive_pacing.h"

typedef struct worker worker;
typedef struct job job;
typedef struct executor executor;
typedef struct pf_pg_pool db_pool;	/* pg_pool.h */

/* ---- transport: where messages come from (SQS now) ---- */

typedef struct transport_message
{
	char	   *id;				/* for logs */
	char	   *receipt;		/* names the message in deletes and visibility changes */
	char	   *body;
	size_t		body_len;
	int			receive_count;	/* 1 on the first delivery */
	char	   *traceparent;	/* the "traceparent" attribute, or NULL (trace_context.h) */
	int64_t		visible_at_ms;	/* when it shows again unless renewed (pf_now_ms clock): a waiting delete leaves before */
} transport_message;

typedef struct transport transport;

typedef struct transport_ops
{
	/* Start receiving up to max messages, hidden for visibility_s; one receive at a time. */
	void		(*receive) (transport *t, int max, int visibility_s);
	bool		(*receiving) (const transport *t);
	/* Fire and forget: a failure is logged; the message then simply comes back. */
	void		(*delete_messages) (transport *t, transport_message *const *msgs, int n);
	/* A heartbeat's renewal: keeps held messages hidden. */
	void		(*set_visibility) (transport *t, transport_message *const *msgs, int n, int seconds);
	/*
	 * The last word on messages the worker lets go of (release, or hide for a
	 * back-off): it wins over renewals still in flight, which could otherwise
	 * land after it and hide the message for a whole visibility timeout.
	 */
	void		(*set_visibility_final) (transport *t, transport_message *const *msgs, int n, int seconds);
	/*
	 * Run I/O for up to timeout_ms; return early when wake_fd is readable or
	 * something finished. Received messages are appended to *out (the caller
	 * owns them and the array).
	 */
	void		(*poll) (transport *t, int timeout_ms, int wake_fd, transport_message ***out, int *n_out);
	/* Deletes and visibility changes still in flight. */
	int			(*pending) (const transport *t);
	void		(*destroy) (transport *t);
} transport_ops;

struct transport
{
	const transport_ops *ops;
	char	   *queue_name;		/* for logs and dead letters */
	int			max_receive_count;	/* the DLQ's threshold; 0 when none is known */
};

transport  *transport_sqs_create(const pf_config *cfg, pf_error *err);
void		transport_message_free(transport_message *m);

/* ---- roles: what a worker does with a message ---- */

typedef enum step_status
{
	STEP_SUCCEEDED,				/* run->result holds the step's result */
	STEP_RETRYABLE,				/* run->error; the database schedules a retry */
	STEP_PERMANENT,				/* run->error; the operation fails */
	STEP_ABANDONED,				/* stopped (shutdown, lease lost): nothing recorded */
	STEP_COMMITTED				/* the role completed the step itself (step_complete_with_sql) */
} step_status;

/* Why a running step is asked to stop. */
typedef enum stop_reason
{
	STOP_NONE = 0,
	STOP_SHUTDOWN,				/* the drain time ran out */
	STOP_LEASE_LOST				/* another worker took the step over */
} stop_reason;

/* One step as a role sees it. */
typedef struct step_run
{
	const pf_event *event;
	const char *operation_id;
	const char *payment_id;
	const char *idempotency_key;	/* "<operation id>:<step>" */
	const char *lease_token;	/* the claim's: every later call on the step presents it */
	const char *external_ref;	/* saved by an earlier attempt (submit-poll), or NULL */
	int			attempt;
	bool		takeover;		/* an earlier attempt's lease expired */
	const char *input;			/* the step's input payload (NUL-terminated) */
	size_t		input_len;
	pf_log_ids	ids;
	const pf_trace_context *trace;	/* the span the role's calls are children of */

	/* the role's answer */
	json_t	   *result;			/* STEP_SUCCEEDED: a JSON object */
	/*
	 * STEP_SUCCEEDED, optional: the same object as the text to store (owned,
	 * freed by step.c), so numbers from an external answer keep their digits
	 * ("12.50" never passes through a double); result is then for the logs.
	 */
	char	   *result_text;
	json_t	   *error;			/* STEP_RETRYABLE/PERMANENT: {"code","message",…} */

	/* private to step.c */
	const char *result_name;	/* the claim's resultName, NULL: inline only */
	json_t	   *completion;		/* STEP_COMMITTED: complete_step's answer */
	worker	   *w;
	executor   *ex;
	job		   *job;
} step_run;

typedef enum job_outcome
{
	OUTCOME_LEAVE = 0,			/* nothing: it comes back when its visibility runs out */
	OUTCOME_DELETE,				/* handled and committed */
	OUTCOME_RELEASE,			/* visible again now */
	OUTCOME_HIDE				/* keep hidden for hide_s (a step leased elsewhere, a retry later) */
} job_outcome;

typedef struct role_ops
{
	const char *name;			/* --role */
	unsigned	program;		/* PF_PROGRAM_* bit: the settings it requires */
	pf_event_type event_type;	/* what its queue carries */
	const char *step;			/* the extension's step name (--step for a generic role) */
	bool		step_from_argv; /* --role http|sql: the step is named by --step */
	/* At start-up: check settings, build shared state; NULL with why set. */
	void	   *(*init) (const struct role_ops *role, const pf_config *cfg, char *why, size_t why_len);
	void		(*cleanup) (void *role);
	/* Per executor thread (e.g. its ODBC connection). */
	void	   *(*thread_init) (void *role);
	void		(*thread_cleanup) (void *thread);
	step_status (*run) (void *thread, step_run *run);
	/* From the main thread: make the executor's blocking call return soon. */
	void		(*interrupt) (void *thread);
	/*
	 * Optional, for a role that runs no step (webhook): takes each
	 * well-formed event of any type instead of claim, run and complete. run
	 * has the event, its ids, the message body as input and the message's
	 * receive count as attempt. Returns what becomes of the message
	 * (*hide_s with OUTCOME_HIDE); step_bad_message() for one it cannot use.
	 */
	job_outcome (*handle_event) (void *thread, step_run *run, int *hide_s);
	/*
	 * Optional, for a step whose work is a SQL function in payflow's own
	 * database: that function ("schema.name(text,jsonb)"), which
	 * payflow.run_hook_steps then runs between the claim and the completion,
	 * in one transaction for a batch of steps (batch_claim_run_complete).
	 * NULL: none for this configuration. A step not completed there (not
	 * claimable, its input not in the "pg" store, its hook raised) takes
	 * the usual path (claim, run, complete), where a failure is classified
	 * and recorded.
	 */
	const char *(*one_transaction_hook) (void *role);
} role_ops;

extern const role_ops payment_role;
extern const role_ops postprocess_role;
extern const role_ops invoice_role;
extern const role_ops webhook_role;
extern const role_ops http_step_role;
extern const role_ops sql_step_role;

/* Services of step.c for roles (executor thread). */
stop_reason step_stop_requested(step_run *run);

/* The role starts a blocking call that should end within timeout_s (watchdog). */
void		step_call_started(step_run *run, int timeout_s);
void		step_reporting(step_run *run);
void		step_count_lost_lease(step_run *run);
void		step_call_finished(step_run *run);

/* Sleep up to ms; false when woken because the step must stop. */
bool		step_sleep(step_run *run, int ms);

/* payflow.save_step_ref: PF_ERR_FINAL with code PF004 when the lease is lost. */
pf_result	step_save_external_ref(step_run *run, const char *ref, pf_error *err);

/*
 * A message no worker can handle: logged and left to the queue's redrive
 * policy (recorded in payflow.dead_letters on its last receive).
 */
void		step_bad_message(step_run *run, const char *code, const char *why);

/* The step the worker runs (its role's, or --step). */
const char *step_run_step_name(const step_run *run);

/* Ends a job's attempt span (caller holds worker.lock). */
void		step_attempt_span_end(job *j);

/* Build run->error: {"code","message"} plus extra members (consumed, may be NULL). */
void		step_set_error(step_run *run, const char *code, const char *message, json_t *extra);

/*
 * Complete the step with the role's own statement, for work that must
 * commit in complete_step's transaction (a SQL post-processing hook). $1 is
 * the operation id, $2 the worker id, $3… the extra values; the statement
 * returns payflow.complete_step's answer. PF_OK: committed, the role
 * returns STEP_COMMITTED. Otherwise err says why (its SQLSTATE in code,
 * PF004 when the lease was lost) and nothing was committed.
 */
pf_result	step_complete_with_sql(step_run *run, const char *sql, int n_extra, const char *const *extra,
								   pf_error *err);

/* ---- database: pool and payflow's step functions ---- */

db_pool    *db_pool_create(const char *conninfo, const char *application_name, int size,
						   const volatile sig_atomic_t *stop);
void		db_pool_destroy(db_pool *pool);

/* A connection for one short piece of work; NULL after timeout_ms. */
pf_pg	   *db_acquire(db_pool *pool, int timeout_ms);
void		db_release(db_pool *pool, pf_pg *pg);

typedef struct step_claim
{
	char		action[8];		/* run, skip, busy, limited */
	char		reason[32];		/* skip/busy: why */
	int			attempt;
	bool		takeover;
	char	   *idempotency_key;
	char	   *lease_token;	/* NULL from an extension before 0.5.0 */
	char	   *external_ref;
	char	   *payment_id;
	json_t	   *input;			/* the step's input reference */
	char	   *result_name;	/* payload name of its result; NULL: kept inline */
	double		lease_left_s;	/* busy: seconds until the other lease expires; < 0 unknown */
	int			retry_after_s;	/* limited: when to ask again (a step limit, issue 27) */
} step_claim;

void		step_claim_free(step_claim *claim);

/* The fields of a claim_step answer into *claim (zeroed first; lease_left_s -1). */
pf_result	db_claim_from_answer(json_t *answer, step_claim *claim, pf_error *err);

/* A statement returning one jsonb value, parsed into *answer. */
pf_result	db_exec_json(pf_pg *pg, const char *sql, int nparams, const char *const *values, json_t **answer,
						 pf_error *err);

/* How long an executor waits for a pooled connection before giving up. */
#define DB_WAIT_MS 30000

/* {"a","b"}: a text[] literal of n strings, each quoted. */
void		db_append_text_array(pf_buf *buf, const char *const *items, int n);
pf_result	db_save_step_ref(pf_pg *pg, const char *operation_id, const char *step, const char *worker_id,
							 const char *ref, const char *lease_token, pf_error *err);

/*
 * A lease key: "<operation id> <lease token>", or the operation id alone
 * when the claim gave no token. Lease keys sort by operation id.
 */
#define DB_LEASE_KEY_LEN (PF_OPERATION_ID_LEN + 1 + 36)
void		db_lease_key(char *out, size_t size, const char *operation_id, const char *lease_token);

/* Renew n leases of one step kind (by lease key) in one statement; held[i] false when lost. */
pf_result	db_heartbeat(pf_pg *pg, const char *const *lease_keys, int n, const char *step,
						 const char *worker_id, int lease_s, bool *held, pf_error *err);
pf_result	db_record_dead_letter(pf_pg *pg, const char *queue, const char *body, json_t *error,
								  const char *operation_id, pf_error *err);

/* ---- jobs, executors, the worker ---- */

/* One held message, from its receipt until the main thread acts on its outcome. */
struct job
{
	transport_message *msg;
	int64_t		received_ms;

	/* guarded by worker.lock */
	executor   *ex;				/* running on, or NULL while queued */
	bool		claimed;		/* the step's lease is ours: heartbeat it */
	int64_t		claimed_ms;		/* when: a renewal round older than that says nothing of it */
	bool		finished;
	bool		reporting;		/* its outcome is being committed: a renewal's "not held" may be that */
	char		operation_id[PF_OPERATION_ID_LEN + 1];
	/*
	 * This attempt's span, under the operation's trace (or a trace of its
	 * own): otel.ctx is what the logs and the attempt's calls name. The
	 * heartbeat adds events to it: under worker.lock once it is claimed.
	 */
	pf_span		otel;
	char		lease_key[DB_LEASE_KEY_LEN + 1];	/* db_lease_key: what heartbeats renew */
	stop_reason stop;
	int64_t		call_deadline_ms;	/* a blocking call should be over by then; 0: none */
	bool		interrupted;	/* the watchdog cancelled the current call */
	job_outcome outcome;
	int			hide_s;
	job		   *next;			/* in the queue or the done list */
	bool		claim_expected; /* counted among the claims to come (batch.c), under its lock */

	/* main thread only */
	bool		renewals_stopped;	/* a call ignored its cancel: let the lease expire */
	bool		kept_leased;	/* ... or not (PAYFLOW_HAND_OVER_UNCANCELLED), said once */
};

struct executor
{
	worker	   *w;
	int			index;
	pthread_t	thread;
	bool		started;
	void	   *role_thread;
	job		   *current;		/* guarded by worker.lock */
	int			interrupts;		/* interrupts of role_thread in flight (loop.c), guarded by worker.lock */
	void	   *store_s3;		/* lazily: S3 clients of this thread (step.c) */
};

struct worker
{
	pf_config	cfg;
	const role_ops *role;
	pf_event_type event_type;	/* what the queue carries (pipeline_check) */
	void	   *role_state;
	transport  *transport;
	db_pool    *db;
	pf_pg	   *heartbeat_pg;	/* start-up checks, then the lease renewer's */
	struct lease_renewer *renewer;	/* lease_renewer.h: leases off the main thread */
	volatile sig_atomic_t db_stop;	/* ends database retry loops at exit */
	pf_checksum_key payload_mac;	/* read once, under lock (step.c: payload_mac) */

	int			concurrency;
	int			visibility_s;
	int			lease_s;
	int			heartbeat_ms;

	int			wake_fd;		/* eventfd: a job finished */
	int			signal_fd;
	int			epoll_fd;		/* both, for one poll */

	pthread_mutex_t lock;
	pthread_cond_t work;		/* the queue got a job, or executors must exit */
	pthread_cond_t interrupted; /* an interrupt returned */
	job		   *queue_head;
	job		   *queue_tail;
	job		   *done;
	bool		executors_exit;
	executor   *executors;

	/* main thread only */
	job		  **held;
	int			n_held;
	int64_t		next_heartbeat_ms;
	bool		draining;
	int64_t		drain_deadline_ms;
	int64_t		abandon_deadline_ms;	/* drain over: calls cancelled, waiting for them */
	bool		stuck;			/* executors that never returned: no clean-up */
	long		handled;		/* messages whose outcome was acted on */
	int64_t		slots_free_since_ms;	/* a slot is free and no receive asks for it; 0: none */
	int64_t		receive_fill_until_ms;	/* a receive waits for more free slots until then; 0: none */
	int			receive_asked;	/* what the receive in flight (or the last) asked for */
	bool		receive_backlog;	/* the last receive was answered in full */
	receive_pacing pacing;		/* when the next receive goes, for a steady flow */
	/* a heartbeat behind (a renewal later than visibility/3): no receiving; its figures in stats */
	bool		heartbeat_behind;
	int64_t		behind_logged_ms;	/* said once a minute */
	worker_stats stats;			/* for /metrics (metrics_http.h) */
	metrics_http *metrics;		/* NULL: PAYFLOW_METRICS_LISTEN unset */
	struct protection *protection;	/* NULL off ECS (protection.h) */
};

/*
 * NULL with why set when the worker cannot start; *exit_status is then 2
 * when the pipeline does not match the role, 1 when it could not be read,
 * else 0 (main decides by why).
 */
worker	   *worker_create(const role_ops *role, int signal_fd, char *why, size_t why_len, int *exit_status);
int			worker_run(worker *w);
void		worker_destroy(worker *w);

/* executor.c */
bool		executors_start(worker *w);
void		executors_stop(worker *w, bool wait);
void		executor_enqueue(worker *w, job *j);

/* Take back jobs no executor has started (drain); returns the list. */
job		   *executor_take_queued(worker *w);

/* How long an exit may take after PAYFLOW_DRAIN_SECONDS ran out (loop.c). */
int			worker_exit_margin_seconds(void);

/*
 * pipeline_check.c: 0 matches (or not checkable now, logged), 2 mismatch or
 * no such step, 1 failed; why set. *event_type: the type the queue carries
 * (a generic role's step request, read from the database). A signal on
 * signal_fd ends a generic role's wait for the database.
 */
int			pipeline_check(const role_ops *role, pf_pg *pg, int signal_fd, pf_event_type *event_type, char *why,
						   size_t why_len);

/* step.c: handle one message on an executor; sets j->outcome and j->hide_s. */
void		step_execute(worker *w, executor *ex, job *j);
void		step_executor_cleanup(executor *ex);

#endif							/* PAYFLOW_WORKER_H */
