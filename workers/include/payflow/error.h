/*
 * error.h
 *		The one error report every module fills: a category that tells the
 *		caller what to do next, plus the code and message to log.
 */
#ifndef PAYFLOW_ERROR_H
#define PAYFLOW_ERROR_H

#include <stdbool.h>

typedef enum pf_result
{
	PF_OK = 0,
	PF_ERR_TRANSIENT,			/* worth retrying later: network, throttling, 5xx, lost connection, retries exhausted */
	PF_ERR_FINAL,				/* retrying cannot help: bad request, domain error (PF0xx), constraint violation */
	PF_ERR_NOT_FOUND,			/* the object, queue or row does not exist */
	PF_ERR_CHECKSUM,			/* stored bytes differ from their reference: PF005 */
	PF_ERR_INVALID				/* caller's input rejected before any call */
} pf_result;

typedef struct pf_error
{
	pf_result	result;
	char		code[64];		/* SQLSTATE, AWS error code, "curl:N", "PF005" */
	char		message[512];
	long		http_status;	/* 0 when not an HTTP call */
} pf_error;

void		pf_error_clear(pf_error *err);

/* Sets err (when not NULL) and returns result, so "return pf_error_set(...)" works. */
pf_result	pf_error_set(pf_error *err, pf_result result, const char *code,
						 const char *fmt,...) __attribute__((format(printf, 4, 5)));
const char *pf_result_name(pf_result result);

#endif							/* PAYFLOW_ERROR_H */
