/*
 * router.c
 *		libmicrohttpd's access handler: one api_request per request, the
 *		route, the body (bounded), then the endpoint; and the completion
 *		notice, which counts the request in /metrics and logs it.
 *
 * MHD calls the handler once when the headers are in, then once per chunk
 * of body, then once more with no data: only that last call answers
 * (except 413 for a declared Content-Length that is too large, answered at
 * once so the client need not send it).
 */
#include "api.h"

#include <stdlib.h>
#include <string.h>

#include <jansson.h>

/* A body keeps arriving past the limit: read and drop up to this many more
 * bytes so the client sees the 413, then drop the connection. */
#define DISCARD_FACTOR 4

#define OPERATIONS_PREFIX "/operations/"
#define EVENTS_SUFFIX "/events"

const char *
api_bearer_key(api_request *req)
{
	const char *auth = MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);

	if (auth == NULL || strncasecmp(auth, "Bearer ", 7) != 0)
		return NULL;
	auth += 7;
	while (*auth == ' ')
		auth++;
	return *auth ? auth : NULL;
}

/* The route of a path; the operation id of /operations/{id}[/events] is copied out. */
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
	pthread_mutex_lock(&req->ctx->pool.lock);
	pf_buf_appendf(&out, "# HELP payflow_api_pool_in_use PostgreSQL connections of the pool in use.\n"
				   "# TYPE payflow_api_pool_in_use gauge\npayflow_api_pool_in_use %d\n"
				   "# HELP payflow_api_pool_size PostgreSQL connections in the pool.\n"
				   "# TYPE payflow_api_pool_size gauge\npayflow_api_pool_size %d\n",
				   req->ctx->pool.in_use, req->ctx->pool.size);
	pthread_mutex_unlock(&req->ctx->pool.lock);
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
		default:
			return api_reply_error(req, MHD_HTTP_NOT_FOUND, "not_found", "no such resource");
	}
}

static api_request *
request_new(api_context *ctx, struct MHD_Connection *conn, const char *url, const char *method)
{
	api_request *req = pf_calloc(1, sizeof(*req));

	req->ctx = ctx;
	req->conn = conn;
	req->method = method;
	req->started_us = api_now_us();
	req->route = route_of(url, &req->operation_id);
	req->correlation_id = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "X-Correlation-Id");
	pthread_mutex_lock(&ctx->active_lock);
	ctx->active++;
	pthread_mutex_unlock(&ctx->active_lock);
	return req;
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
		req = request_new(ctx, conn, url, method);
		*con_cls = req;
		if (req->route == ROUTE_PAYMENTS && strcmp(method, "POST") == 0)
		{
			if (declared_too_large(req))
				return too_large(req);
			details_scan_init(&req->scan);
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
		if (req->route != ROUTE_PAYMENTS)	/* other bodies are ignored, within reason */
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
	if (req->answered)
	{
		api_metrics_record(req->route, req->status, req->seconds);
		if (pf_log_enabled(PF_LOG_DEBUG) || req->status >= 500)
		{
			pf_log_ids	ids = {req->operation_id, NULL, req->correlation_id};

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
	free(req);
	pthread_mutex_lock(&ctx->active_lock);
	ctx->active--;
	pthread_mutex_unlock(&ctx->active_lock);
}
