/*
 * tracer.c
 *		Spans, a bounded queue and an OTLP/HTTP JSON exporter thread
 *		(tracer.h).
 *
 *		The callers' side (pf_span_*) builds a span as the JSON object OTLP
 *		sends and, at its end, appends it to the queue under a mutex: a
 *		full queue drops it. The export thread takes batches off the queue
 *		and POSTs them with a time-out; a batch the collector does not take
 *		(an error, a time-out, a refusal) is dropped and counted, never
 *		retried in front of newer spans: tracing is best effort and never
 *		holds a step, the relay or a request.
 */
#include "payflow/tracer.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "payflow/buf.h"
#include "payflow/clock.h"
#include "payflow/http.h"
#include "payflow/log.h"

#define TRACER_SCOPE "payflow"
#define TRACER_VERSION "0.5.0"

typedef enum root_sampler
{
	ROOT_ALWAYS_ON,
	ROOT_ALWAYS_OFF,
	ROOT_RATIO
} root_sampler;

static struct
{
	pthread_mutex_t lock;
	pthread_cond_t wake;
	pthread_t	thread;
	bool		on;				/* an endpoint, and the thread runs */
	bool		stopping;

	/* the sampler: OTEL_TRACES_SAMPLER, _ARG */
	root_sampler root;
	bool		parent_based;
	double		ratio;

	/* the exporter's settings */
	char	   *url;
	struct curl_slist *headers; /* "Name: value" lines */
	long		timeout_ms;
	int			delay_ms;
	int			max_queue;
	int			max_batch;
	json_t	   *resource;		/* the resource's attributes: an object of strings */

	/* the queue: a ring of span objects */
	char	  **queue;			/* each span's OTLP/JSON text */
	int			head;
	int			count;
	bool		exporting;		/* a batch is out: stop waits for it */
	pf_http    *http;			/* the thread's; pf_http_interrupt from stop */

	uint64_t	exported;
	uint64_t	dropped;
	uint64_t	dropped_logged; /* dropped at the last log line */
	int64_t		dropped_log_ms;
}			tracer = {

	.lock = PTHREAD_MUTEX_INITIALIZER,
	.wake = PTHREAD_COND_INITIALIZER,
	.root = ROOT_ALWAYS_ON,
	.parent_based = true,
	.ratio = 1.0,
};

/* ---- the environment ---- */

static const char *
env_nonempty(const char *name)
{
	const char *v = getenv(name);

	return v && v[0] ? v : NULL;
}

static long
env_long(const char *name, long dflt, long min, long max)
{
	const char *v = env_nonempty(name);
	char	   *end;
	long		n;

	if (v == NULL)
		return dflt;
	errno = 0;
	n = strtol(v, &end, 10);
	if (errno != 0 || *end != '\0' || n < min || n > max)
	{
		pf_log_warn(NULL, "%s=%s is not a whole number from %ld to %ld: %ld is used", name, v, min, max, dflt);
		return dflt;
	}
	return n;
}

/* %XX decoded in place (the W3C baggage octets the OTEL_*_HEADERS and _ATTRIBUTES lists use) */
static void
percent_decode(char *s)
{
	char	   *out = s;

	for (char *p = s; *p; p++)
	{
		unsigned	c;

		if (*p == '%' && p[1] && p[2] && sscanf(p + 1, "%2x", &c) == 1)
		{
			*out++ = (char) c;
			p += 2;
		}
		else
			*out++ = *p;
	}
	*out = '\0';
}

static char *
trim(char *s)
{
	char	   *end;

	while (*s == ' ' || *s == '\t')
		s++;
	end = s + strlen(s);
	while (end > s && (end[-1] == ' ' || end[-1] == '\t'))
		*--end = '\0';
	return s;
}

/* "k=v,k2=v2": calls take(key, value) for each pair, decoded and trimmed */
static void
each_pair(const char *list, void (*take) (const char *key, const char *value, void *arg), void *arg)
{
	char	   *copy = pf_strdup(list);
	char	   *save = NULL;

	for (char *item = strtok_r(copy, ",", &save); item; item = strtok_r(NULL, ",", &save))
	{
		char	   *eq = strchr(item, '=');
		char	   *key;
		char	   *value;

		if (eq == NULL)
			continue;
		*eq = '\0';
		key = trim(item);
		value = trim(eq + 1);
		percent_decode(key);
		percent_decode(value);
		if (key[0])
			take(key, value, arg);
	}
	free(copy);
}

