/*
 * protection.h
 *		ECS task scale-in protection: the task stays protected while the
 *		worker holds messages, and is released once it has been idle for
 *		PAYFLOW_PROTECTION_IDLE_SECONDS (and after the drain).
 *
 * The calls to $ECS_AGENT_URI/task-protection/v1/state run on a thread of
 * their own with short time-outs; the main loop only records whether it
 * holds work (a lock and a flag), so an agent that answers 500, hangs or
 * refuses connections never delays a receive, a heartbeat or a step.
 */
#ifndef PAYFLOW_PROTECTION_H
#define PAYFLOW_PROTECTION_H

#include <stdbool.h>

#include "payflow/config.h"

typedef struct protection protection;

/* NULL when ECS_AGENT_URI is unset (not on ECS) or the thread cannot start. */
protection *protection_start(const pf_config *cfg);

/* Main thread, every loop turn: does the worker hold a message now? Never blocks on I/O. */
void		protection_note(protection *p, bool holding);

/* After the drain: release the protection (one attempt, bounded by its time-out), end the thread. */
void		protection_stop(protection *p);

#endif							/* PAYFLOW_PROTECTION_H */
