/*
 * loop.c
 *		The consume loop of the main thread: receive while executors are
 *		free, hand messages to them, act on their outcomes (delete, hide,
 *		release), renew visibility and leases, cancel calls that outlive
 *		their time-out, and drain on SIGTERM.
 *
 * The main thread never waits on a step. It sleeps in the transport's poll
 * on one epoll descriptor that holds the eventfd executors write when a
 * job is done and the signalfd, so a finished job or a signal wakes it at
 * once; otherwise it wakes for the next heartbeat (at most a second away).
 * Nor does it wait on a cancel: role->interrupt is a network call that may
 * hang (a driver's SQLCancel opens a connection of its own), so it runs on
 * a thread of its own, outside the worker lock.
 *
 * A call that does not return after its cancel may still be running in the
 * DBMS. Its step keeps its lease (heartbeats go on, also past the drain
 * time) until it returns, so no second attempt runs beside it; only with
 * PAYFLOW_HAND_OVER_UNCANCELLED=true is it let go after WATCHDOG_GIVE_UP_MS
 * (or the drain's grace), for another worker to take over.
 */
#include "worker.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <unistd.h>

#include "payflow/backoff.h"
#include "payflow/buf.h"
#include "batch.h"
#include "lease_renewer.h"
#include "protection.h"
#include "payflow/stop_signals.h"

/* A call may overrun its own time-out by this much before the watchdog cancels it. */
#define WATCHDOG_GRACE_MS 5000
/* A cancelled call that still does not return is said so (and handed over, if allowed) after this. */
#define WATCHDOG_GIVE_UP_MS 30000
/* an interrupt thread only cancels a call: a driver's cancel may open a connection */
#define INTERRUPT_STACK_BYTES (256 * 1024)
/* After the drain time, how long cancelled calls get to return. */
#define ABANDON_GRACE_MS 5000
/* How long an exit waits for deletes and visibility changes in flight. */
#define FLUSH_WAIT_MS 10000
#define MAX_SLEEP_MS 1000

/* ---- start and stop ---- */

int
worker_exit_margin_seconds(void)
{
	/* cancelled calls get ABANDON_GRACE_MS, deletes and visibility changes in flight FLUSH_WAIT_MS */
	return (ABANDON_GRACE_MS + FLUSH_WAIT_MS + 999) / 1000;
}

static int
default_db_connections(int concurrency)
{
	int			n = 4 + concurrency / 16;

	return n < concurrency ? n : concurrency;
}

/*
 * Each executor holds a socket to its downstream, and a cancel opens one
 * more for a moment: with PAYFLOW_CONCURRENCY in the thousands a soft limit
 * of 1,024 open files (a common default) fails logins at random, deep in a
 * driver. The soft limit is raised as far as the hard one allows; a hard
 * limit below what the concurrency needs refuses to start, naming both.
 */
static bool
enough_open_files(int concurrency, char *why, size_t why_len)
{
	rlim_t		wanted = (rlim_t) concurrency * 2 + 64 + (rlim_t) default_db_connections(concurrency);
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= wanted)
		return true;
	if (rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= wanted)
	{
		struct rlimit raised = rl;

		raised.rlim_cur = wanted;
		if (setrlimit(RLIMIT_NOFILE, &raised) == 0)
			return true;
	}
	snprintf(why, why_len, "invalid PAYFLOW_CONCURRENCY: %d executors need about %lu open files, and this process "
			 "may open %lu (ulimit -n; ECS: the task definition's nofile ulimit)", concurrency,
			 (unsigned long) wanted, (unsigned long) rl.rlim_max);
	return false;
}