static void
take_header(const char *key, const char *value, void *arg)
{
	pf_buf		line = PF_BUF_INIT;

	(void) arg;
	pf_buf_appendf(&line, "%s: %s", key, value);
	tracer.headers = curl_slist_append(tracer.headers, pf_buf_str(&line));
	/* an API key of the collector's: never in a log line */
	pf_log_add_secret(value);
	pf_buf_free(&line);
}

static void
take_attribute(const char *key, const char *value, void *arg)
{
	json_t	   *attrs = arg;

	json_object_set_new(attrs, key, json_string(value));
}

static void
read_sampler(void)
{
	const char *name = env_nonempty("OTEL_TRACES_SAMPLER");
	const char *arg = env_nonempty("OTEL_TRACES_SAMPLER_ARG");

	tracer.root = ROOT_ALWAYS_ON;
	tracer.parent_based = true;
	tracer.ratio = 1.0;
	if (name == NULL || strcmp(name, "parentbased_always_on") == 0)
		return;
	if (strcmp(name, "always_on") == 0)
		tracer.parent_based = false;
	else if (strcmp(name, "always_off") == 0)
	{
		tracer.parent_based = false;
		tracer.root = ROOT_ALWAYS_OFF;
	}
	else if (strcmp(name, "traceidratio") == 0 || strcmp(name, "parentbased_traceidratio") == 0)
	{
		char	   *end = NULL;
		double		r = arg ? strtod(arg, &end) : 1.0;

		tracer.parent_based = strncmp(name, "parentbased_", 12) == 0;
		tracer.root = ROOT_RATIO;
		if (arg && (*end != '\0' || !(r >= 0.0 && r <= 1.0)))
		{
			pf_log_warn(NULL, "OTEL_TRACES_SAMPLER_ARG=%s is not a ratio from 0 to 1: 1 is used", arg);
			r = 1.0;
		}
		tracer.ratio = r;
	}
	else if (strcmp(name, "parentbased_always_off") == 0)
		tracer.root = ROOT_ALWAYS_OFF;
	else
		pf_log_warn(NULL, "OTEL_TRACES_SAMPLER=%s is not a sampler payflow knows: parentbased_always_on is used", name);
}

/* ---- sampling ---- */

static bool
sample_root(const char *trace_id)
{
	unsigned long long low = 0;

	switch (tracer.root)
	{
		case ROOT_ALWAYS_ON:
			return true;
		case ROOT_ALWAYS_OFF:
			return false;
		case ROOT_RATIO:
			/* the trace id's last 8 bytes, as a fraction of 2^64 */
			if (sscanf(trace_id + 16, "%16llx", &low) != 1)
				return true;
			return ldexp((double) low, -64) < tracer.ratio;
	}
	return true;
}

/* ---- spans ---- */

static void
now_nanos(char *out, size_t len)
{
	struct timespec ts;

	char		digits[24];
	int			n = 0;
	uint64_t	ns;

	clock_gettime(CLOCK_REALTIME, &ts);
	ns = (uint64_t) ts.tv_sec * 1000000000u + (uint64_t) ts.tv_nsec;
	/* by hand: two of these a span, and snprintf showed in its profile */
	do
	{
		digits[n++] = (char) ('0' + ns % 10);
		ns /= 10;
	} while (ns > 0 && n < (int) sizeof(digits));
	for (int i = 0; i < n && (size_t) i + 1 < len; i++)
		out[i] = digits[n - 1 - i];
	out[(size_t) n < len ? n : (int) len - 1] = '\0';
}

/*
 * s as a JSON string: quotes, backslashes and control characters escaped.
 * Runs of plain bytes are copied at once, and nothing here goes through
 * printf: building spans is what tracing costs a worker (tracing.sh's bench).
 */
