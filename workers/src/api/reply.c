/*
 * reply.c
 *		Answers: JSON documents, the one error shape, and how a failed
 *		statement's SQLSTATE becomes an HTTP status.
 *
 * Every error is {"error":{"code":…,"message":…}}, libmicrohttpd's own
 * refusals of unparsable requests included (MHD_queue_response below). A payflow domain error
 * or a data exception carries the database's primary message, which names
 * the argument at fault and never holds SQL text; anything unexpected is
 * logged in full and answered with a fixed message, so no SQL, no stack
 * and no server detail reaches a client.
 */
#include "api.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <jansson.h>

typedef enum MHD_Result (*queue_fn) (struct MHD_Connection *, unsigned int, struct MHD_Response *);

static queue_fn real_queue;
static pthread_once_t real_queue_once = PTHREAD_ONCE_INIT;

static void
find_real_queue(void)
{
	real_queue = (queue_fn) dlsym(RTLD_NEXT, "MHD_queue_response");
	if (real_queue == NULL)
	{
		fprintf(stderr, "%s: libmicrohttpd has no MHD_queue_response\n", API_PROGNAME);
		abort();
	}
}

enum MHD_Result
api_queue_response(struct MHD_Connection *conn, unsigned status, struct MHD_Response *resp)
{
	pthread_once(&real_queue_once, find_real_queue);
	return real_queue(conn, status, resp);
}

/* What libmicrohttpd's own refusals mean, said as payflow's errors say it. */
static void
protocol_error(unsigned status, const char **code, const char **message)
{
	switch (status)
	{
		case MHD_HTTP_BAD_REQUEST:
			*code = "bad_request";
			*message = "the request is not valid HTTP/1.1 (request line, a header, Content-Length or chunked body)";
			break;
		case MHD_HTTP_CONTENT_TOO_LARGE:
			*code = "payload_too_large";
			*message = "the declared body or one of its chunks is too large";
			break;
		case MHD_HTTP_URI_TOO_LONG:
			*code = "uri_too_long";
			*message = "the request line is too long";
			break;
		case MHD_HTTP_REQUEST_HEADER_FIELDS_TOO_LARGE:
			*code = "headers_too_large";
			*message = "the request line and headers exceed PAYFLOW_API_MAX_HEADER_BYTES";
			break;
		case MHD_HTTP_HTTP_VERSION_NOT_SUPPORTED:
			*code = "http_version_not_supported";
			*message = "only HTTP/1.0 and HTTP/1.1 are served";
			break;
		default:
			*code = status >= 500 ? "internal" : "bad_request";
			*message = status >= 500 ? "internal error" : "the request was refused";
			break;
	}
}

/*
 * libmicrohttpd answers the requests it cannot parse by itself, before any
 * handler runs, with fixed HTML pages, and has no hook to change them. Its
 * one call of MHD_queue_response (for those answers) goes through the
 * dynamic linker, so this definition in the program takes it. It writes
 * the same status with a JSON error document straight to the socket (no
 * answer of the connection has been written yet, and this small one fits
 * its empty send buffer), then says the response could not be queued:
 * libmicrohttpd closes the connection after what was written. (Letting it
 * send the answer instead would also show its own fault of 0.9.75, which
 * writes the status line and headers twice for a bad Content-Length.)
 * payflow's own answers never come here: api_queue_response calls the
 * library's function itself. api_abuse.sh checks that these answers are
 * JSON, so a library built without interposable calls would show.
 */
