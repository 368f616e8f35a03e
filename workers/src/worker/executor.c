/*
 * executor.c
 *		The executor threads: each takes one job at a time from the queue,
 *		runs it (step.c) and hands it back to the main thread through the done
 *		list and the eventfd.
 */
#include "worker.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "payflow/buf.h"
#include "batch.h"
#include "stack_trim.h"

/* Each executor's stack: ODBC drivers and libpq need little; 256 threads add up. */
#define EXECUTOR_STACK_BYTES (512 * 1024)

static void
wake_main(worker *w)
{
	uint64_t	one = 1;

	/* an eventfd write only fails when the counter would overflow */
	if (write(w->wake_fd, &one, sizeof(one)) < 0)
		return;
}

static void *
executor_main(void *arg)
{
	executor   *ex = arg;
	worker	   *w = ex->w;

	stack_trim_init();
	ex->role_thread = w->role->thread_init(w->role_state);
	for (;;)
	{
		job		   *j;

		pthread_mutex_lock(&w->lock);
		while (w->queue_head == NULL && !w->executors_exit)
			pthread_cond_wait(&w->work, &w->lock);
		if (w->queue_head == NULL)
		{
			pthread_mutex_unlock(&w->lock);
			break;
		}
		j = w->queue_head;
		w->queue_head = j->next;
		if (w->queue_head == NULL)
			w->queue_tail = NULL;
		j->next = NULL;
		j->ex = ex;
		ex->current = j;
		pthread_mutex_unlock(&w->lock);

		step_execute(w, ex, j);
		batch_claim_forgone(j);

		pthread_mutex_lock(&w->lock);
		step_attempt_span_end(j);
		ex->current = NULL;
		j->finished = true;
		j->call_deadline_ms = 0;
		j->next = w->done;
		w->done = j;
		pthread_mutex_unlock(&w->lock);
		wake_main(w);
	}
	/* an interrupt still running (a hung cancel) uses role_thread */
	pthread_mutex_lock(&w->lock);
	while (ex->interrupts > 0)
		pthread_cond_wait(&w->interrupted, &w->lock);
	pthread_mutex_unlock(&w->lock);
	w->role->thread_cleanup(ex->role_thread);
	ex->role_thread = NULL;
	step_executor_cleanup(ex);
	return NULL;
}

bool
executors_start(worker *w)
{
	pthread_attr_t attr;

	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, EXECUTOR_STACK_BYTES);
	w->executors = pf_calloc((size_t) w->concurrency, sizeof(executor));
	for (int i = 0; i < w->concurrency; i++)
	{
		executor   *ex = &w->executors[i];

		ex->w = w;
		ex->index = i;
		if (pthread_create(&ex->thread, &attr, executor_main, ex) != 0)
		{
			pthread_attr_destroy(&attr);
			pf_log_error(NULL, "cannot start executor thread %d of %d", i + 1, w->concurrency);
			return false;
		}
		ex->started = true;
		/* ps -L, top -H and make bench tell the threads apart by name */
		(void) pthread_setname_np(ex->thread, "pf-executor");
	}
	pthread_attr_destroy(&attr);
	return true;
}

void
executors_stop(worker *w, bool wait)
{
	if (w->executors == NULL)
		return;
	pthread_mutex_lock(&w->lock);
	w->executors_exit = true;
	pthread_cond_broadcast(&w->work);
	pthread_mutex_unlock(&w->lock);
	for (int i = 0; i < w->concurrency; i++)
	{
		if (!w->executors[i].started)
			continue;
		if (wait)
			pthread_join(w->executors[i].thread, NULL);
		else
			pthread_detach(w->executors[i].thread);
	}
	if (wait)
	{
		free(w->executors);
		w->executors = NULL;
	}
}

void
executor_enqueue(worker *w, job *j)
{
	pthread_mutex_lock(&w->lock);
	j->next = NULL;
	if (w->queue_tail)
		w->queue_tail->next = j;
	else
		w->queue_head = j;
	w->queue_tail = j;
	pthread_cond_signal(&w->work);
	pthread_mutex_unlock(&w->lock);
}

job *
executor_take_queued(worker *w)
{
	job		   *list;

	pthread_mutex_lock(&w->lock);
	list = w->queue_head;
	w->queue_head = w->queue_tail = NULL;
	pthread_mutex_unlock(&w->lock);
	return list;
}
