/*
 * batch.h
 *		Claims and outcomes of the executors gathered into one statement
 *		(claim_steps, complete_steps, fail_steps; batch.c).
 */
#ifndef PAYFLOW_WORKER_BATCH_H
#define PAYFLOW_WORKER_BATCH_H

#include "worker.h"

#include "payflow/buf.h"

/*
 * A job dispatched: its claim is to come, and a batch of claims waits for
 * it (loop.c, before the job is queued). batch_claim_forgone: the job ended
 * without asking (a bad message, a role that claims nothing; executor.c,
 * for every job: once asked, nothing to do), or went back unstarted at
 * the drain (loop.c).
 */
void		batch_claim_expected(job *j);
void		batch_claim_forgone(job *j);

/*
 * Like db_claim_step, for this worker's step and job j; when the input is a "pg"
 * payload whose checksum the database verified, it is in *input and
 * *has_input is true (no payload_get needed).
 */
pf_result	batch_claim(worker *w, job *j, const char *operation_id, step_claim *claim, pf_buf *input, bool *has_input,
						pf_error *err);

/*
 * For a role with a one-transaction hook: claim, hook and completion by
 * payflow.run_hook_steps. PF_OK: *claim is the claim's answer, and
 * *completion the completion's (the step is done) or NULL; *hook_error is
 * the hook's error for a step claimed and not done, or NULL. Else the
 * claim failed (err): the caller takes the usual path.
 */
pf_result	batch_claim_run_complete(worker *w, job *j, const char *hook, const char *operation_id, step_claim *claim,
									 json_t **completion, json_t **hook_error, pf_error *err);

/* Like db_complete_step and db_fail_step. */
pf_result	batch_complete(worker *w, const char *operation_id, const char *lease_token, const char *result,
						   json_t *result_ref, json_t **answer, pf_error *err);
pf_result	batch_fail(worker *w, const char *operation_id, const char *lease_token, json_t *error, bool retryable,
					   json_t **answer, pf_error *err);

#endif							/* PAYFLOW_WORKER_BATCH_H */
