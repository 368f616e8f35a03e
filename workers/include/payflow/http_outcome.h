/*
 * http_outcome.h
 *		What the answer of an external HTTP API means for a worker's step,
 *		when the call carried the step's idempotency key (DESIGN §3): done,
 *		worth another attempt later, or failed for good.
 *
 *		2xx						done; the answer must be a JSON object
 *		408 409 425 429			retryable (time-out, a concurrent request with
 *								the same key, too early, throttled)
 *		500 502 503 504 and any	retryable: the server or a proxy in front of it
 *		other 5xx				failed; the same key makes a retry safe, and
 *								the database's attempt limit bounds the retries
 *		501 505					permanent: the endpoint does not do this at all
 *		other 4xx, 1xx, 3xx		permanent: the request is wrong (redirects are
 *								not followed: a moved endpoint is a setting to fix)
 *		no answer				retryable: refused, reset, time-out (curl:28),
 *								interrupted
 *
 * A retryable answer's Retry-After (seconds, or an HTTP date) becomes
 * "retryAfterSeconds" in the step's error, which payflow.fail_step honours
 * (up to the step's retry_max_delay).
 */
#ifndef PAYFLOW_HTTP_OUTCOME_H
#define PAYFLOW_HTTP_OUTCOME_H

#include <stdbool.h>
#include <time.h>

#include <jansson.h>

#include "payflow/error.h"
#include "payflow/http_call.h"

typedef enum pf_http_verdict
{
	PF_HTTP_DONE = 0,
	PF_HTTP_RETRYABLE,
	PF_HTTP_PERMANENT
} pf_http_verdict;

pf_http_verdict pf_http_status_verdict(long status);
const char *pf_http_verdict_name(pf_http_verdict verdict);

/*
 * Retry-After as seconds from now (>= 0; a date in the past is 0, at most
 * a day); false when value is NULL, empty or neither form.
 */
bool		pf_http_retry_after_seconds(const char *value, time_t now, double *seconds);

/*
 * The outcome of a call: call_result is what pf_http_call_post_json
 * returned (call_err its error). DONE: *answer is the answer, a JSON
 * object. Otherwise *error is the step's error:
 *
 *		{"code":"http_503"|"curl:28"|"interrupted"|"invalid_answer",
 *		 "message":…, "source":source, "httpStatus":503,
 *		 "retryAfterSeconds":2, "body":"<start of the answer>"}
 *
 * (members that do not apply are left out).
 */
pf_http_verdict pf_http_outcome(const pf_http_response *resp, pf_result call_result, const pf_error *call_err,
								const char *source, time_t now, json_t **answer, json_t **error);

/*
 * The first of names (a NULL-terminated list) that the object has as a
 * non-empty string or an integer, as text the caller frees; NULL if none.
 */
char	   *pf_json_id_member(const json_t *object, const char *const *names);

#endif							/* PAYFLOW_HTTP_OUTCOME_H */
