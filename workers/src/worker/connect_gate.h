/*
 * connect_gate.h
 *		At most n connection attempts to one downstream at once, from every
 *		executor of a process; the others wait their turn.
 *
 * A worker started with a thousand executors and a queue full of requests
 * has them all log in to the legacy DBMS within the same second: a storm of
 * logins (each a password exchange and a forked server process) that such
 * a DBMS answers with refused or timed-out connections, each of which cost
 * a step an attempt. Through the gate the same logins arrive a few at a
 * time and each of them works. Calls on open connections never pass it.
 */
#ifndef PAYFLOW_CONNECT_GATE_H
#define PAYFLOW_CONNECT_GATE_H

#include <pthread.h>
#include <stdbool.h>

typedef struct connect_gate
{
	pthread_mutex_t lock;
	pthread_cond_t freed;
	int			free;
} connect_gate;

void		connect_gate_init(connect_gate *g, int n);
void		connect_gate_destroy(connect_gate *g);

/* Wait for a turn; false (no turn taken) once stop(arg) says so. */
bool		connect_gate_enter(connect_gate *g, bool (*stop) (void *arg), void *arg);
void		connect_gate_leave(connect_gate *g);

#endif							/* PAYFLOW_CONNECT_GATE_H */
