/*
 * receive_pacing.c
 *		When a worker's next receive goes, for a steady flow (receive_pacing.h).
 */
#include "receive_pacing.h"

void
receive_pacing_note(receive_pacing *p, int n, int64_t now_ms)
{
	p->ended_ms = now_ms;
	if (p->window_since_ms == 0)
		p->window_since_ms = now_ms;
	p->counted += n;
	if (now_ms - p->window_since_ms >= ARRIVAL_WINDOW_MS)
	{
		double		rate = p->counted * 1000.0 / (double) (now_ms - p->window_since_ms);

		p->per_s = 0.5 * p->per_s + 0.5 * rate;
		p->window_since_ms = now_ms;
		p->counted = 0;
	}
}

int64_t
receive_pacing_not_before(const receive_pacing *p, int full, int wait_ms)
{
	double		hold;

	if (p->ended_ms == 0 || full < 2 || p->per_s * wait_ms / 1000.0 < 2.0)
		return 0;
	hold = full * 1000.0 / p->per_s;
	return p->ended_ms + (int64_t) (hold < wait_ms ? hold : wait_ms);
}
