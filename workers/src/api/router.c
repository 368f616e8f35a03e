/*
 * router.c
 *		libmicrohttpd's access handler: one api_request per request, the
 *		route, the body (bounded), then the endpoint; and the completion
 *		notice, which counts the request in /metrics and logs it.
 *
 * MHD calls the handler once when the headers are in, then once per chunk
 * of body, then once more with no data: only that last call answers
 * (except a refused head, and 413 for a declared Content-Length that is
 * too large, answered at once so the client need not send it; MHD then
 * closes the connection instead of reading the body).
 *
 * The head is checked before anything else, since MHD is lenient where a
 * proxy in front may not be: the request line and headers must fit in
 * PAYFLOW_API_MAX_HEADER_BYTES (MHD's own limit is its memory pool, twice
 * that); header names must be tokens; Content-Length must not repeat with
 * another value nor come with Transfer-Encoding, which may only be chunked
 * (two parsers framing one byte stream differently is request smuggling;
 * those answers close the connection). The path reaches the handler still
 * escaped (api_keep_escaped) and is decoded here: an escaped '/' or NUL,
 * which would change what the path names once decoded, is refused, as is
 * an X-Correlation-Id that is not printable ASCII (it is never echoed).
 */
#include "api.h"
#include "submit_batch.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "payflow/digest.h"

/* A body keeps arriving past the limit: read and drop up to this many more
 * bytes so the client sees the 413, then drop the connection. */
#define DISCARD_FACTOR 4

#define OPERATIONS_PREFIX "/operations/"
#define EVENTS_SUFFIX "/events"


/* MHD_OPTION_UNESCAPE_CALLBACK: leave the path as sent, decode_path decodes it. */
size_t
api_keep_escaped(void *cls, struct MHD_Connection *conn, char *text)
{
	(void) cls;
	(void) conn;
	return strlen(text);
}

/*
 * The path percent-decoded, or NULL with why set: a broken escape, a
 * control character, an escaped '/' or NUL (a segment that decodes to
 * two, or ends early in C: "/operations%2F<id>", "/operations/<id>%00"),
 * or an escaped unreserved character (letters, digits, - . _ ~), which no
 * client needs to escape (RFC 3986, 2.3) and which would let a path
 * reach a route under another spelling: the load balancer matches its
 * rules against the path as sent, so "/%6Detrics" passed its /metrics
 * rule (deploy/aws/services.yaml) and was served /metrics here.
 */
