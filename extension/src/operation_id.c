/*
 * operation_id.c
 *		Operation ids: "pay_" followed by a ULID.
 *
 * A ULID is 48 bits of Unix time in milliseconds and 80 random bits, written
 * as 26 characters of Crockford's base32, so ids sort by creation time and
 * index inserts stay on the right edge of the B-tree.  Within one backend
 * ids are strictly monotonic: a second id in the same millisecond (or after
 * the clock stepped back) reuses the last timestamp and adds one to the
 * random part, as the ULID specification describes.
 */
#include "payflow.h"

#include "fmgr.h"
#include "utils/builtins.h"
#include <sys/time.h>

#define ULID_RANDOM_BYTES 10
#define OPERATION_ID_PREFIX "pay_"

static const char crockford[] = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/* Last id handed out by this backend: the monotonicity state */
static uint64 last_ms = 0;
static uint8 last_random[ULID_RANDOM_BYTES];

static uint64 pf_now_ms(void);
static bool pf_increment_random(uint8 *random);
static void pf_encode_ulid(uint64 ms, const uint8 *random, char *out);

PG_FUNCTION_INFO_V1(payflow_new_operation_id);

/*
 * payflow._new_operation_id() returns a new "pay_<ULID>" id.
 */
Datum
payflow_new_operation_id(PG_FUNCTION_ARGS)
{
	char		out[sizeof(OPERATION_ID_PREFIX) - 1 + 26 + 1];
	uint64		ms = pf_now_ms();

	if (ms > last_ms)
	{
		if (!pg_strong_random(last_random, ULID_RANDOM_BYTES))
			ereport(ERROR,
					(errcode(ERRCODE_INTERNAL_ERROR),
					 errmsg("could not generate random bytes for an operation id")));
		last_ms = ms;
	}
	else if (!pf_increment_random(last_random))
	{
		/* 2^80 ids in one millisecond: borrow the next millisecond */
		last_ms++;
		memset(last_random, 0, ULID_RANDOM_BYTES);
	}

	memcpy(out, OPERATION_ID_PREFIX, sizeof(OPERATION_ID_PREFIX) - 1);
	pf_encode_ulid(last_ms, last_random, out + sizeof(OPERATION_ID_PREFIX) - 1);
	PG_RETURN_TEXT_P(cstring_to_text(out));
}

static uint64
pf_now_ms(void)
{
	struct timeval tv;

	gettimeofday(&tv, NULL);
	return (uint64) tv.tv_sec * 1000 + tv.tv_usec / 1000;
}

/* Adds one to the 80-bit big-endian number; false when it wrapped around */
static bool
pf_increment_random(uint8 *random)
{
	for (int i = ULID_RANDOM_BYTES - 1; i >= 0; i--)
	{
		if (++random[i] != 0)
			return true;
	}
	return false;
}

/*
 * Writes 26 base32 characters and a terminating NUL: 10 for the 48-bit
 * time (the top two bits of the first character are zero), 16 for the
 * 80 random bits.
 */
static void
pf_encode_ulid(uint64 ms, const uint8 *random, char *out)
{
	uint64		hi = 0;
	uint64		lo = 0;

	for (int i = 9; i >= 0; i--)
	{
		out[i] = crockford[ms & 0x1F];
		ms >>= 5;
	}

	/* 80 bits = 40 high + 40 low, eight characters each */
	for (int i = 0; i < 5; i++)
		hi = (hi << 8) | random[i];
	for (int i = 5; i < 10; i++)
		lo = (lo << 8) | random[i];
	for (int i = 7; i >= 0; i--)
	{
		out[10 + i] = crockford[hi & 0x1F];
		hi >>= 5;
		out[18 + i] = crockford[lo & 0x1F];
		lo >>= 5;
	}
	out[26] = '\0';
}
