/*
 * webhook_signature.h
 *		The signature of a webhook delivery, in the form Stripe made familiar:
 *
 *		Payflow-Signature: t=1733011200,v1=<64 hex digits>
 *
 * v1 is HMAC-SHA256 keyed with the tenant's secret (its bytes as
 * payflow.set_webhook returned them, "whsec_" included) over
 * "<t>.<body>": the timestamp, a dot, and the request body byte for byte.
 * A receiver recomputes it over the raw body it read, compares in constant
 * time, and rejects a t too far from its clock, so a captured delivery
 * cannot be replayed later. The scheme name leaves room for a v2.
 *
 * While a secret is being rotated (payflow.set_webhook again, for
 * payflow.webhook_secret_overlap) the header carries two v1 values, the
 * new secret's first, as Stripe does: "t=...,v1=<new>,v1=<previous>".  A
 * receiver accepts the delivery when any v1 matches a secret it holds, so
 * it can switch to the new secret at any moment of the overlap.
 */
#ifndef PAYFLOW_WEBHOOK_SIGNATURE_H
#define PAYFLOW_WEBHOOK_SIGNATURE_H

#include <stddef.h>
#include <time.h>

/* "t=" + up to 20 digits + twice ",v1=" + 64 hex digits + NUL */
#define PF_WEBHOOK_SIGNATURE_LEN 168

/* previous: the rotated secret while it still signs, else NULL */
void		pf_webhook_signature(const char *secret, const char *previous, time_t t, const char *body,
								 size_t body_len, char out[PF_WEBHOOK_SIGNATURE_LEN]);

#endif							/* PAYFLOW_WEBHOOK_SIGNATURE_H */
