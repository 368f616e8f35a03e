/*
 * backoff.c
 *		payflow.backoff_delay(): exponential backoff with jitter.
 *
 * delay = min(base * 2^attempt, cap), then plus a uniform random share of
 * up to jitter * delay, so retries of many operations that failed together
 * (a legacy outage) spread out instead of returning as one wave.
 */
#include "payflow.h"

#include "common/pg_prng.h"
#include "datatype/timestamp.h"
#include "fmgr.h"
#include "utils/timestamp.h"

static int64
pf_interval_usecs(Interval *iv, const char *argname)
{
	int64		usecs = iv->time +
	(int64) iv->day * USECS_PER_DAY +
	(int64) iv->month * DAYS_PER_MONTH * USECS_PER_DAY;

	if (usecs < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not be negative", argname)));
	return usecs;
}

PG_FUNCTION_INFO_V1(payflow_backoff_delay);

Datum
payflow_backoff_delay(PG_FUNCTION_ARGS)
{
	int32		attempt = PG_GETARG_INT32(0);
	int64		base = pf_interval_usecs(PG_GETARG_INTERVAL_P(1), "base");
	int64		cap = pf_interval_usecs(PG_GETARG_INTERVAL_P(2), "cap");
	float8		jitter = PG_GETARG_FLOAT8(3);
	int64		delay;
	Interval   *result;

	if (attempt < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("attempt must not be negative")));
	if (!(jitter >= 0.0 && jitter <= 1.0))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("jitter must be between 0 and 1")));

	/* base << attempt, saturating at cap without overflowing int64 */
	if (base == 0)
		delay = 0;
	else if (attempt >= 62 || base > (cap >> attempt))
		delay = cap;
	else
		delay = base << attempt;

	if (jitter > 0.0 && delay > 0)
		delay += (int64) (pg_prng_double(&pg_global_prng_state) * jitter * (double) delay);

	result = (Interval *) palloc0(sizeof(Interval));
	result->time = delay;
	PG_RETURN_INTERVAL_P(result);
}
