/*
 * aws_client.h
 *		Signed AWS calls with retries, shared by the SQS and S3 clients.
 *
 * A call is described once (service, method, URL, headers to sign, body);
 * every attempt is signed anew (fresh X-Amz-Date, current credentials).
 * Retryable failures (no response, 5xx, 429, throttling and expired-token
 * codes) are retried with exponential back-off and jitter up to
 * AWS_MAX_ATTEMPTS attempts; a call is handed back only when it succeeded or
 * finally failed, so callers see one outcome per call.
 *
 * Calls run concurrently on one curl multi handle: pf_aws_start() several,
 * then pf_aws_wait() for each. pf_aws_perform() runs one call to the end.
 * A started call never waits for credentials (an attempt without valid ones
 * fails as CredentialsPending and is retried like any transient failure); a
 * performed one may, since its caller blocks anyway.
 */
#ifndef PAYFLOW_AWS_CLIENT_H
#define PAYFLOW_AWS_CLIENT_H

#include <stdbool.h>
#include <stdint.h>

#include "payflow/aws_credentials.h"
#include "payflow/buf.h"
#include "payflow/config.h"
#include "payflow/error.h"
#include "payflow/http.h"

typedef struct pf_aws_client pf_aws_client;
typedef struct pf_aws_call pf_aws_call;

/* Fills call->error from an error response; code and message, at least. */
typedef void (*pf_aws_error_parser) (pf_aws_call *call);

#define PF_AWS_MAX_CALL_HEADERS 16

struct pf_aws_call
{
	/* request, set with pf_aws_call_init and pf_aws_call_add_header */
	const char *service;		/* signing name: "sqs", "s3" */
	char	   *method;
	char	   *url;
	pf_buf		body;
	int			n_headers;
	char	   *header_names[PF_AWS_MAX_CALL_HEADERS];
	char	   *header_values[PF_AWS_MAX_CALL_HEADERS];
	long		timeout_ms;		/* 0: the client's */
	pf_aws_error_parser parse_error;
	void	   *user;			/* the caller's */
	int			kind;			/* the caller's tag */

	/* outcome */
	pf_error	error;			/* result PF_OK on success */
	int			attempts;
	pf_http_request http;		/* the last attempt: status, response, headers */

	/* private */
	int64_t		retry_at_ms;
	bool		active;
	bool		blocking;		/* pf_aws_perform waits for it: it may wait for credentials */
	pf_aws_call *next;
};

pf_aws_client *pf_aws_client_create(const pf_config *cfg, pf_aws_credentials_provider *credentials);
void		pf_aws_client_destroy(pf_aws_client *client);
const char *pf_aws_client_region(const pf_aws_client *client);

/* The client's HTTP transfer set (for its statistics). */
pf_http    *pf_aws_client_http(pf_aws_client *client);

/* The body is copied. */
void		pf_aws_call_init(pf_aws_call *call, const char *service, const char *method, const char *url,
							 const void *body, size_t body_len);
void		pf_aws_call_add_header(pf_aws_call *call, const char *name, const char *value);
void		pf_aws_call_free(pf_aws_call *call);

pf_result	pf_aws_start(pf_aws_client *client, pf_aws_call *call);

/*
 * The next call that is finished (succeeded, or failed for good), waiting up
 * to timeout_ms (-1: as long as calls are pending). NULL on time-out, when
 * nothing is pending and extra_fd < 0, or when extra_fd (if >= 0) became
 * readable: a relay waits on its LISTEN socket and its batches at once.
 */
pf_aws_call *pf_aws_wait(pf_aws_client *client, int timeout_ms, int extra_fd);
int			pf_aws_pending(const pf_aws_client *client);

/* Wait for call alone (starting it first unless already started); returns call->error.result. */
pf_result	pf_aws_perform(pf_aws_client *client, pf_aws_call *call);

/* Would AWS's own SDKs retry this? (status 0 means no response arrived) */
bool		pf_aws_retryable(long status, const char *code);

#endif							/* PAYFLOW_AWS_CLIENT_H */