static char *
decode_path(const char *raw, const char **why)
{
	char	   *out = pf_malloc(strlen(raw) + 1);
	char	   *o = out;

	for (const char *p = raw; *p; p++)
	{
		unsigned char c = (unsigned char) *p;

		if (c == '%')
		{
			char		digits[3] = {p[1], p[1] ? p[2] : '\0', '\0'};

			if (!pf_hex_decode(digits, &c, 1))
			{
				*why = "the path holds a broken percent escape";
				break;
			}
			if (c == '/' || c == '\0')
			{
				*why = c == '/' ? "the path holds an escaped '/' (%2F)" : "the path holds an escaped NUL (%00)";
				break;
			}
			if (isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~')
			{
				*why = "the path escapes a character that needs no escape";
				break;
			}
			p += 2;
		}
		else if (c < 0x20 || c == 0x7F)
		{
			*why = "the path holds a control character";
			break;
		}
		*o++ = (char) c;
	}
	if (*why != NULL)
	{
		free(out);
		return NULL;
	}
	*o = '\0';
	return out;
}

/* The route of a decoded path; the operation id of /operations/{id}[/events] is copied out. */
static api_route
route_of(const char *url, char **operation_id)
{
	*operation_id = NULL;
	if (strcmp(url, "/payments") == 0)
		return ROUTE_PAYMENTS;
	if (strcmp(url, "/metrics") == 0)
		return ROUTE_METRICS;
	if (strcmp(url, "/healthz") == 0)
		return ROUTE_HEALTHZ;
	if (strcmp(url, "/readyz") == 0)
		return ROUTE_READYZ;
	if (api_admin_route(url))
		return ROUTE_ADMIN;
	if (strcmp(url, "/openapi.json") == 0 || strcmp(url, "/console") == 0 ||
		strncmp(url, "/console/", strlen("/console/")) == 0)
		return ROUTE_CONSOLE;
	if (strncmp(url, OPERATIONS_PREFIX, strlen(OPERATIONS_PREFIX)) == 0)
	{
		const char *id = url + strlen(OPERATIONS_PREFIX);
		const char *slash = strchr(id, '/');
		size_t		len = slash ? (size_t) (slash - id) : strlen(id);

		if (len == 0 || len > 100)
			return ROUTE_OTHER;
		if (slash == NULL)
		{
			*operation_id = pf_strndup(id, len);
			return ROUTE_OPERATION;
		}
		if (strcmp(slash, EVENTS_SUFFIX) == 0)
		{
			*operation_id = pf_strndup(id, len);
			return ROUTE_EVENTS;
		}
	}
	return ROUTE_OTHER;
}

static const char *
allowed_methods(api_route route)
{
	return route == ROUTE_PAYMENTS ? "POST" : "GET, HEAD";
}

static bool
method_allowed(api_route route, const char *method)
{
	if (route == ROUTE_PAYMENTS)
		return strcmp(method, "POST") == 0;
	return strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;
}

static enum MHD_Result
reply_plain_ok(api_request *req, const char *status_word)
{
	return api_reply_json(req, MHD_HTTP_OK, json_pack("{s:s}", "status", status_word));
}

/* /readyz: a statement through the pool, so it fails when the database does. */
static enum MHD_Result
get_readyz(api_request *req)
{
	api_slot   *slot = api_pool_acquire(&req->ctx->pool);
	pf_error	err;
	pf_result	r;

	if (slot == NULL)
		return api_reply_pool_exhausted(req);
	r = pf_pg_exec(slot->pg, "SELECT 1", 0, NULL, NULL, &err);
	api_pool_release(&req->ctx->pool, slot);
	if (r != PF_OK)
	{
		pf_log_warn(NULL, "readyz: database not reachable: %s %s", err.code, err.message);
		return api_reply_error(req, MHD_HTTP_SERVICE_UNAVAILABLE, "unavailable", "the database is not reachable");
	}
	return reply_plain_ok(req, "ready");
}

/*
 * /metrics: the process's own series, then payflow.metrics() flattened.
 * The latter needs EXECUTE on payflow.metrics() (an admin function);
 * without it, or without the database, payflow_up says 0 and the process's
 * series are still served.
 */
static enum MHD_Result
get_metrics(api_request *req)
{
	pf_buf		out = PF_BUF_INIT;
	api_slot   *slot;
	bool		db_ok = false;

	api_metrics_render(&out);
	pf_buf_appendf(&out, "# HELP payflow_api_pool_in_use PostgreSQL connections of the pool in use.\n"
				   "# TYPE payflow_api_pool_in_use gauge\npayflow_api_pool_in_use %d\n"
				   "# HELP payflow_api_pool_size PostgreSQL connections in the pool.\n"
				   "# TYPE payflow_api_pool_size gauge\npayflow_api_pool_size %d\n",
				   pf_pg_pool_in_use(req->ctx->pool.pg), pf_pg_pool_size(req->ctx->pool.pg));
	api_guard_render(req->ctx->guard, &out);
	api_submits_render(req->ctx->submits, &out);
	pf_buf_appendf(&out, "# HELP payflow_api_event_streams Server-sent event streams held.\n"
				   "# TYPE payflow_api_event_streams gauge\npayflow_api_event_streams %d\n",
				   api_hub_stream_count(req->ctx->hub));
	slot = api_pool_acquire(&req->ctx->pool);
	if (slot != NULL)
	{
		PGresult   *res = NULL;
		pf_error	err;

		if (pf_pg_exec(slot->pg, "SELECT payflow.metrics()::text", 0, NULL, &res, &err) == PF_OK)
		{
			if (PQntuples(res) == 1 && !PQgetisnull(res, 0, 0))
			{
				api_metrics_render_db(PQgetvalue(res, 0, 0), &out);
				db_ok = true;
			}
			PQclear(res);
		}
		else
			pf_log_warn(NULL, "metrics: payflow.metrics() failed: %s %s", err.code, err.message);
		api_pool_release(&req->ctx->pool, slot);
	}
	pf_buf_appendf(&out, "# HELP payflow_up Whether payflow.metrics() could be read.\n"
				   "# TYPE payflow_up gauge\npayflow_up %d\n", db_ok ? 1 : 0);
	return api_reply_text(req, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8", &out);
}

static enum MHD_Result
dispatch(api_request *req)
{
	if (req->route == ROUTE_OTHER)
		return api_reply_error(req, MHD_HTTP_NOT_FOUND, "not_found", "no such resource");
	if (req->route == ROUTE_ADMIN)	/* its endpoints have their own methods */
		return api_admin(req);
	if (!method_allowed(req->route, req->method))
	{
		const char *headers[] = {MHD_HTTP_HEADER_ALLOW, allowed_methods(req->route), NULL};

		return api_reply_json_headers(req, MHD_HTTP_METHOD_NOT_ALLOWED,
									  json_pack("{s:{s:s,s:s}}", "error", "code", "method_not_allowed",
												"message", "method not allowed"), headers);
	}
	switch (req->route)
	{
		case ROUTE_PAYMENTS:
			return api_post_payment(req);
		case ROUTE_OPERATION:
			return api_get_operation(req);
		case ROUTE_EVENTS:
			return api_get_events(req);
		case ROUTE_METRICS:
			return get_metrics(req);
		case ROUTE_HEALTHZ:
			return reply_plain_ok(req, "ok");
		case ROUTE_READYZ:
			return get_readyz(req);
		case ROUTE_CONSOLE:
			return api_console(req);
		default:
			return api_reply_error(req, MHD_HTTP_NOT_FOUND, "not_found", "no such resource");
	}
}

static api_request *
request_new(api_context *ctx, struct MHD_Connection *conn, const char *url, const char *method)
{
	api_request *req = pf_calloc(1, sizeof(*req));
	char	   *path;

	req->ctx = ctx;
	req->conn = conn;
	req->method = method;
	req->started_us = pf_now_us();
	path = decode_path(url, &req->bad_path);
	req->route = path ? route_of(path, &req->operation_id) : ROUTE_OTHER;
	req->path = path;
	req->correlation_id = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "X-Correlation-Id");
	/*
	 * This request's span: under the caller's trace, or a new trace. Spans
	 * are exported for the API's own routes, not for probes, metrics and
	 * the console's files.
	 */
	req->tracestate = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "tracestate");
	if (req->route == ROUTE_PAYMENTS || req->route == ROUTE_OPERATION || req->route == ROUTE_EVENTS ||
		req->route == ROUTE_ADMIN)
	{
		char		name[64];
		pf_trace_context parent;
		bool		has_parent = pf_traceparent_parse(MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
																				  "traceparent"), &parent);

		snprintf(name, sizeof(name), "%s %s", method, api_route_name(req->route));
		pf_span_begin(&req->otel, name, PF_SPAN_SERVER, has_parent ? &parent : NULL);
		if (has_parent)
			pf_span_set_trace_state(&req->otel, req->tracestate);
		pf_span_set_str(&req->otel, "http.request.method", method);
		pf_span_set_str(&req->otel, "http.route", api_route_name(req->route));
	}
	else
		pf_trace_context_continue(MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "traceparent"), &req->otel.ctx);
	pthread_mutex_lock(&ctx->active_lock);
	ctx->active++;
	pthread_mutex_unlock(&ctx->active_lock);
	return req;
}