worker *
worker_create(const role_ops *role, int signal_fd, char *why, size_t why_len, int *exit_status)
{
	worker	   *w = pf_calloc(1, sizeof(*w));
	struct epoll_event ev;
	pf_pg_options hb = {0};
	pf_error	err;
	int			checked;
	char		app[64];		/* application_name of the executors' connections */

	*exit_status = 0;
	w->wake_fd = w->epoll_fd = -1;
	w->signal_fd = signal_fd;
	pthread_mutex_init(&w->lock, NULL);
	pthread_cond_init(&w->work, NULL);
	pthread_cond_init(&w->interrupted, NULL);
	pf_config_load_or_exit(&w->cfg, "payflow-worker", PF_PROGRAM_WORKER | role->program);
	w->role = role;
	w->concurrency = w->cfg.concurrency;
	w->visibility_s = w->cfg.visibility_timeout;
	w->lease_s = w->visibility_s + (w->visibility_s / 4 > 2 ? w->visibility_s / 4 : 2);
	w->heartbeat_ms = w->visibility_s * 1000 / 3 > 1000 ? w->visibility_s * 1000 / 3 : 1000;
	w->held = pf_calloc((size_t) w->concurrency, sizeof(job *));
	if (!enough_open_files(w->concurrency, why, why_len))
		goto fail;

	/* its settings first: a refused one exits 2 before any connection to payflow's database */
	w->role_state = role->init(role, &w->cfg, why, why_len);
	if (w->role_state == NULL)
		goto fail;

	/* heartbeats must not stall the loop: short time-outs, the next tick retries */
	hb.application_name = "payflow-worker heartbeat";
	hb.connect_timeout_s = 5;
	hb.statement_timeout_ms = 5000;
	/*
	 * A row another transaction holds (a claim or completion batch) is left
	 * to the next round rather than waited for: under the deadlock
	 * detector's second, so the renewal gives way instead of either failing.
	 */
	hb.lock_timeout_ms = 500;
	hb.max_attempts = 2;
	hb.stop = &w->db_stop;
	hb.prepare = true;
	w->heartbeat_pg = pf_pg_create(w->cfg.database_url, &hb);
	/* before the queue is touched: a worker that would misread it stops here */
	w->event_type = role->event_type;
	checked = pipeline_check(role, w->heartbeat_pg, w->signal_fd, &w->event_type, why, why_len);
	if (checked != 0)
	{
		*exit_status = checked;
		goto fail;
	}

	w->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	w->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
	if (w->wake_fd < 0 || w->epoll_fd < 0)
	{
		snprintf(why, why_len, "cannot create the wake-up descriptors: %s", strerror(errno));
		goto fail;
	}
	memset(&ev, 0, sizeof(ev));
	ev.events = EPOLLIN;
	ev.data.fd = w->wake_fd;
	epoll_ctl(w->epoll_fd, EPOLL_CTL_ADD, w->wake_fd, &ev);
	ev.data.fd = w->signal_fd;
	epoll_ctl(w->epoll_fd, EPOLL_CTL_ADD, w->signal_fd, &ev);

	w->transport = transport_sqs_create(&w->cfg, &err);
	if (w->transport == NULL)
	{
		snprintf(why, why_len, "cannot use queue %s: %s %s", w->cfg.queue_url, err.code, err.message);
		goto fail;
	}

	snprintf(app, sizeof(app), "payflow-worker %s%s%s", w->role->name,
			 w->role->step_from_argv ? " " : "", w->role->step_from_argv ? w->role->step : "");
	w->db = db_pool_create(w->cfg.database_url, app,
						   w->cfg.db_connections > 0 ? w->cfg.db_connections : default_db_connections(w->concurrency),
						   &w->db_stop);
	atomic_store(&w->stats.concurrency, w->concurrency);
	if (w->cfg.metrics_listen != NULL && w->cfg.metrics_listen[0] != '\0')
	{
		char		mwhy[200];

		w->metrics = metrics_http_start(w->cfg.metrics_listen, &w->stats, app + strlen("payflow-worker "), mwhy,
										sizeof(mwhy));
		if (w->metrics == NULL)
		{
			snprintf(why, why_len, "invalid PAYFLOW_METRICS_LISTEN: %s", mwhy);
			goto fail;
		}
	}
	return w;

fail:
	worker_destroy(w);
	return NULL;
}

