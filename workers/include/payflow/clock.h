/*
 * clock.h
 *		The one place the edge programs read clocks: monotonic time for
 *		deadlines and durations, the absolute deadlines that
 *		pthread_cond_timedwait wants, and wall-clock seconds to compare
 *		with times other systems wrote (an S3 object's LastModified).
 */
#ifndef PAYFLOW_CLOCK_H
#define PAYFLOW_CLOCK_H

#include <stdint.h>
#include <time.h>

/* Monotonic milliseconds and microseconds, for deadlines and durations. */
int64_t		pf_now_ms(void);
int64_t		pf_now_us(void);

/* Wall-clock Unix seconds (UTC): only to compare with other systems' times. */
int64_t		pf_wall_seconds(void);

/* Sleep up to ms; a signal cuts it short, so shutdown flags are seen at once. */
void		pf_sleep_ms(int ms);

/*
 * *deadline = now + ms on clock (CLOCK_MONOTONIC for a condition variable
 * made with pthread_condattr_setclock, CLOCK_REALTIME for a default one).
 */
void		pf_deadline_in(struct timespec *deadline, clockid_t clock, int64_t ms);

#endif							/* PAYFLOW_CLOCK_H */
