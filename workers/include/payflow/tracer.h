/*
 * tracer.h
 *		Spans exported over OTLP/HTTP with JSON encoding (issue 29): one
 *		trace per operation, from the API request that submitted it to its
 *		last step.
 *
 *		Off unless OTEL_EXPORTER_OTLP_ENDPOINT (or _TRACES_ENDPOINT) is set;
 *		then spans that end go to a bounded queue, and one thread of the
 *		tracer's own sends them in batches with a time-out. Nothing a
 *		collector does (slow, hung, refusing, gone) reaches the caller: a
 *		full queue drops the span and counts it (pf_tracer_dropped, on
 *		/metrics), and the drops are logged once a minute. Trace contexts
 *		still travel (trace_context.h) when the tracer is off, so the logs
 *		name traces either way.
 *
 *		The standard variables: OTEL_EXPORTER_OTLP_ENDPOINT,
 *		_TRACES_ENDPOINT, _HEADERS, _TRACES_HEADERS, _PROTOCOL (http/json;
 *		anything else turns the tracer off with an error line), _TIMEOUT,
 *		_TRACES_TIMEOUT, OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES,
 *		OTEL_TRACES_SAMPLER (and _ARG), OTEL_BSP_SCHEDULE_DELAY,
 *		OTEL_BSP_MAX_QUEUE_SIZE, OTEL_BSP_MAX_EXPORT_BATCH_SIZE. On ECS, the
 *		task metadata endpoint adds the cloud and aws.ecs.* attributes.
 */
#ifndef PAYFLOW_TRACER_H
#define PAYFLOW_TRACER_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "payflow/buf.h"
#include "payflow/trace_context.h"

/* OTLP's span kinds (opentelemetry/proto/trace/v1/trace.proto) */
typedef enum pf_span_kind
{
	PF_SPAN_INTERNAL = 1,
	PF_SPAN_SERVER = 2,
	PF_SPAN_CLIENT = 3,
	PF_SPAN_PRODUCER = 4,
	PF_SPAN_CONSUMER = 5
} pf_span_kind;

/*
 * A span as it is built: its members as OTLP/JSON text, put together when
 * it ends (a tree of JSON objects cost a dozen mallocs per attribute: a
 * fifth of the edge processes' CPU per operation, test/bench/tracing.sh).
 */
typedef struct pf_span
{
	pf_trace_context ctx;		/* this span's: what its children and the logs name */
	bool		recording;		/* the tracer is on and the span sampled */
	char		parent_id[17];	/* "" for a root */
	char		name[128];
	int			kind;
	char		start[24];		/* Unix nanoseconds */
	int			status;			/* 0 unset, 2 error */
	char		status_message[128];
	char	   *trace_state;
	pf_buf		attributes;		/* KeyValue objects, comma-separated */
	pf_buf		events;
	pf_buf		links;
} pf_span;

/* Whether the span will be exported (else every pf_span_* call on it is a no-op). */
bool		pf_span_recording(const pf_span *span);

/*
 * Reads the environment and, with an endpoint, starts the export thread.
 * default_service: service.name unless OTEL_SERVICE_NAME says otherwise.
 * resource: more resource attributes (an object of strings), or NULL;
 * consumed.
 */
void		pf_tracer_start(const char *default_service, json_t *resource);

/* Sends what is queued (up to timeout_ms) and stops the thread. */
void		pf_tracer_stop(int timeout_ms);

bool		pf_tracer_on(void);

/* The exporter's counters as Prometheus text (payflow_trace_spans_*_total), on or off. */
struct pf_buf;
void		pf_tracer_render_metrics(struct pf_buf *out);
uint64_t	pf_tracer_exported(void);
uint64_t	pf_tracer_dropped(void);

/*
 * A span under parent (its trace, a new span id), or the root of a new
 * trace when parent is NULL; recorded when the tracer is on and the
 * sampler says so (parent-based by default: the parent's sampled flag).
 */
void		pf_span_begin(pf_span *span, const char *name, pf_span_kind kind, const pf_trace_context *parent);

/* The same, under the traceparent text of a message or header (NULL or bad: a new trace). */
void		pf_span_begin_text(pf_span *span, const char *name, pf_span_kind kind, const char *traceparent);

/* Renames it (a name known only once its message is read). */
void		pf_span_set_name(pf_span *span, const char *name);

/* The W3C tracestate the caller sent with its traceparent (kept on this span only). */
void		pf_span_set_trace_state(pf_span *span, const char *tracestate);

void		pf_span_set_str(pf_span *span, const char *key, const char *value);
void		pf_span_set_int(pf_span *span, const char *key, int64_t value);
void		pf_span_set_bool(pf_span *span, const char *key, bool value);

/* An event at this moment; attributes: an object of strings and integers, or NULL; consumed. */
void		pf_span_add_event(pf_span *span, const char *name, json_t *attributes);

/* A link to another span (a relay batch names the events it carried). */
void		pf_span_add_link(pf_span *span, const pf_trace_context *other);

/* Status ERROR with a message (never card data: callers pass classes and codes). */
void		pf_span_set_error(pf_span *span, const char *message);

/* Ends the span and queues it; the span may be begun again afterwards. */
void		pf_span_end(pf_span *span);

/* Ends it without sending (a span that turned out to be no work). */
void		pf_span_discard(pf_span *span);

#endif							/* PAYFLOW_TRACER_H */
