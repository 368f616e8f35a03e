/*
 * attempt_ended.c
 *		Whether an update of an operation's row ended its open step's attempt
 *		without success: the WHEN clause of the trigger operations_attempt_ended
 *		(extension/sql/step_attempts.sql), which then records the attempt.
 *
 * Why C and not the clause written out in SQL: PostgreSQL builds a
 * trigger's WHEN clause again in every statement that updates the table
 * (it reads the clause from the catalog and plans it, TriggerEnabled), and
 * every claim, heartbeat and completion is such a statement.  That clause
 * cost each of them some 10 us (a one-row update without it: 28-38); a call of
 * one function is built in a fraction of that (test/bench/README.md).  The
 * C-free flavour keeps the clause in SQL (flavour-sql/attempt_ended.sql),
 * and the two say the same.
 */
#include "payflow.h"

#include "fmgr.h"
#include "utils/builtins.h"

PG_FUNCTION_INFO_V1(payflow_attempt_ended);

static bool
text_is(text *t, const char *s)
{
	size_t		n = strlen(s);

	return VARSIZE_ANY_EXHDR(t) == n && memcmp(VARDATA_ANY(t), s, n) == 0;
}

static bool
text_equal(text *a, text *b)
{
	return VARSIZE_ANY_EXHDR(a) == VARSIZE_ANY_EXHDR(b) &&
		memcmp(VARDATA_ANY(a), VARDATA_ANY(b), VARSIZE_ANY_EXHDR(a)) == 0;
}

/*
 * _attempt_ended(old_step, new_step, old_status, new_status, old_attempt,
 * new_attempt), STRICT: the step stays (a completion moves it on, or ends
 * the operation SUCCEEDED: its success is the step_results row) and either
 * the step leaves RUNNING or a new attempt starts over it (a takeover), or
 * a step not running fails (a dead-lettered request).  The columns compare
 * byte-wise: step names and statuses are ASCII, "C" or deterministic.
 */
Datum
payflow_attempt_ended(PG_FUNCTION_ARGS)
{
	text	   *old_step = PG_GETARG_TEXT_PP(0);
	text	   *new_step = PG_GETARG_TEXT_PP(1);
	text	   *old_status = PG_GETARG_TEXT_PP(2);
	text	   *new_status = PG_GETARG_TEXT_PP(3);
	int32		old_attempt = PG_GETARG_INT32(4);
	int32		new_attempt = PG_GETARG_INT32(5);

	if (!text_equal(old_step, new_step) || text_is(new_status, "SUCCEEDED"))
		PG_RETURN_BOOL(false);
	if (text_is(old_status, "RUNNING"))
		PG_RETURN_BOOL(!text_is(new_status, "RUNNING") || new_attempt != old_attempt);
	PG_RETURN_BOOL(!text_equal(old_status, new_status) && text_is(new_status, "FAILED") && new_attempt > 0);
}