enum MHD_Result
MHD_queue_response(struct MHD_Connection *conn, unsigned int status, struct MHD_Response *response)
{
	const union MHD_ConnectionInfo *fd = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	api_request *req = api_guard_request(conn);
	const char *code;
	const char *message;
	const char *reason = MHD_get_reason_phrase_for(status);
	json_t	   *doc;
	char	   *text;
	pf_buf		answer = PF_BUF_INIT;

	const char *said = api_guard_take_refusal();

	(void) response;			/* the library's page, destroyed by the library */
	protocol_error(status, &code, &message);
	/* its words for a head too large speak of its memory: ours name the limit */
	if (said != NULL && status != MHD_HTTP_REQUEST_HEADER_FIELDS_TOO_LARGE && status != MHD_HTTP_URI_TOO_LONG)
		message = said;
	doc = json_pack("{s:{s:s,s:s}}", "error", "code", code, "message", message);
	text = json_dumps(doc, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(doc);
	pf_buf_appendf(&answer, "HTTP/1.1 %u %s\r\nConnection: close\r\nContent-Type: application/json\r\n"
				   "Cache-Control: no-store\r\nContent-Length: %zu\r\n\r\n%s", status,
				   reason && *reason ? reason : "Error", strlen(text), text);
	free(text);
	if (fd != NULL && send(fd->connect_fd, answer.data, answer.len, MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
		pf_log_debug(NULL, "http: the answer %u could not be written: %s", status, strerror(errno));
	pf_buf_free(&answer);
	if (req != NULL && !req->answered)
	{
		/* a request already under way (a malformed chunk): counted by api_completed */
		req->status = status;
		req->answered = true;
		req->seconds = (double) (pf_now_us() - req->started_us) / 1e6;
	}
	else if (req == NULL)
		api_metrics_record(ROUTE_OTHER, status, 0);
	return MHD_NO;
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
	if (strcmp(sqlstate, "PF011") == 0) /* the tenant is past its quota of open operations */
		return MHD_HTTP_TOO_MANY_REQUESTS;
	if (strncmp(sqlstate, "22", 2) == 0)	/* 22023, 22004, 22P02, 22001 … */
		return MHD_HTTP_UNPROCESSABLE_CONTENT;
	if (strncmp(sqlstate, "28", 2) == 0)
		return MHD_HTTP_UNAUTHORIZED;
	if (result == PF_ERR_TRANSIENT) /* connection lost, shutdown, timeout */
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
	if (req->close_after)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
	if (status == MHD_HTTP_UNAUTHORIZED)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer realm=\"payflow\"");
	if (status == MHD_HTTP_SERVICE_UNAVAILABLE || status == MHD_HTTP_TOO_MANY_REQUESTS)
	{
		char		seconds[16];

		snprintf(seconds, sizeof(seconds), "%d",
				 req->retry_after > 0 ? req->retry_after : req->ctx->cfg.api_retry_after);
		MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, seconds);
	}
	req->status = status;
	req->answered = true;
	req->seconds = (double) (pf_now_us() - req->started_us) / 1e6;
	r = api_queue_response(req->conn, status, resp);
	MHD_destroy_response(resp);
	return r;
}

enum MHD_Result
api_reply_response(api_request *req, unsigned status, struct MHD_Response *resp)
{
	return queue(req, status, resp);
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
api_reply_unauthorized(api_request *req)
{
	const char *auth = MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);

	if (auth == NULL || strncasecmp(auth, "Bearer ", 7) != 0)
		return api_reply_error(req, MHD_HTTP_UNAUTHORIZED, "unauthorized", "missing API key (Authorization: Bearer \u2026)");
	return api_reply_error(req, MHD_HTTP_UNAUTHORIZED, "unauthorized", "invalid API key");
}

enum MHD_Result
api_reply_db_error(api_request *req, const pf_error *err)
{
	unsigned	status = api_status_for_sqlstate(err->code, err->result);
	pf_log_ids	ids = {req->operation_id, NULL, req->correlation_id, req->otel.ctx.trace_id, req->otel.ctx.span_id};

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
		case MHD_HTTP_TOO_MANY_REQUESTS:
			{
				/* the wait payflow computed ("... retry after N s"): Retry-After */
				const char *after = strstr(err->message, "retry after ");
				int			seconds = after ? atoi(after + strlen("retry after ")) : 0;

				req->retry_after = seconds > 0 && seconds <= 3600 ? seconds : 0;
				pf_log_info(&ids, "%s %s: %s", req->method, api_route_name(req->route), err->message);
				return api_reply_error(req, status, "quota_exceeded", "%s", err->message);
			}
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
