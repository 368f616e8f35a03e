/*
 * connect_gate.c
 *		A counting gate for connection attempts (connect_gate.h).
 */
#include "connect_gate.h"

#include <errno.h>
#include <time.h>

#include "payflow/clock.h"

/* How often a waiter looks whether its step must stop. */
#define STOP_CHECK_MS 200

void
connect_gate_init(connect_gate *g, int n)
{
	pthread_mutex_init(&g->lock, NULL);
	pthread_cond_init(&g->freed, NULL);
	g->free = n;
}

void
connect_gate_destroy(connect_gate *g)
{
	pthread_mutex_destroy(&g->lock);
	pthread_cond_destroy(&g->freed);
}

bool
connect_gate_enter(connect_gate *g, bool (*stop) (void *arg), void *arg)
{
	pthread_mutex_lock(&g->lock);
	while (g->free == 0)
	{
		struct timespec until;

		if (stop && stop(arg))
		{
			pthread_mutex_unlock(&g->lock);
			return false;
		}
		pf_deadline_in(&until, CLOCK_REALTIME, STOP_CHECK_MS);
		(void) pthread_cond_timedwait(&g->freed, &g->lock, &until);
	}
	g->free--;
	pthread_mutex_unlock(&g->lock);
	return true;
}

void
connect_gate_leave(connect_gate *g)
{
	pthread_mutex_lock(&g->lock);
	g->free++;
	pthread_cond_signal(&g->freed);
	pthread_mutex_unlock(&g->lock);
}