void
worker_destroy(worker *w)
{
	if (w == NULL)
		return;
	if (w->stuck)
		return;					/* threads still use it all; the process exits now */
	executors_stop(w, true);
	for (int i = 0; i < w->n_held; i++)
	{
		transport_message_free(w->held[i]->msg);
		free(w->held[i]);
	}
	free(w->held);
	if (w->transport)
		w->transport->ops->destroy(w->transport);
	metrics_http_stop(w->metrics);
	pf_pg_destroy(w->heartbeat_pg);
	db_pool_destroy(w->db);
	if (w->role_state)
		w->role->cleanup(w->role_state);
	if (w->wake_fd >= 0)
		close(w->wake_fd);
	if (w->epoll_fd >= 0)
		close(w->epoll_fd);
	pthread_cond_destroy(&w->work);
	pthread_cond_destroy(&w->interrupted);
	pthread_mutex_destroy(&w->lock);
	pf_config_free(&w->cfg);
	free(w);
}

/* ---- held messages ---- */

static void
forget(worker *w, job *j)
{
	for (int i = 0; i < w->n_held; i++)
	{
		if (w->held[i] == j)
		{
			w->held[i] = w->held[--w->n_held];
			return;
		}
	}
}

static void
free_job(job *j)
{
	transport_message_free(j->msg);
	free(j);
}

static void
dispatch(worker *w, transport_message *m)
{
	job		   *j = pf_calloc(1, sizeof(*j));

	j->msg = m;
	j->received_ms = pf_now_ms();
	w->held[w->n_held++] = j;
	pf_log_write(PF_LOG_DEBUG, NULL, json_pack("{s:s,s:i}", "messageId", m->id, "receiveCount", m->receive_count),
				 "message received");
	batch_claim_expected(j);
	executor_enqueue(w, j);
}

static void
release_messages(worker *w, transport_message *const *msgs, int n)
{
	if (n > 0)
		w->transport->ops->set_visibility_final(w->transport, msgs, n, 0);
}

/* Act on what executors finished. */
static void
collect_done(worker *w)
{
	job		   *list;
	transport_message **del;
	transport_message **rel;
	int			n_del = 0;
	int			n_rel = 0;

	pthread_mutex_lock(&w->lock);
	list = w->done;
	w->done = NULL;
	pthread_mutex_unlock(&w->lock);
	if (list == NULL)
		return;

	del = pf_calloc((size_t) w->concurrency, sizeof(*del));
	rel = pf_calloc((size_t) w->concurrency, sizeof(*rel));
	for (job *j = list; j; j = j->next)
	{
		switch (j->outcome)
		{
			case OUTCOME_DELETE:
				del[n_del++] = j->msg;
				break;
			case OUTCOME_RELEASE:
				rel[n_rel++] = j->msg;
				break;
			case OUTCOME_HIDE:
				w->transport->ops->set_visibility_final(w->transport, &j->msg, 1, j->hide_s);
				break;
			case OUTCOME_LEAVE:
				break;
		}
		forget(w, j);
		w->handled++;
	}
	if (n_del > 0)
		w->transport->ops->delete_messages(w->transport, del, n_del);
	release_messages(w, rel, n_rel);
	/* the transport copied the receipts into its requests */
	while (list)
	{
		job		   *next = list->next;

		free_job(list);
		list = next;
	}
	free(del);
	free(rel);
}

/* ---- interrupts, off the main thread ---- */

typedef struct interrupt_request
{
	worker	   *w;
	executor   *ex;
} interrupt_request;

static void *
interrupt_main(void *arg)
{
	interrupt_request *r = arg;
	worker	   *w = r->w;

	w->role->interrupt(r->ex->role_thread);
	pthread_mutex_lock(&w->lock);
	r->ex->interrupts--;
	pthread_cond_broadcast(&w->interrupted);
	pthread_mutex_unlock(&w->lock);
	free(r);
	return NULL;
}

/*
 * Under the lock: take ex as a target unless an interrupt of it is still in
 * flight (a hung cancel: another would only queue behind it).
 */
static bool
interrupt_target(executor *ex, executor **targets, int *n)
{
	if (ex->interrupts > 0)
		return false;
	ex->interrupts++;
	targets[(*n)++] = ex;
	return true;
}

