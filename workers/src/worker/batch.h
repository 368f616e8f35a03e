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
 * Like db_claim_step, for this worker's step; when the input is a "pg"
 * payload whose checksum the database verified, it is in *input and
 * *has_input is true (no payload_get needed).
 */
pf_result	batch_claim(worker *w, const char *operation_id, step_claim *claim, pf_buf *input, bool *has_input,
						pf_error *err);
/* Like db_complete_step and db_fail_step. */
pf_result	batch_complete(worker *w, const char *operation_id, const char *result, json_t *result_ref,
						   json_t **answer, pf_error *err);
pf_result	batch_fail(worker *w, const char *operation_id, json_t *error, bool retryable, json_t **answer,
					   pf_error *err);

#endif							/* PAYFLOW_WORKER_BATCH_H */
