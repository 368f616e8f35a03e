/*
 * backoff.h
 *		Exponential back-off with jitter (its clocks: clock.h). One rule for
 *		every retry loop in the edge processes (database reconnects, AWS calls,
 *		credential refreshes), so they all spread out the same way under load.
 */
#ifndef PAYFLOW_BACKOFF_H
#define PAYFLOW_BACKOFF_H

#include <stdint.h>

#include "payflow/clock.h"

/*
 * Delay before retry number attempt (0 for the first retry):
 * d = min(cap, base * 2^attempt), then a random value in [d/2, d]
 * ("equal jitter": spread out, yet never a zero-delay tight loop).
 */
int			pf_backoff_ms(int attempt, int base_ms, int cap_ms);
uint64_t	pf_random_u64(void);

#endif							/* PAYFLOW_BACKOFF_H */