/* After the lock: interrupt each target on a detached thread of its own. */
static void
interrupt_targets(worker *w, executor **targets, int n)
{
	pthread_attr_t attr;

	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, INTERRUPT_STACK_BYTES);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	for (int i = 0; i < n; i++)
	{
		interrupt_request *r = pf_calloc(1, sizeof(*r));
		pthread_t	t;

		r->w = w;
		r->ex = targets[i];
		if (pthread_create(&t, &attr, interrupt_main, r) != 0)
		{
			pf_log_warn(NULL, "cannot start a thread to cancel a call: cancelling it from the main loop");
			interrupt_main(r);
		}
	}
	pthread_attr_destroy(&attr);
}

/* ---- heartbeats ---- */

/* How often a heartbeat that stays behind is said again. */
#define BEHIND_LOG_EVERY_MS 60000

/*
 * Behind: a renewal (the tick itself, or its round of database leases)
 * came later than a third of the visibility timeout. The worker then takes
 * no new messages until a round is on time again: fewer held messages make
 * the rounds shorter, and a message it does not take cannot be redelivered
 * under it. Said once a minute, counted for the metrics.
 */
static int64_t
behind_limit_ms(const worker *w)
{
	return (int64_t) w->visibility_s * 1000 / 3;
}

/* A renewal came (or is still not done) late_ms after its tick. */
static void
heartbeat_late(worker *w, int64_t late_ms, const char *what)
{
	int64_t		now = pf_now_ms();
	long long	total = atomic_fetch_add(&w->stats.heartbeat_behind_total, 1) + 1;

	atomic_store(&w->stats.heartbeat_late_ms, late_ms);
	w->heartbeat_behind = true;
	atomic_store(&w->stats.heartbeat_behind, 1);
	if (pf_log_throttled(w->behind_logged_ms == 0, &w->behind_logged_ms, now, BEHIND_LOG_EVERY_MS))
	{
		pf_log_write(PF_LOG_WARN, NULL,
					 json_pack("{s:I,s:I,s:i,s:I}", "lateMs", (json_int_t) late_ms,
							   "limitMs", (json_int_t) behind_limit_ms(w), "held", w->n_held,
							   "behindTotal", (json_int_t) total),
					 "heartbeat behind: %s %lld ms after its tick (more than a third of the visibility timeout); "
					 "taking no new messages until it catches up", what, (long long) late_ms);
	}
}

/* Renewals are on time again (only a finished round, or a tick with no leases, says so). */
static void
heartbeat_on_time(worker *w, int64_t late_ms)
{
	atomic_store(&w->stats.heartbeat_late_ms, late_ms);
	if (w->heartbeat_behind)
		pf_log_info(NULL, "heartbeat caught up (a renewal %lld ms after its tick): taking messages again",
					(long long) late_ms);
	w->heartbeat_behind = false;
	atomic_store(&w->stats.heartbeat_behind, 0);
}

/* A finished round of lease renewals: its lost leases stop their steps. */
static void
collect_renewals(worker *w)
{
	lease_round_result res;

	if (w->renewer == NULL)
		return;
	lease_renewer_collect(w->renewer, &res);
	if (!res.finished)
		return;
	atomic_fetch_add(&w->stats.lease_rounds, 1);
	atomic_fetch_add(&w->stats.lease_rounds_failed, res.failed ? 1 : 0);
	atomic_store(&w->stats.lease_round_ms, res.duration_ms);
	atomic_fetch_add(&w->stats.leases_renewed, res.renewed);
	if (res.late_ms > behind_limit_ms(w))
		heartbeat_late(w, res.late_ms, res.failed ? "the lease renewal failed; the last one that worked was"
					   : "the lease renewal finished");
	else
		heartbeat_on_time(w, res.late_ms);
	pthread_mutex_lock(&w->lock);
	for (int k = 0; k < res.n_lost; k++)
		for (int i = 0; i < w->n_held; i++)
		{
			job		   *j = w->held[i];
			pf_log_ids	ids = {0};

			/*
			 * a claim made after the round's snapshot is not what the round
			 * saw; a step whose outcome is being committed learns of a
			 * takeover from that commit (PF004, counted there)
			 */
			if (!j->claimed || j->finished || j->reporting || j->stop != STOP_NONE || j->claimed_ms > res.offered_ms ||
				strcmp(j->lease_key, res.lost[k]) != 0)
				continue;
			/* counted here, not per lost id: a step that finished while its round ran is no loss */
			j->stop = STOP_LEASE_LOST;
			atomic_fetch_add(&w->stats.leases_lost, 1);
			ids.operation_id = j->operation_id;
			pf_log_write(PF_LOG_WARN, &ids,
						 json_pack("{s:s}", "messageId", j->msg->id),
						 "lease lost: another worker took the step over");
		}
	pthread_mutex_unlock(&w->lock);
	lease_round_result_free(&res);
}