static void
append_json_string(pf_buf *out, const char *s)
{
	static const char hex[] = "0123456789abcdef";
	const unsigned char *run = (const unsigned char *) s;
	const unsigned char *p;

	pf_buf_append(out, "\"", 1);
	for (p = run; *p; p++)
	{
		char		esc[6] = {'\\', 'u', '0', '0', 0, 0};

		if (*p != '"' && *p != '\\' && *p >= 0x20)
			continue;
		pf_buf_append(out, run, (size_t) (p - run));
		if (*p == '"' || *p == '\\')
		{
			esc[1] = (char) *p;
			pf_buf_append(out, esc, 2);
		}
		else
		{
			esc[4] = hex[*p >> 4];
			esc[5] = hex[*p & 15];
			pf_buf_append(out, esc, 6);
		}
		run = p + 1;
	}
	pf_buf_append(out, run, (size_t) (p - run));
	pf_buf_append(out, "\"", 1);
}

/* a literal: the compiler knows its length */
#define APPEND_LIT(buf, lit) pf_buf_append((buf), (lit), sizeof(lit) - 1)

bool
pf_span_recording(const pf_span *span)
{
	return span->recording;
}

void
pf_span_begin(pf_span *span, const char *name, pf_span_kind kind, const pf_trace_context *parent)
{
	if (parent)
	{
		pf_trace_context_child(parent, &span->ctx);
		if (!tracer.parent_based)
			span->ctx.sampled = sample_root(span->ctx.trace_id);
	}
	else
	{
		pf_trace_context_start(&span->ctx, true);
		span->ctx.sampled = sample_root(span->ctx.trace_id);
	}
	span->recording = tracer.on && span->ctx.sampled;
	if (!span->recording)
		return;
	if (parent)
		memcpy(span->parent_id, parent->span_id, sizeof(span->parent_id));
	else
		span->parent_id[0] = '\0';
	pf_span_set_name(span, name);
	span->kind = (int) kind;
	now_nanos(span->start, sizeof(span->start));
	span->status = 0;
	span->status_message[0] = '\0';
	span->trace_state = NULL;
	pf_buf_init(&span->attributes);
	pf_buf_init(&span->events);
	pf_buf_init(&span->links);
}

void
pf_span_begin_text(pf_span *span, const char *name, pf_span_kind kind, const char *traceparent)
{
	pf_trace_context parent;

	pf_span_begin(span, name, kind, pf_traceparent_parse(traceparent, &parent) ? &parent : NULL);
}

void
pf_span_set_name(pf_span *span, const char *name)
{
	size_t		n;

	if (!span->recording || name == NULL)
		return;
	n = strnlen(name, sizeof(span->name) - 1);
	memcpy(span->name, name, n);
	span->name[n] = '\0';
}

void
pf_span_set_trace_state(pf_span *span, const char *tracestate)
{
	/* the recommendation's bound; a longer one is dropped, not cut */
	if (span->recording && tracestate != NULL && tracestate[0] && strlen(tracestate) <= 512)
	{
		free(span->trace_state);
		span->trace_state = pf_strdup(tracestate);
	}
}

/* {"key":…,"value":{"<type>":<value text>}} after the others */
static void
append_attribute(pf_buf *list, const char *key, const char *type, const char *value, bool quoted)
{
	if (list->len > 0)
		APPEND_LIT(list, ",");
	APPEND_LIT(list, "{\"key\":");
	append_json_string(list, key);
	APPEND_LIT(list, ",\"value\":{\"");
	pf_buf_append_str(list, type);
	APPEND_LIT(list, "\":");
	if (quoted)
		append_json_string(list, value);
	else
		pf_buf_append_str(list, value);
	APPEND_LIT(list, "}}");
}

/* an object's string and integer members, as append_attribute's */
static void
append_attributes(pf_buf *list, json_t *obj)
{
	const char *key;
	json_t	   *value;

	json_object_foreach(obj, key, value)
	{
		char		text[24];

		if (json_is_string(value))
			append_attribute(list, key, "stringValue", json_string_value(value), true);
		else if (json_is_integer(value))
		{
			/* int64 is a string in OTLP's JSON (proto3's mapping) */
			snprintf(text, sizeof(text), "%lld", (long long) json_integer_value(value));
			append_attribute(list, key, "intValue", text, true);
		}
	}
}

void
pf_span_set_str(pf_span *span, const char *key, const char *value)
{
	if (span->recording && value != NULL)
		append_attribute(&span->attributes, key, "stringValue", value, true);
}

