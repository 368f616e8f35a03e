/*
 * aws_credentials.h
 *		AWS credentials from the environment (AWS_ACCESS_KEY_ID,
 *		AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN) or from the ECS container
 *		credentials endpoint:
 *
 *		- AWS_CONTAINER_CREDENTIALS_RELATIVE_URI, against http://169.254.170.2;
 *		- AWS_CONTAINER_CREDENTIALS_FULL_URI, with an Authorization header from
 *		  AWS_CONTAINER_AUTHORIZATION_TOKEN or the file named by
 *		  AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE (re-read on every refresh, since
 *		  the agent rotates it). Plain http is allowed only to loopback and the
 *		  ECS/EKS agent addresses, as the AWS SDKs do.
 *
 * Endpoint credentials are cached and refreshed by a thread of the provider
 * five minutes before their Expiration (half-way through the lifetime of
 * ones that live less than five minutes), so a slow or failing endpoint
 * never holds up a call while the cached ones are valid; if a refresh fails
 * they stay in use, and it is tried again every 15 s. Every secret obtained
 * is registered with the logger.
 */
#ifndef PAYFLOW_AWS_CREDENTIALS_H
#define PAYFLOW_AWS_CREDENTIALS_H

#include <stdbool.h>
#include <time.h>

#include "payflow/config.h"
#include "payflow/error.h"

#define PF_ECS_CREDENTIALS_HOST "http://169.254.170.2"
#define PF_CREDENTIALS_REFRESH_MARGIN 300	/* seconds before Expiration */

typedef struct pf_aws_credentials
{
	char	   *access_key_id;
	char	   *secret_access_key;
	char	   *session_token;	/* NULL when none */
	time_t		expiration;		/* 0: never */
} pf_aws_credentials;

typedef struct pf_aws_credentials_provider pf_aws_credentials_provider;

/* NULL with err set when the configuration names no usable source. */
pf_aws_credentials_provider *pf_aws_credentials_provider_create(const pf_config *cfg, pf_error *err);
void		pf_aws_credentials_provider_destroy(pf_aws_credentials_provider *p);

/*
 * Current credentials. The pointer stays valid until the next call from the
 * same thread (a provider has one owner thread). Never waits while the
 * cached credentials are valid. When none are (before the first fetch, after
 * expiry or pf_aws_credentials_invalidate), wait true waits for the next
 * fetch to end (bounded by its time-outs, about 20 s); wait false returns at
 * once with the last fetch's error, or PF_ERR_TRANSIENT "CredentialsPending".
 */
pf_result	pf_aws_credentials_get(pf_aws_credentials_provider *p, bool wait, const pf_aws_credentials **out,
								   pf_error *err);

/* AWS said the token expired (clock skew, early rotation): fetch anew next time. */
void		pf_aws_credentials_invalidate(pf_aws_credentials_provider *p);

/* Parse the endpoint's JSON answer (exposed for tests). */
pf_result	pf_aws_credentials_parse(const char *json, pf_aws_credentials *out, pf_error *err);
void		pf_aws_credentials_free(pf_aws_credentials *c);

#endif							/* PAYFLOW_AWS_CREDENTIALS_H */
