/*
 * step_hook_sql.c
 *		A hook step's SQL function, run in the statement that completes the
 *		step (step_hook.h), when the claim could not be in it too (an input
 *		in S3, or the one-statement path failed and the failure is to be
 *		classified and recorded here).
 *
 * invoke_postprocess runs the function with the worker's rights and checks
 * its signature and answer (22023). A function's error is the step's: a
 * SQLSTATE the pg module retries (classes 08 and 40, 57014, 55P03, 53300,
 * …) is retryable once its retries are spent, any other (22023 a bad
 * signature or answer, 22*, 23*, P0001 a RAISE, 42883 a function that does
 * not exist) fails the operation. PF004 means another worker took the step
 * over: nothing is recorded.
 */
#include "step_hook.h"

#include <stdlib.h>
#include <string.h>

#include "payflow/downstream_error.h"

/* $1 operation id, $2 worker id, $3 the function, $4 the input, $5 the step, $6 the lease token */
#define COMPLETE_WITH_HOOK \
	"SELECT payflow.complete_step($1, $5, $2, " \
	"payflow.invoke_postprocess($3::regprocedure, $1, $4::jsonb), NULL, $6)"

step_status
step_hook_run_sql(step_hook *hook, step_run *run)
{
	char	   *input = pf_strndup(run->input, run->input_len);
	const char *extra[4] = {hook->function, input, step_run_step_name(run), run->lease_token};
	pf_error	err;
	pf_result	r;
	json_t	   *e;

	if (step_stop_requested(run) != STOP_NONE)
	{
		free(input);
		return STEP_ABANDONED;
	}
	r = step_complete_with_sql(run, COMPLETE_WITH_HOOK, 4, extra, &err);
	free(input);
	if (r == PF_OK)
		return STEP_COMMITTED;
	if (strcmp(err.code, "PF004") == 0)
	{
		step_count_lost_lease(run);
		pf_log_warn(&run->ids, "lease lost before the hook's result could be committed: %s", err.message);
		return STEP_ABANDONED;
	}

	/*
	 * A function's error text echoes its input: code, class and a safe
	 * message (downstream_error.h); invoke_postprocess's own checks of the
	 * function ("post-processing hook … must …") keep their words.
	 */
	e = pf_downstream_sql_error(hook->source, err.code[0] ? err.code : "08006", err.message, hook->raw_error_text);
	if (strcmp(err.code, "22023") == 0 && strncmp(err.message, "post-processing hook ", 21) == 0)
		json_object_set_new(e, "message", json_string(err.message));
	json_object_set_new(e, "source", json_string(hook->source));
	json_object_set_new(e, "hook", json_string(hook->function));
	step_set_error(run, json_string_value(json_object_get(e, "code")),
				   json_string_value(json_object_get(e, "message")), e);
	/* pf_pg already retried a retryable SQLSTATE a few times: the database schedules the next */
	return r == PF_ERR_TRANSIENT || pf_pg_sqlstate_retryable(err.code) ? STEP_RETRYABLE : STEP_PERMANENT;
}
