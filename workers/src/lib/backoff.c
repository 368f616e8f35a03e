/*
 * backoff.c
 *		Back-off delays and randomness.
 */
#include "payflow/backoff.h"

#include <errno.h>
#include <sys/random.h>
#include <time.h>

uint64_t
pf_random_u64(void)
{
	uint64_t	r = 0;

	/* the kernel's pool needs no seeding and no state of ours */
	if (getrandom(&r, sizeof(r), GRND_NONBLOCK) != (ssize_t) sizeof(r))
	{
		struct timespec ts;

		clock_gettime(CLOCK_MONOTONIC, &ts);
		r = (uint64_t) ts.tv_nsec * 6364136223846793005ULL + (uint64_t) ts.tv_sec;
	}
	return r;
}

int
pf_backoff_ms(int attempt, int base_ms, int cap_ms)
{
	int64_t		d = base_ms > 0 ? base_ms : 1;
	int64_t		half;

	if (attempt < 0)
		attempt = 0;
	for (int i = 0; i < attempt && d < cap_ms; i++)
		d *= 2;
	if (d > cap_ms)
		d = cap_ms;
	half = d / 2;
	return (int) (half + (int64_t) (pf_random_u64() % (uint64_t) (d - half + 1)));
}
