/*
 * reply.c
 *		Answers: JSON documents, the one error shape, and how a failed
 *		statement's SQLSTATE becomes an HTTP status.
 *
 * Every error is {"error":{"code":…,"message":…}}. A payflow domain error
 * or a data exception carries the database's primary message, which names
 * the argument at fault and never holds SQL text; anything unexpected is
 * logged in full and answered with a fixed message, so no SQL, no stack
 * and no server detail reaches a client.
 */
#include "api.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

int64_t
api_now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t) ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

unsigned
api_status_for_sqlstate(const char *sqlstate, pf_result result)
{
	if (sqlstate == NULL || sqlstate[0] == '\0')
		return result == PF_ERR_TRANSIENT ? MHD_HTTP_SERVICE_UNAVAILABLE : MHD_HTTP_INTERNAL_SERVER_ERROR;
	if (strcmp(sqlstate, "PF002") == 0 ||	/* idempotency key reused with other details */
		strcmp(sqlstate, "PF001") == 0 ||	/* cancel: a worker started it */
		strcmp(sqlstate, "PF006") == 0) /* cancel: it already ended */
		return MHD_HTTP_CONFLICT;
	if (strcmp(sqlstate, "PF003") == 0)
		return MHD_HTTP_NOT_FOUND;
	if (strcmp(sqlstate, "PF007") == 0)
		return MHD_HTTP_CONTENT_TOO_LARGE;
	if (strncmp(sqlstate, "22", 2) == 0)	/* 22023, 22004, 22P02, 22001 … */
		return MHD_HTTP_UNPROCESSABLE_CONTENT;
	if (strncmp(sqlstate, "28", 2) == 0)
		return MHD_HTTP_UNAUTHORIZED;
	if (result == PF_ERR_TRANSIENT)	/* connection lost, shutdown, timeout */
		return MHD_HTTP_SERVICE_UNAVAILABLE;
	return MHD_HTTP_INTERNAL_SERVER_ERROR;
}

/* Headers every answer carries, then queue it and note when. */
static enum MHD_Result
queue(api_request *req, unsigned status, struct MHD_Response *resp)
{
	enum MHD_Result r;

	if (req->correlation_id)
		MHD_add_response_header(resp, "X-Correlation-Id", req->correlation_id);
	if (status == MHD_HTTP_UNAUTHORIZED)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer realm=\"payflow\"");
	if (status == MHD_HTTP_SERVICE_UNAVAILABLE)
	{
		char		seconds[16];

		snprintf(seconds, sizeof(seconds), "%d", req->ctx->cfg.api_retry_after);
		MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, seconds);
	}
	req->status = status;
	req->answered = true;
	req->seconds = (double) (api_now_us() - req->started_us) / 1e6;
	r = MHD_queue_response(req->conn, status, resp);
	MHD_destroy_response(resp);
	return r;
}

enum MHD_Result
api_reply_text(api_request *req, unsigned status, const char *content_type, pf_buf *body)
{
	size_t		len = body->len;
	char	   *data = pf_buf_steal(body);
	struct MHD_Response *resp;

	resp = MHD_create_response_from_buffer(len, data ? data : (char *) "", data ? MHD_RESPMEM_MUST_FREE
										   : MHD_RESPMEM_PERSISTENT);
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
	return queue(req, status, resp);
}

/* A JSON answer with extra headers (name, value pairs, NULL-terminated). */
static enum MHD_Result
reply_json_with(api_request *req, unsigned status, json_t *body, const char *const *headers)
{
	char	   *text = json_dumps(body, JSON_COMPACT | JSON_PRESERVE_ORDER);
	struct MHD_Response *resp;

	json_decref(body);
	if (text == NULL)
		text = pf_strdup("{\"error\":{\"code\":\"internal\",\"message\":\"internal error\"}}");
	resp = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
	for (int i = 0; headers && headers[i]; i += 2)
		MHD_add_response_header(resp, headers[i], headers[i + 1]);
	return queue(req, status, resp);
}

enum MHD_Result
api_reply_json(api_request *req, unsigned status, json_t *body)
{
	return reply_json_with(req, status, body, NULL);
}

enum MHD_Result
api_reply_json_headers(api_request *req, unsigned status, json_t *body, const char *const *headers)
{
	return reply_json_with(req, status, body, headers);
}

enum MHD_Result
api_reply_error(api_request *req, unsigned status, const char *code, const char *fmt,...)
{
	pf_buf		msg = PF_BUF_INIT;
	va_list		ap;
	json_t	   *doc;

	va_start(ap, fmt);
	pf_buf_vappendf(&msg, fmt, ap);
	va_end(ap);
	pf_utf8_sanitize(msg.data ? msg.data : (char *) "", msg.len);
	doc = json_pack("{s:{s:s,s:s}}", "error", "code", code, "message", pf_buf_str(&msg));
	pf_buf_free(&msg);
	return api_reply_json(req, status, doc);
}

enum MHD_Result
api_reply_db_error(api_request *req, const pf_error *err)
{
	unsigned	status = api_status_for_sqlstate(err->code, err->result);
	pf_log_ids	ids = {req->operation_id, NULL, req->correlation_id};

	switch (status)
	{
		case MHD_HTTP_UNAUTHORIZED:
			return api_reply_error(req, status, "unauthorized", "invalid API key");
		case MHD_HTTP_NOT_FOUND:
			return api_reply_error(req, status, err->code, "unknown operation");
		case MHD_HTTP_CONFLICT:
		case MHD_HTTP_CONTENT_TOO_LARGE:
		case MHD_HTTP_UNPROCESSABLE_CONTENT:
			return api_reply_error(req, status, err->code, "%s", err->message);
		case MHD_HTTP_SERVICE_UNAVAILABLE:
			pf_log_warn(&ids, "%s %s: database unavailable: %s %s", req->method, api_route_name(req->route),
						err->code, err->message);
			return api_reply_error(req, status, "unavailable", "the database is unavailable, retry later");
		default:
			pf_log_error(&ids, "%s %s: unexpected database error %s: %s", req->method,
						 api_route_name(req->route), err->code, err->message);
			return api_reply_error(req, status, "internal", "internal error");
	}
}

enum MHD_Result
api_reply_pool_exhausted(api_request *req)
{
	pf_log_warn(NULL, "%s %s: no database connection free within %d ms", req->method,
				api_route_name(req->route), req->ctx->cfg.api_pool_wait_ms);
	return api_reply_error(req, MHD_HTTP_SERVICE_UNAVAILABLE, "unavailable",
						   "all database connections are busy, retry later");
}