/* RFC 9110's token: what a header name is made of. */
static bool
is_token(const char *name)
{
	if (*name == '\0')
		return false;
	for (const unsigned char *p = (const unsigned char *) name; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
			  strchr("!#$%&'*+-.^_`|~", *p) != NULL))
			return false;
	return true;
}

/* What the headers say about the body's framing, gathered in one pass. */
typedef struct head_scan
{
	bool		bad_name;
	int			content_lengths;
	const char *content_length;
	bool		content_lengths_differ;
	int			transfer_encodings;
	const char *transfer_encoding;
} head_scan;

static enum MHD_Result
scan_header(void *cls, enum MHD_ValueKind kind, const char *name, const char *value)
{
	head_scan  *h = cls;

	(void) kind;
	if (!is_token(name))
		h->bad_name = true;
	else if (strcasecmp(name, MHD_HTTP_HEADER_CONTENT_LENGTH) == 0)
	{
		if (h->content_lengths++ == 0)
			h->content_length = value;
		else if (strcmp(h->content_length, value ? value : "") != 0)
			h->content_lengths_differ = true;
	}
	else if (strcasecmp(name, MHD_HTTP_HEADER_TRANSFER_ENCODING) == 0)
	{
		h->transfer_encodings++;
		h->transfer_encoding = value;
	}
	return MHD_YES;
}