/*
 * One tick: every held message stays invisible for another visibility
 * timeout (here, on the transport's own connections), every claimed step
 * keeps its lease for another lease period (on the renewer's thread).
 */
static void
heartbeat(worker *w, int64_t due_ms)
{
	transport_message **msgs = pf_calloc((size_t) w->n_held + 1, sizeof(*msgs));
	const char **claimed = pf_calloc((size_t) w->n_held + 1, sizeof(*claimed));
	int			n_msgs = 0;
	int			n_claimed = 0;
	int64_t		tick_late_ms;

	atomic_fetch_add(&w->stats.heartbeat_rounds, 1);
	tick_late_ms = pf_now_ms() - due_ms;
	if (tick_late_ms > behind_limit_ms(w))
		heartbeat_late(w, tick_late_ms, "the tick came");
	pthread_mutex_lock(&w->lock);
	for (int i = 0; i < w->n_held; i++)
	{
		job		   *j = w->held[i];

		if (j->finished || j->renewals_stopped)
			continue;
		msgs[n_msgs++] = j->msg;
		if (j->claimed && j->stop != STOP_LEASE_LOST)
		{
			claimed[n_claimed++] = j->lease_key;
			pf_span_add_event(&j->otel, "heartbeat", NULL);
		}
	}
	pthread_mutex_unlock(&w->lock);

	if (n_msgs > 0)
		w->transport->ops->set_visibility(w->transport, msgs, n_msgs, w->visibility_s);
	/* the ids are copied: a job freed meanwhile is no matter */
	if (n_claimed > 0 && w->renewer != NULL)
	{
		/* still running at the next tick: its renewals are a whole interval late at least */
		if (!lease_renewer_offer(w->renewer, claimed, n_claimed, due_ms))
			heartbeat_late(w, pf_now_ms() - (due_ms - w->heartbeat_ms), "the last lease renewal is still running");
	}
	else if (tick_late_ms <= behind_limit_ms(w) && !lease_renewer_busy(w->renewer))
		heartbeat_on_time(w, tick_late_ms);
	free(msgs);
	free(claimed);
}

/*
 * Cancel calls that outlive their time-out. One that ignores its cancel
 * keeps its lease, unless the operator lets such calls go.
 */
static void
watchdog(worker *w, int64_t now)
{
	executor  **targets = pf_calloc((size_t) w->n_held + 1, sizeof(*targets));
	int			n = 0;

	pthread_mutex_lock(&w->lock);
	for (int i = 0; i < w->n_held; i++)
	{
		job		   *j = w->held[i];
		pf_log_ids	ids;

		if (j->finished || j->ex == NULL || j->call_deadline_ms == 0 ||
			now < j->call_deadline_ms + WATCHDOG_GRACE_MS)
			continue;
		/*
		 * Read only now: the executor writes the job's ids and span
		 * without the lock, before it starts the call (step_call_started,
		 * under the lock), so a call in progress says they are written.
		 */
		memset(&ids, 0, sizeof(ids));
		ids.operation_id = j->operation_id[0] ? j->operation_id : NULL;
		ids.trace_id = j->otel.ctx.trace_id[0] ? j->otel.ctx.trace_id : NULL;
		ids.span_id = j->otel.ctx.span_id[0] ? j->otel.ctx.span_id : NULL;
		if (!j->interrupted)
		{
			j->interrupted = true;
			pf_log_warn(&ids, "a call outlived its time-out by %d s: cancelling it", WATCHDOG_GRACE_MS / 1000);
			interrupt_target(j->ex, targets, &n);
		}
		else if (!j->renewals_stopped && !j->kept_leased &&
				 now >= j->call_deadline_ms + WATCHDOG_GRACE_MS + WATCHDOG_GIVE_UP_MS)
		{
			if (w->cfg.hand_over_uncancelled)
			{
				j->renewals_stopped = true;
				pf_log_error(&ids, "a cancelled call does not return: no more heartbeats for it, so another "
							 "worker can take the step over once its lease expires "
							 "(PAYFLOW_HAND_OVER_UNCANCELLED=true)");
			}
			else
			{
				j->kept_leased = true;
				pf_log_error(&ids, "a cancelled call does not return: it may still run in the DBMS, so its step "
							 "stays leased until it does (PAYFLOW_HAND_OVER_UNCANCELLED=true would hand it over)");
			}
		}
	}
	pthread_mutex_unlock(&w->lock);
	interrupt_targets(w, targets, n);
	free(targets);
}

