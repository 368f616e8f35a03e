/*
 * clock.c
 *		Clocks and deadlines (clock.h).
 */
#include "payflow/clock.h"

int64_t
pf_wall_seconds(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t) ts.tv_sec;
}

int64_t
pf_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t
pf_now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t) ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void
pf_sleep_ms(int ms)
{
	struct timespec ts;

	if (ms <= 0)
		return;
	ts.tv_sec = ms / 1000;
	ts.tv_nsec = (long) (ms % 1000) * 1000000L;
	(void) nanosleep(&ts, NULL);
}

void
pf_deadline_in(struct timespec *deadline, clockid_t clock, int64_t ms)
{
	if (ms < 0)
		ms = 0;
	clock_gettime(clock, deadline);
	deadline->tv_sec += (time_t) (ms / 1000);
	deadline->tv_nsec += (long) (ms % 1000) * 1000000L;
	if (deadline->tv_nsec >= 1000000000L)
	{
		deadline->tv_sec++;
		deadline->tv_nsec -= 1000000000L;
	}
}
