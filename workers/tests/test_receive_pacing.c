/*
 * test_receive_pacing.c
 *		When a worker's next receive goes for a steady flow
 *		(src/worker/receive_pacing.c): at once for sparse traffic, after
 *		the time a full batch takes at the measured rate, never later than
 *		the configured wait.
 */
#include <stdio.h>
#include <string.h>

#include "../src/worker/receive_pacing.c"
#include "unit.h"

/* n messages per receive, a receive every gap_ms, for total_ms from t0 */
static int64_t
feed(receive_pacing *p, int64_t t0, int n, int gap_ms, int total_ms)
{
	int64_t		t = t0;

	for (; t < t0 + total_ms; t += gap_ms)
		receive_pacing_note(p, n, t);
	return t - gap_ms;
}

int
main(void)
{
	receive_pacing p;
	int64_t		last;

	/* nothing received yet: at once */
	memset(&p, 0, sizeof(p));
	CHECK(receive_pacing_not_before(&p, 10, 50) == 0);

	/* sparse traffic, 10 messages a second (0.5 per 50 ms wait): at once */
	memset(&p, 0, sizeof(p));
	last = feed(&p, 1000, 1, 100, 3000);
	CHECK(p.per_s > 8 && p.per_s < 12);
	CHECK(receive_pacing_not_before(&p, 10, 50) == 0);

	/* 100 messages a second (5 per wait): a full batch takes 100 ms, so the cap */
	memset(&p, 0, sizeof(p));
	last = feed(&p, 1000, 1, 10, 3000);
	CHECK(p.per_s > 90 && p.per_s < 110);
	CHECK(receive_pacing_not_before(&p, 10, 50) == last + 50);

	/* 1,000 a second: ten take 10 ms, under the cap */
	memset(&p, 0, sizeof(p));
	last = feed(&p, 1000, 5, 5, 3000);
	CHECK(p.per_s > 900 && p.per_s < 1100);
	CHECK(receive_pacing_not_before(&p, 10, 50) >= last + 9);
	CHECK(receive_pacing_not_before(&p, 10, 50) <= last + 11);
	/* ... and for three free slots, 3 ms */
	CHECK(receive_pacing_not_before(&p, 3, 50) <= last + 4);

	/* PAYFLOW_SQS_BATCH_WAIT_MS=0: never a wait; one slot free: nothing to gather */
	CHECK(receive_pacing_not_before(&p, 10, 0) == 0);
	CHECK(receive_pacing_not_before(&p, 1, 50) == 0);

	/* the flow stops: long polls come back empty, and the rate falls below the threshold */
	last = feed(&p, last + 20000, 0, 20000, 200000);
	CHECK(p.per_s * 50 / 1000.0 < 2.0);
	CHECK(receive_pacing_not_before(&p, 10, 50) == 0);

	return unit_finish("receive_pacing");
}
