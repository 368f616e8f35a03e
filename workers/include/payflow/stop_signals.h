/*
 * stop_signals.h
 *		SIGTERM and SIGINT, taken the same way by every edge program.
 *
 * pf_stop_signals_block, called first in main (before any thread starts,
 * so that every thread inherits the mask), blocks both, ignores SIGPIPE
 * (a peer that went away is an error return, not a death) and returns a
 * signalfd. The program's main loop reads it with pf_stop_signals_take or
 * waits on it (poll, epoll, pf_stop_signals_wait): no handler runs in an
 * arbitrary thread, and a program's stop flags are written by its main
 * loop alone. A first signal starts the drain; what a second one does is
 * each program's choice (they all exit at once).
 *
 * Libraries whose loops must give up while a program is still starting
 * (pg.c's reconnects) may watch the same descriptor: it stays readable
 * until the main loop takes the signal.
 */
#ifndef PAYFLOW_STOP_SIGNALS_H
#define PAYFLOW_STOP_SIGNALS_H

#include <stdbool.h>

/* The signalfd (non-blocking, close-on-exec), or -1 with errno set. */
int			pf_stop_signals_block(void);

/* The number of a SIGTERM or SIGINT waiting on fd, taken; 0 when none. */
int			pf_stop_signals_take(int fd);

/* Waits up to timeout_ms (-1: no limit) for one and takes it; 0 when none came. */
int			pf_stop_signals_wait(int fd, int timeout_ms);

/* Whether one is waiting, without taking it. */
bool		pf_stop_signals_pending(int fd);

#endif							/* PAYFLOW_STOP_SIGNALS_H */