void
pf_span_set_int(pf_span *span, const char *key, int64_t value)
{
	char		text[24];

	if (!span->recording)
		return;
	/* int64 is a string in OTLP's JSON (proto3's mapping) */
	snprintf(text, sizeof(text), "%lld", (long long) value);
	append_attribute(&span->attributes, key, "intValue", text, true);
}

void
pf_span_set_bool(pf_span *span, const char *key, bool value)
{
	if (span->recording)
		append_attribute(&span->attributes, key, "boolValue", value ? "true" : "false", false);
}

void
pf_span_add_event(pf_span *span, const char *name, json_t *attributes)
{
	char		at[32];
	pf_buf		list = PF_BUF_INIT;

	if (!span->recording)
	{
		json_decref(attributes);
		return;
	}
	append_attributes(&list, attributes);
	json_decref(attributes);
	now_nanos(at, sizeof(at));
	if (span->events.len > 0)
		pf_buf_append_char(&span->events, ',');
	pf_buf_appendf(&span->events, "{\"timeUnixNano\":\"%s\",\"name\":", at);
	append_json_string(&span->events, name);
	pf_buf_appendf(&span->events, ",\"attributes\":[%s]}", list.len ? pf_buf_str(&list) : "");
	pf_buf_free(&list);
}

void
pf_span_add_link(pf_span *span, const pf_trace_context *other)
{
	if (!span->recording)
		return;
	if (span->links.len > 0)
		pf_buf_append_char(&span->links, ',');
	pf_buf_appendf(&span->links, "{\"traceId\":\"%s\",\"spanId\":\"%s\"}", other->trace_id, other->span_id);
}

void
pf_span_set_error(pf_span *span, const char *message)
{
	if (!span->recording)
		return;
	span->status = 2;
	snprintf(span->status_message, sizeof(span->status_message), "%s", message ? message : "");
}

void
pf_span_discard(pf_span *span)
{
	if (!span->recording)
		return;
	span->recording = false;
	pf_buf_free(&span->attributes);
	pf_buf_free(&span->events);
	pf_buf_free(&span->links);
	free(span->trace_state);
	span->trace_state = NULL;
}

void
pf_span_end(pf_span *span)
{
	char		end[32];
	pf_buf		out = PF_BUF_INIT;
	bool		queued = false;
	char	   *text;

	if (!span->recording)
		return;
	now_nanos(end, sizeof(end));
	pf_buf_reserve(&out, 256 + span->attributes.len + span->events.len + span->links.len);
	APPEND_LIT(&out, "{\"traceId\":\"");
	pf_buf_append(&out, span->ctx.trace_id, 32);
	APPEND_LIT(&out, "\",\"spanId\":\"");
	pf_buf_append(&out, span->ctx.span_id, 16);
	APPEND_LIT(&out, "\"");
	if (span->parent_id[0])
	{
		APPEND_LIT(&out, ",\"parentSpanId\":\"");
		pf_buf_append(&out, span->parent_id, 16);
		APPEND_LIT(&out, "\"");
	}
	if (span->trace_state)
	{
		APPEND_LIT(&out, ",\"traceState\":");
		append_json_string(&out, span->trace_state);
	}
	APPEND_LIT(&out, ",\"name\":");
	append_json_string(&out, span->name);
	APPEND_LIT(&out, ",\"kind\":");
	pf_buf_append_char(&out, (char) ('0' + span->kind));
	APPEND_LIT(&out, ",\"startTimeUnixNano\":\"");
	pf_buf_append_str(&out, span->start);
	APPEND_LIT(&out, "\",\"endTimeUnixNano\":\"");
	pf_buf_append_str(&out, end);
	APPEND_LIT(&out, "\",\"attributes\":[");
	pf_buf_append(&out, span->attributes.data, span->attributes.len);
	APPEND_LIT(&out, "]");
	if (span->events.len)
	{
		APPEND_LIT(&out, ",\"events\":[");
		pf_buf_append(&out, span->events.data, span->events.len);
		APPEND_LIT(&out, "]");
	}
	if (span->links.len)
	{
		APPEND_LIT(&out, ",\"links\":[");
		pf_buf_append(&out, span->links.data, span->links.len);
		APPEND_LIT(&out, "]");
	}
	if (span->status)
	{
		APPEND_LIT(&out, ",\"status\":{\"code\":2,\"message\":");
		append_json_string(&out, span->status_message);
		APPEND_LIT(&out, "}}");
	}
	else
		APPEND_LIT(&out, ",\"status\":{\"code\":0}}");
	pf_span_discard(span);
	/* bytes that are not UTF-8 (a foreign error text) would make the batch invalid JSON */
	pf_utf8_sanitize(out.data, out.len);
	text = out.data;			/* the queue owns it now */

	pthread_mutex_lock(&tracer.lock);
	if (tracer.on && !tracer.stopping && tracer.count < tracer.max_queue)
	{
		tracer.queue[(tracer.head + tracer.count) % tracer.max_queue] = text;
		tracer.count++;
		queued = true;
		if (tracer.count >= tracer.max_batch)
			pthread_cond_signal(&tracer.wake);
	}
	else
		tracer.dropped++;
	pthread_mutex_unlock(&tracer.lock);
	if (!queued)
		free(text);
}