/* ---- signals and drain ---- */

static void
begin_drain(worker *w, int signo)
{
	job		   *queued = executor_take_queued(w);
	transport_message **rel = pf_calloc((size_t) w->n_held + 1, sizeof(*rel));
	int			n_rel = 0;

	w->draining = true;
	w->drain_deadline_ms = pf_now_ms() + (int64_t) w->cfg.drain_seconds * 1000;
	/* messages no executor has started yet go back at once */
	while (queued)
	{
		job		   *next = queued->next;

		rel[n_rel++] = queued->msg;
		batch_claim_forgone(queued);	/* no claim batch waits for it */
		forget(w, queued);
		queued->msg = NULL;
		free(queued);
		queued = next;
	}
	pf_log_write(PF_LOG_INFO, NULL,
				 json_pack("{s:s,s:i,s:i,s:i}", "signal", strsignal(signo), "inFlight", w->n_held,
						   "released", n_rel, "drainSeconds", w->cfg.drain_seconds),
				 "stopping: no more receives, in-flight steps get %d s to finish", w->cfg.drain_seconds);
	release_messages(w, rel, n_rel);
	for (int i = 0; i < n_rel; i++)
		transport_message_free(rel[i]);
	free(rel);
}

static void
handle_signals(worker *w)
{
	int			signo;

	while ((signo = pf_stop_signals_take(w->signal_fd)) != 0)
	{
		if (!w->draining)
			begin_drain(w, signo);
		else
		{
			/* the operator insists: leases expire and messages come back by themselves */
			pf_log_warn(NULL, "second %s: exiting at once with %d step(s) in flight", strsignal(signo), w->n_held);
			_exit(128 + signo);
		}
	}
}

/*
 * The drain's progress; true when the loop may end. After the drain time,
 * calls still running are cancelled (their steps end STEP_ABANDONED: lease
 * shortened, message released); whatever has not returned after a grace
 * period is released from here and left behind.
 */