/*
 * Checks of the head (see the file's comment). Returns true with the
 * answer queued when the request is refused.
 */
static bool
refuse_head(api_request *req, enum MHD_Result *answer)
{
	const union MHD_ConnectionInfo *size = MHD_get_connection_info(req->conn, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE);
	head_scan	h;

	memset(&h, 0, sizeof(h));
	if (size != NULL && size->header_size > (size_t) req->ctx->cfg.api_max_header_bytes)
	{
		*answer = api_reply_error(req, MHD_HTTP_REQUEST_HEADER_FIELDS_TOO_LARGE, "headers_too_large",
								  "the request line and headers exceed %d bytes", req->ctx->cfg.api_max_header_bytes);
		return true;
	}
	MHD_get_connection_values(req->conn, MHD_HEADER_KIND, scan_header, &h);
	req->close_after = true;	/* from here on, the framing is in doubt */
	if (h.bad_name)
		*answer = api_reply_error(req, MHD_HTTP_BAD_REQUEST, "bad_request", "a header name is not a token");
	else if (h.content_lengths_differ)
		*answer = api_reply_error(req, MHD_HTTP_BAD_REQUEST, "bad_request",
								  "Content-Length is given twice with different values");
	else if (h.content_lengths > 0 && h.transfer_encodings > 0)
		*answer = api_reply_error(req, MHD_HTTP_BAD_REQUEST, "bad_request",
								  "Content-Length and Transfer-Encoding must not come together");
	else if (h.transfer_encodings > 1 || (h.transfer_encodings == 1 && strcasecmp(h.transfer_encoding, "chunked") != 0))
		*answer = api_reply_error(req, MHD_HTTP_NOT_IMPLEMENTED, "not_implemented",
								  "the only Transfer-Encoding served is chunked");
	else
	{
		req->close_after = false;
		if (req->bad_path != NULL)
			*answer = api_reply_error(req, MHD_HTTP_BAD_REQUEST, "bad_request", "%s", req->bad_path);
		else if (req->correlation_id != NULL && !api_printable_ascii(req->correlation_id))
		{
			req->correlation_id = NULL; /* never echoed */
			*answer = api_reply_error(req, MHD_HTTP_BAD_REQUEST, "invalid_header",
									  "X-Correlation-Id must be printable ASCII");
		}
		else
			return false;
	}
	return true;
}

/* POST /payments: a declared length over the limit is refused before the body. */
static bool
declared_too_large(api_request *req)
{
	const char *cl = MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
	char	   *end;
	unsigned long long n;

	if (cl == NULL)
		return false;
	n = strtoull(cl, &end, 10);
	return end != cl && n > (unsigned long long) req->ctx->cfg.api_max_body;
}

static enum MHD_Result
too_large(api_request *req)
{
	return api_reply_error(req, MHD_HTTP_CONTENT_TOO_LARGE, "payload_too_large",
						   "the request body exceeds %d bytes", req->ctx->cfg.api_max_body);
}