/* ---- the export thread ---- */

/* ECS task metadata (v4): the cloud and aws.ecs.* resource attributes */
static void
add_ecs_attributes(pf_http *http, json_t *attrs)
{
	const char *base = env_nonempty("ECS_CONTAINER_METADATA_URI_V4");
	const char *paths[2] = {"/task", ""};

	if (base == NULL)
		return;
	json_object_set_new(attrs, "cloud.provider", json_string("aws"));
	json_object_set_new(attrs, "cloud.platform", json_string("aws_ecs"));
	for (int i = 0; i < 2; i++)
	{
		pf_buf		url = PF_BUF_INIT;
		pf_http_request req;
		pf_error	err;
		json_t	   *doc;

		pf_buf_appendf(&url, "%s%s", base, paths[i]);
		pf_http_request_init(&req, "GET", pf_buf_str(&url));
		req.timeout_ms = 1000;
		req.connect_timeout_ms = 500;
		req.max_response = 1 << 20;
		doc = pf_http_perform(http, &req, &err) == PF_OK && req.status == 200
			? json_loadb(req.response.data, req.response.len, 0, NULL) : NULL;
		if (i == 0 && doc)
		{
			const char *launch = json_string_value(json_object_get(doc, "LaunchType"));

			take_attribute("aws.ecs.task.arn", json_string_value(json_object_get(doc, "TaskARN")) ? : "", attrs);
			take_attribute("aws.ecs.cluster.arn", json_string_value(json_object_get(doc, "Cluster")) ? : "", attrs);
			take_attribute("aws.ecs.task.family", json_string_value(json_object_get(doc, "Family")) ? : "", attrs);
			take_attribute("aws.ecs.task.revision", json_string_value(json_object_get(doc, "Revision")) ? : "", attrs);
			take_attribute("cloud.availability_zone",
						   json_string_value(json_object_get(doc, "AvailabilityZone")) ? : "", attrs);
			if (launch)
			{
				char	   *lower = pf_strdup(launch);

				for (char *p = lower; *p; p++)
					*p = (char) (*p >= 'A' && *p <= 'Z' ? *p + 32 : *p);
				take_attribute("aws.ecs.launchtype", lower, attrs);
				free(lower);
			}
		}
		else if (doc)
		{
			take_attribute("aws.ecs.container.arn", json_string_value(json_object_get(doc, "ContainerARN")) ? : "",
						   attrs);
			take_attribute("container.name", json_string_value(json_object_get(doc, "Name")) ? : "", attrs);
			take_attribute("container.id", json_string_value(json_object_get(doc, "DockerId")) ? : "", attrs);
		}
		else
			pf_log_warn(NULL, "ECS task metadata %s unreadable: spans go without it", pf_buf_str(&url));
		json_decref(doc);
		pf_http_request_free(&req);
		pf_buf_free(&url);
	}
	/* an attribute the metadata left empty says nothing */
	{
		const char *key;
		json_t	   *value;
		void	   *tmp;

		json_object_foreach_safe(attrs, tmp, key, value)
			if (json_is_string(value) && json_string_value(value)[0] == '\0')
			json_object_del(attrs, key);
	}
}