static bool
drain_progress(worker *w, int64_t now)
{
	if (w->n_held == 0)
	{
		/*
		 * A long poll abandoned mid-way may still be handed messages, which
		 * then stay invisible for a visibility timeout: let it end (what it
		 * brings is released at once) while the drain time lasts.
		 */
		bool		calls = w->transport->ops->pending(w->transport) > 0;

		if (!calls && (!w->transport->ops->receiving(w->transport) || now >= w->drain_deadline_ms))
			return true;
		return now >= w->drain_deadline_ms + FLUSH_WAIT_MS;
	}

	if (now >= w->drain_deadline_ms && w->abandon_deadline_ms == 0)
	{
		executor  **targets = pf_calloc((size_t) w->n_held + 1, sizeof(*targets));
		int			n = 0;
		int			n_targets = 0;

		w->abandon_deadline_ms = now + ABANDON_GRACE_MS;
		pthread_mutex_lock(&w->lock);
		for (int i = 0; i < w->n_held; i++)
		{
			job		   *j = w->held[i];

			if (j->finished || j->ex == NULL)
				continue;
			j->stop = STOP_SHUTDOWN;
			interrupt_target(j->ex, targets, &n_targets);
			n++;
		}
		pthread_mutex_unlock(&w->lock);
		interrupt_targets(w, targets, n_targets);
		free(targets);
		pf_log_warn(NULL, "drain time over: cancelling %d step(s) still running", n);
	}
	else if (w->abandon_deadline_ms != 0 && now >= w->abandon_deadline_ms && !w->stuck &&
			 !w->cfg.hand_over_uncancelled)
	{
		/* their calls may still run in the DBMS: keep their leases until they return */
		pf_log_error(NULL, "%d step(s) did not return after their cancel: waiting for them, their leases renewed, "
					 "as their calls may still run in the DBMS (a second SIGTERM exits at once; "
					 "PAYFLOW_HAND_OVER_UNCANCELLED=true would release them)", w->n_held);
		w->abandon_deadline_ms = INT64_MAX;
	}
	else if (w->abandon_deadline_ms != 0 && now >= w->abandon_deadline_ms && !w->stuck)
	{
		transport_message **rel = pf_calloc((size_t) w->n_held, sizeof(*rel));
		const char **ids = pf_calloc((size_t) w->n_held, sizeof(char *));
		bool	   *held = pf_calloc((size_t) w->n_held, sizeof(bool));
		int			n_rel = 0;
		int			n_ids = 0;
		pf_error	err;

		pthread_mutex_lock(&w->lock);
		for (int i = 0; i < w->n_held; i++)
		{
			job		   *j = w->held[i];

			if (j->finished)
				continue;
			j->renewals_stopped = true; /* released: the heartbeat must not hide it again */
			rel[n_rel++] = j->msg;
			if (j->claimed)
				ids[n_ids++] = j->lease_key;
		}
		pthread_mutex_unlock(&w->lock);
		if (n_rel > 0)
		{
			release_messages(w, rel, n_rel);
			/* the renewer's connection, now the main thread's: the leases go with one second left */
			lease_renewer_stop(w->renewer);
			w->renewer = NULL;
			if (n_ids > 0)
				db_heartbeat(w->heartbeat_pg, ids, n_ids, w->role->step, w->cfg.worker_id, 1, held, &err);
			pf_log_error(NULL, "%d step(s) did not return after their cancel; released, exiting without them",
						 n_rel);
			w->stuck = true;
		}
		free(rel);
		free(ids);
		free(held);
	}
	if (w->stuck)
		return w->transport->ops->pending(w->transport) == 0 || now >= w->abandon_deadline_ms + FLUSH_WAIT_MS;
	return false;
}

/* ---- receiving ---- */

/*
 * Receives ask for min(10, free slots), and only when a slot is free. While
 * the queue has a backlog (the last receive was answered in full), a
 * receive for less than a full batch waits up to PAYFLOW_SQS_BATCH_WAIT_MS
 * for more slots to free: a burst is then taken ten at a time, not one or
 * two per finished step. A steady flow is batched too: the next receive
 * waits for it to bring a full batch, at most that long (receive_pacing.h).
 * With nothing held and no flow, or nothing waiting in the queue, the
 * receive goes at once (a long poll: latency comes first).
 */
static void
receive_if_room(worker *w, int64_t now)
{
	int			free_slots = w->concurrency - w->n_held;
	int			full = w->concurrency < 10 ? w->concurrency : 10;
	int			max = free_slots < 10 ? free_slots : 10;
	int64_t		not_before;

	w->receive_fill_until_ms = 0;
	if (w->draining || free_slots <= 0 || w->heartbeat_behind || w->transport->ops->receiving(w->transport))
		return;
	if (w->slots_free_since_ms == 0)
		w->slots_free_since_ms = now;
	if (max < full && w->receive_backlog && w->n_held > 0 &&
		now - w->slots_free_since_ms < w->cfg.sqs_batch_wait_ms)
	{
		w->receive_fill_until_ms = w->slots_free_since_ms + w->cfg.sqs_batch_wait_ms;
		return;
	}
	not_before = w->receive_backlog ? 0 : receive_pacing_not_before(&w->pacing, max, w->cfg.sqs_batch_wait_ms);
	if (now < not_before)
	{
		w->receive_fill_until_ms = not_before;
		return;
	}
	w->transport->ops->receive(w->transport, max, w->visibility_s);
	if (w->transport->ops->receiving(w->transport))
	{
		w->receive_asked = max;
		w->slots_free_since_ms = 0;
	}
}

