/*
 * trace_context.h
 *		W3C trace context (https://www.w3.org/TR/trace-context/): the
 *		traceparent that ties an operation's spans into one trace, from the
 *		HTTP request that submitted it to its last step (issue 29).
 *
 *		The extension stores one traceparent per operation and the relay
 *		sends it with each event as the SQS attribute "traceparent"; each
 *		edge process reads it, makes a span of its own under it (a new span
 *		id, same trace id and flags), and names both ids in its log lines.
 */
#ifndef PAYFLOW_TRACE_CONTEXT_H
#define PAYFLOW_TRACE_CONTEXT_H

#include <stdbool.h>

/* "00-" 32 "-" 16 "-" 2, and the NUL */
#define PF_TRACEPARENT_LEN 55

typedef struct pf_trace_context
{
	char		trace_id[33];	/* 32 lower-case hex digits, not all zeros */
	char		span_id[17];	/* 16 lower-case hex digits, not all zeros */
	bool		sampled;		/* the flags' sampled bit */
} pf_trace_context;

/*
 * Reads a traceparent header or attribute. False (out untouched) for
 * anything the recommendation says to ignore: a malformed value, version
 * ff, all-zero ids, version 00 with more fields. A later version is read
 * as version 00 (its first four fields).
 */
bool		pf_traceparent_parse(const char *text, pf_trace_context *out);

/* A new trace: random trace and span ids. */
void		pf_trace_context_start(pf_trace_context *out, bool sampled);

/* A span under parent: its trace id and flags, a new span id. */
void		pf_trace_context_child(const pf_trace_context *parent, pf_trace_context *out);

/*
 * The span under parent, or a new sampled trace when parent is NULL or
 * its text does not parse (the recommendation: restart the trace).
 */
void		pf_trace_context_continue(const char *parent_text, pf_trace_context *out);

/* Version 00's text: out holds PF_TRACEPARENT_LEN + 1 bytes. */
void		pf_traceparent_format(const pf_trace_context *ctx, char *out);

#endif							/* PAYFLOW_TRACE_CONTEXT_H */