static void
log_drops(int64_t now_ms)
{
	uint64_t	dropped;
	uint64_t	since;

	pthread_mutex_lock(&tracer.lock);
	dropped = tracer.dropped;
	pthread_mutex_unlock(&tracer.lock);
	since = dropped - tracer.dropped_logged;
	if (since == 0 || now_ms - tracer.dropped_log_ms < 60000)
		return;
	pf_log_write(PF_LOG_WARN, NULL, json_pack("{s:I,s:I}", "dropped", (json_int_t) since, "droppedTotal",
											  (json_int_t) dropped),
				 "%llu span(s) dropped in the last minute (collector slow, refusing or gone, or the queue full)",
				 (unsigned long long) since);
	tracer.dropped_logged = dropped;
	tracer.dropped_log_ms = now_ms;
}

/*
 * POSTs one batch of n spans (their texts, which it frees) after head, the
 * resource and scope; false when the collector did not take it.
 */
static bool
export_batch(const char *head, char **spans, int n, int64_t *fail_log_ms, bool *failing)
{
	pf_buf		body = PF_BUF_INIT;
	pf_http_request req;
	pf_error	err;
	bool		ok;

	pf_buf_append_str(&body, head);
	for (int i = 0; i < n; i++)
	{
		if (i > 0)
			pf_buf_append_char(&body, ',');
		pf_buf_append_str(&body, spans[i]);
		free(spans[i]);
	}
	pf_buf_append_str(&body, "]}]}]}");
	pf_http_request_init(&req, "POST", tracer.url);
	for (struct curl_slist *h = tracer.headers; h; h = h->next)
		pf_http_request_add_header_line(&req, h->data);
	pf_http_request_add_header(&req, "Content-Type", "application/json");
	pf_http_request_set_body(&req, body.data, body.len);
	req.timeout_ms = tracer.timeout_ms;
	req.connect_timeout_ms = tracer.timeout_ms < 3000 ? tracer.timeout_ms : 3000;
	req.max_response = 64 * 1024;
	ok = pf_http_perform(tracer.http, &req, &err) == PF_OK && req.status >= 200 && req.status < 300;
	if (!ok && pf_log_throttled(!*failing, fail_log_ms, pf_now_ms(), 60000))
		pf_log_write(PF_LOG_WARN, NULL, json_pack("{s:i,s:i}", "spans", n, "status", (int) req.status),
					 "span export failed (%s): the batch is dropped", req.status ? "collector answered" :
					 req.curl_error[0] ? req.curl_error : "no answer");
	*failing = !ok;
	pf_http_request_free(&req);
	pf_buf_free(&body);
	return ok;
}

static void *
export_thread(void *arg)
{
	json_t	   *ecs = json_object();
	int64_t		fail_log_ms = 0;
	bool		failing = false;
	char	   *head;
	char	  **taken = pf_calloc((size_t) tracer.max_batch, sizeof(char *));

	(void) arg;

	/*
	 * What every export starts with: the resource and the scope. ECS's
	 * attributes are read once, here (not to hold up start-up); those the
	 * settings name already keep the settings' value.
	 */
	add_ecs_attributes(tracer.http, ecs);
	json_object_update_missing(tracer.resource, ecs);
	json_decref(ecs);
	{
		pf_buf		h = PF_BUF_INIT;
		pf_buf		list = PF_BUF_INIT; /* (a list of its own: commas go between its items) */

		append_attributes(&list, tracer.resource);
		APPEND_LIT(&h, "{\"resourceSpans\":[{\"resource\":{\"attributes\":[");
		pf_buf_append(&h, list.data, list.len);
		pf_buf_free(&list);
		pf_buf_appendf(&h, "]},\"scopeSpans\":[{\"scope\":{\"name\":\"%s\",\"version\":\"%s\"},\"spans\":[",
					   TRACER_SCOPE, TRACER_VERSION);
		head = h.data;
	}
	tracer.dropped_log_ms = pf_now_ms();

	pthread_mutex_lock(&tracer.lock);
	for (;;)
	{
		int			n;
		bool		ok;

		if (tracer.count < tracer.max_batch && !tracer.stopping)
		{
			struct timespec until;

			clock_gettime(CLOCK_REALTIME, &until);
			until.tv_sec += tracer.delay_ms / 1000;
			until.tv_nsec += (long) (tracer.delay_ms % 1000) * 1000000L;
			if (until.tv_nsec >= 1000000000L)
			{
				until.tv_sec++;
				until.tv_nsec -= 1000000000L;
			}
			pthread_cond_timedwait(&tracer.wake, &tracer.lock, &until);
		}
		if (tracer.count == 0)
		{
			if (tracer.stopping)
				break;
			pthread_mutex_unlock(&tracer.lock);
			log_drops(pf_now_ms());
			pthread_mutex_lock(&tracer.lock);
			continue;
		}
		for (n = 0; n < tracer.max_batch && tracer.count > 0; n++)
		{
			taken[n] = tracer.queue[tracer.head];
			tracer.head = (tracer.head + 1) % tracer.max_queue;
			tracer.count--;
		}
		tracer.exporting = true;
		pthread_mutex_unlock(&tracer.lock);

		ok = export_batch(head, taken, n, &fail_log_ms, &failing);

		pthread_mutex_lock(&tracer.lock);
		tracer.exporting = false;
		if (ok)
			tracer.exported += (uint64_t) n;
		else
			tracer.dropped += (uint64_t) n;
		pthread_cond_broadcast(&tracer.wake);
		pthread_mutex_unlock(&tracer.lock);
		log_drops(pf_now_ms());
		pthread_mutex_lock(&tracer.lock);
	}
	pthread_mutex_unlock(&tracer.lock);
	free(taken);
	free(head);
	return NULL;
}