/* When receive_if_room wants to look again; INT64_MAX: not before something happens. */
static int64_t
receive_deadline(const worker *w)
{
	return w->receive_fill_until_ms != 0 ? w->receive_fill_until_ms : INT64_MAX;
}

/* ---- the loop ---- */

static void
reset_wake(worker *w)
{
	uint64_t	count;

	while (read(w->wake_fd, &count, sizeof(count)) == (ssize_t) sizeof(count))
		;
}

int
worker_run(worker *w)
{
	if (!executors_start(w))
	{
		w->stuck = true;		/* some threads run: do not free under them */
		return 1;
	}
	w->renewer = lease_renewer_start(w->heartbeat_pg, w->role->step, w->cfg.worker_id, w->lease_s, w->wake_fd);
	if (w->renewer == NULL)
	{
		pf_log_error(NULL, "cannot start the lease renewal thread");
		executors_stop(w, true);
		return 1;
	}
	w->next_heartbeat_ms = pf_now_ms() + w->heartbeat_ms;
	pf_log_write(PF_LOG_INFO, NULL,
				 json_pack("{s:s,s:s,s:s,s:i,s:i,s:i,s:i,s:i}", "role", w->role->name, "queue",
						   w->transport->queue_name, "workerId", w->cfg.worker_id, "concurrency", w->concurrency,
						   "visibilityTimeout", w->visibility_s, "leaseSeconds", w->lease_s,
						   "heartbeatMs", w->heartbeat_ms, "maxReceiveCount", w->transport->max_receive_count),
				 "payflow-worker started");
	pf_config_warn_unknown_variables();
	w->protection = protection_start(&w->cfg);

	for (;;)
	{
		transport_message **got = NULL;
		int			n_got = 0;
		int64_t		now;
		int64_t		timeout;
		bool		receiving;

		reset_wake(w);
		handle_signals(w);
		collect_done(w);
		now = pf_now_ms();
		receive_if_room(w, now);
		collect_renewals(w);
		if (now >= w->next_heartbeat_ms)
		{
			heartbeat(w, w->next_heartbeat_ms);
			w->next_heartbeat_ms = now + w->heartbeat_ms;
		}
		watchdog(w, now);
		if (w->draining && drain_progress(w, now))
			break;

		timeout = w->next_heartbeat_ms - now;
		if (receive_deadline(w) - now < timeout)
			timeout = receive_deadline(w) - now;
		if (timeout > MAX_SLEEP_MS)
			timeout = MAX_SLEEP_MS;
		if (w->draining && timeout > 200)
			timeout = 200;
		if (timeout < 0)
			timeout = 0;
		receiving = w->transport->ops->receiving(w->transport);
		w->transport->ops->poll(w->transport, (int) timeout, w->epoll_fd, &got, &n_got);
		/* a receive answered in full: more is probably waiting */
		if (receiving && !w->transport->ops->receiving(w->transport))
		{
			w->receive_backlog = n_got >= w->receive_asked;
			receive_pacing_note(&w->pacing, n_got, pf_now_ms());
		}
		for (int i = 0; i < n_got; i++)
		{
			if (w->draining || w->n_held >= w->concurrency)
			{
				/* a receive that ended after the drain began: straight back */
				release_messages(w, &got[i], 1);
				transport_message_free(got[i]);
			}
			else
				dispatch(w, got[i]);
		}
		free(got);
		protection_note(w->protection, w->n_held > 0);
		atomic_store(&w->stats.held, w->n_held);
		atomic_store(&w->stats.handled, w->handled);
	}
	protection_stop(w->protection);
	w->protection = NULL;
	lease_renewer_stop(w->renewer);
	w->renewer = NULL;

	pf_log_write(PF_LOG_INFO, NULL, json_pack("{s:I,s:b}", "handled", (json_int_t) w->handled, "clean", !w->stuck),
				 "payflow-worker stopped");
	if (w->stuck)
	{
		executors_stop(w, false);
		return 0;
	}
	executors_stop(w, true);
	return 0;
}