enum MHD_Result
api_handle(void *cls, struct MHD_Connection *conn, const char *url, const char *method, const char *version,
		   const char *upload_data, size_t *upload_data_size, void **con_cls)
{
	api_context *ctx = cls;
	api_request *req = *con_cls;

	if (req == NULL)
	{
		enum MHD_Result answer;

		req = request_new(ctx, conn, url, method);
		*con_cls = req;
		api_guard_head_done(ctx->guard, conn, req);
		if (refuse_head(req, &answer))
			return answer;
		if (req->route == ROUTE_PAYMENTS && strcmp(method, "POST") == 0)
		{
			pf_checksum_key mac = {0};

			if (declared_too_large(req))
				return too_large(req);
			/* keyed as it streams once the key is known (payments.c) */
			if (ctx->s3_enabled)
			{
				pthread_mutex_lock(&ctx->mac_lock);
				mac = ctx->payload_mac;
				pthread_mutex_unlock(&ctx->mac_lock);
			}
			details_scan_init(&req->scan, &mac);
			req->scanning = true;
		}
		return MHD_YES;
	}
	if (req->answered)
	{
		/* answered early (413): swallow what is still coming, within reason */
		req->received += *upload_data_size;
		*upload_data_size = 0;
		return req->received > (size_t) ctx->cfg.api_max_body * DISCARD_FACTOR ? MHD_NO : MHD_YES;
	}
	if (*upload_data_size > 0)
	{
		size_t		n = *upload_data_size;

		*upload_data_size = 0;
		req->received += n;
		if (req->route != ROUTE_PAYMENTS && !api_admin_takes_body(req)) /* other bodies are ignored, within reason */
			return req->received > (size_t) ctx->cfg.api_max_body ? MHD_NO : MHD_YES;
		if (req->received > (size_t) ctx->cfg.api_max_body)
		{
			/* chunked and over the limit: drop it, answer 413 at the end */
			req->body_too_large = true;
			pf_buf_free(&req->body);
			return req->received > (size_t) ctx->cfg.api_max_body * DISCARD_FACTOR ? MHD_NO : MHD_YES;
		}
		pf_buf_append(&req->body, upload_data, n);
		if (req->scanning)
			details_scan_feed(&req->scan, upload_data, n);
		return MHD_YES;
	}
	if (req->body_too_large)
		return too_large(req);
	return dispatch(req);
}

void
api_completed(void *cls, struct MHD_Connection *conn, void **con_cls, enum MHD_RequestTerminationCode toe)
{
	api_context *ctx = cls;
	api_request *req = *con_cls;

	if (req == NULL)
		return;
	*con_cls = NULL;
	api_guard_request_done(ctx->guard, conn);
	if (pf_span_recording(&req->otel))
	{
		pf_span_set_int(&req->otel, "http.response.status_code", req->answered ? req->status : 0);
		pf_span_set_str(&req->otel, "payflow.operation.id", req->operation_id);
		if (!req->answered || req->status >= 500)
			pf_span_set_error(&req->otel, req->answered ? "server error" : "no answer");
		pf_span_end(&req->otel);
	}
	if (req->answered)
	{
		api_metrics_record(req->route, req->status, req->seconds);
		if (pf_log_enabled(PF_LOG_DEBUG) || req->status >= 500)
		{
			pf_log_ids	ids = {req->operation_id, NULL, req->correlation_id, req->otel.ctx.trace_id, req->otel.ctx.span_id};

			pf_log_write(req->status >= 500 ? PF_LOG_WARN : PF_LOG_DEBUG, &ids,
						 json_pack("{s:s,s:s,s:i,s:f,s:b}", "method", req->method, "route",
								   api_route_name(req->route), "status", (int) req->status,
								   "seconds", req->seconds, "completed", toe == MHD_REQUEST_TERMINATED_COMPLETED_OK),
						 "request");
		}
	}
	if (req->scanning)
		details_scan_free(&req->scan);
	pf_buf_free(&req->body);
	free(req->operation_id);
	free(req->path);
	free(req);
	pthread_mutex_lock(&ctx->active_lock);
	ctx->active--;
	pthread_mutex_unlock(&ctx->active_lock);
}