void
pf_tracer_start(const char *default_service, json_t *resource)
{
	const char *traces = env_nonempty("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
	const char *base = env_nonempty("OTEL_EXPORTER_OTLP_ENDPOINT");
	const char *protocol = env_nonempty("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL");
	const char *service = env_nonempty("OTEL_SERVICE_NAME");
	json_t	   *attrs = json_object();
	pf_buf		url = PF_BUF_INIT;

	read_sampler();
	if (protocol == NULL)
		protocol = env_nonempty("OTEL_EXPORTER_OTLP_PROTOCOL");
	if (traces == NULL && base == NULL)
	{
		json_decref(resource);
		json_decref(attrs);
		return;
	}
	if (protocol && strcmp(protocol, "http/json") != 0)
	{
		/* telemetry never stops the pipeline: no spans, and one line that says why */
		pf_log_error(NULL, "OTEL_EXPORTER_OTLP_PROTOCOL=%s: payflow exports http/json only; tracing is off", protocol);
		json_decref(resource);
		json_decref(attrs);
		return;
	}
	/* the signal's own URL as given; the base one with the signal's path */
	if (traces)
		pf_buf_append_str(&url, traces);
	else
		pf_buf_appendf(&url, "%s%sv1/traces", base, base[strlen(base) - 1] == '/' ? "" : "/");
	tracer.url = pf_strdup(pf_buf_str(&url));
	pf_buf_free(&url);

	if (env_nonempty("OTEL_EXPORTER_OTLP_HEADERS"))
		each_pair(getenv("OTEL_EXPORTER_OTLP_HEADERS"), take_header, NULL);
	if (env_nonempty("OTEL_EXPORTER_OTLP_TRACES_HEADERS"))
		each_pair(getenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS"), take_header, NULL);
	tracer.timeout_ms = env_long("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
								 env_long("OTEL_EXPORTER_OTLP_TIMEOUT", 10000, 1, 600000), 1, 600000);
	tracer.delay_ms = (int) env_long("OTEL_BSP_SCHEDULE_DELAY", 5000, 1, 600000);
	tracer.max_queue = (int) env_long("OTEL_BSP_MAX_QUEUE_SIZE", 2048, 1, 1000000);
	tracer.max_batch = (int) env_long("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512, 1, 1000000);
	if (tracer.max_batch > tracer.max_queue)
		tracer.max_batch = tracer.max_queue;
	tracer.queue = pf_calloc((size_t) tracer.max_queue, sizeof(char *));

	/* the resource: ours, then OTEL_RESOURCE_ATTRIBUTES, then OTEL_SERVICE_NAME */
	json_object_set_new(attrs, "service.name", json_string(default_service));
	json_object_set_new(attrs, "telemetry.sdk.name", json_string(TRACER_SCOPE));
	json_object_set_new(attrs, "telemetry.sdk.language", json_string("c"));
	json_object_set_new(attrs, "telemetry.sdk.version", json_string(TRACER_VERSION));
	json_object_set_new(attrs, "service.version", json_string(TRACER_VERSION));
	if (env_nonempty("AWS_REGION"))
		json_object_set_new(attrs, "cloud.region", json_string(getenv("AWS_REGION")));
	if (resource)
		json_object_update(attrs, resource);
	json_decref(resource);
	if (env_nonempty("OTEL_RESOURCE_ATTRIBUTES"))
		each_pair(getenv("OTEL_RESOURCE_ATTRIBUTES"), take_attribute, attrs);
	if (service)
		json_object_set_new(attrs, "service.name", json_string(service));
	tracer.resource = attrs;

	tracer.http = pf_http_create();
	tracer.on = true;
	if (pthread_create(&tracer.thread, NULL, export_thread, NULL) != 0)
	{
		tracer.on = false;
		json_decref(tracer.resource);
		tracer.resource = NULL;
		pf_log_error(NULL, "the span export thread did not start: tracing is off");
		return;
	}
	pf_log_write(PF_LOG_INFO, NULL, json_pack("{s:s,s:i,s:i}", "endpoint", tracer.url, "queue", tracer.max_queue,
											  "batch", tracer.max_batch),
				 "exporting spans over OTLP/HTTP (JSON)");
}

void
pf_tracer_stop(int timeout_ms)
{
	int64_t		deadline = pf_now_ms() + timeout_ms;
	bool		interrupted = false;

	pthread_mutex_lock(&tracer.lock);
	if (!tracer.on)
	{
		pthread_mutex_unlock(&tracer.lock);
		return;
	}
	tracer.stopping = true;
	pthread_cond_broadcast(&tracer.wake);
	/* what is queued goes out, until the deadline: then the export in flight is cut */
	while (tracer.count > 0 || tracer.exporting)
	{
		struct timespec until;

		if (pf_now_ms() >= deadline)
		{
			if (!interrupted)
				pf_http_interrupt(tracer.http);
			interrupted = true;
			tracer.dropped += (uint64_t) tracer.count;
			for (; tracer.count > 0; tracer.count--)
			{
				free(tracer.queue[tracer.head]);
				tracer.head = (tracer.head + 1) % tracer.max_queue;
			}
		}
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_nsec += 50 * 1000000L;
		if (until.tv_nsec >= 1000000000L)
		{
			until.tv_sec++;
			until.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&tracer.wake, &tracer.lock, &until);
	}
	pthread_mutex_unlock(&tracer.lock);
	pthread_join(tracer.thread, NULL);
	pthread_mutex_lock(&tracer.lock);
	tracer.on = false;
	pthread_mutex_unlock(&tracer.lock);
	pf_http_destroy(tracer.http);
	tracer.http = NULL;
	free(tracer.queue);
	tracer.queue = NULL;
	free(tracer.url);
	tracer.url = NULL;
	curl_slist_free_all(tracer.headers);
	tracer.headers = NULL;
	json_decref(tracer.resource);
	tracer.resource = NULL;
}

void
pf_tracer_render_metrics(pf_buf *out)
{
	pf_buf_appendf(out,
				   "# HELP payflow_trace_spans_exported_total Spans the OTLP collector took.\n"
				   "# TYPE payflow_trace_spans_exported_total counter\n"
				   "payflow_trace_spans_exported_total %llu\n"
				   "# HELP payflow_trace_spans_dropped_total Spans dropped: the queue full, or a batch the collector "
				   "did not take in time.\n"
				   "# TYPE payflow_trace_spans_dropped_total counter\n"
				   "payflow_trace_spans_dropped_total %llu\n",
				   (unsigned long long) pf_tracer_exported(), (unsigned long long) pf_tracer_dropped());
}

bool
pf_tracer_on(void)
{
	return tracer.on;
}

uint64_t
pf_tracer_exported(void)
{
	uint64_t	n;

	pthread_mutex_lock(&tracer.lock);
	n = tracer.exported;
	pthread_mutex_unlock(&tracer.lock);
	return n;
}

uint64_t
pf_tracer_dropped(void)
{
	uint64_t	n;

	pthread_mutex_lock(&tracer.lock);
	n = tracer.dropped;
	pthread_mutex_unlock(&tracer.lock);
	return n;
}
