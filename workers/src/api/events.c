/*
 * events.c
 *		GET /operations/{id}/events: server-sent events, one per status
 *		change, ending after a terminal status.
 *
 *		id: 1234                       (the history row; send it back as Last-Event-ID)
 *		event: status
 *		data: {"operationId":"pay_…","status":"PAYMENT_PROCESSING","previousStatus":"PENDING",
 *		       "at":"2026-11-30T00:31:02.120Z","reason":"…","terminal":false}
 *
 * A stream first replays the operation's changes so far (after
 * Last-Event-ID when the client sends one), then follows it live; the hub
 * (hub.c) finds the changes. Clients never poll anything: a connection is
 * suspended in libmicrohttpd while its stream has nothing to send and
 * resumed by the hub when it has, so a thousand idle streams cost a
 * thousand sockets and no thread or statement each.
 *
 * One API key holds at most PAYFLOW_API_MAX_STREAMS_PER_KEY streams (429
 * with Retry-After past that), so one tenant cannot take every slot of
 * PAYFLOW_API_MAX_STREAMS (503 when those are all taken). A suspended
 * connection is not polled by MHD, so the hub watches its socket and ends
 * the stream as soon as the client hangs up, which frees its slot.
 */
#include "stream.h"

#include <stdlib.h>
#include <string.h>

#define READ_BLOCK 4096

/* in the select list, never in WHERE: a qual that does not name the FROM
 * item may be run before it, as a one-time filter, without the tenant */
static const char STATUS_SQL[] = "SELECT payflow.status($2) IS NOT NULL FROM payflow.authenticate($1)";

/* ---- the MHD side: reading a stream, freeing it ---- */

static ssize_t
stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	api_stream *s = cls;
	ssize_t		n;

	(void) pos;
	pthread_mutex_lock(&s->hub->lock);
	if (s->sent < s->out.len)
	{
		n = (ssize_t) (s->out.len - s->sent < max ? s->out.len - s->sent : max);
		memcpy(buf, s->out.data + s->sent, (size_t) n);
		s->sent += (size_t) n;
		if (s->sent == s->out.len)
		{
			pf_buf_reset(&s->out);
			s->sent = 0;
		}
	}
	else if (s->done)
		n = MHD_CONTENT_READER_END_OF_STREAM;
	else
	{
		/*
		 * Nothing to send: park the connection until the hub has something.
		 * Suspending under the lock means the hub, which appends under it,
		 * either saw the text first or sees suspended and resumes.
		 */
		s->suspended = true;
		MHD_suspend_connection(s->conn);
		n = 0;
	}
	pthread_mutex_unlock(&s->hub->lock);
	return n;
}

/* The response is gone (stream ended or client left): the hub frees it. */
static void
stream_release(void *cls)
{
	api_stream *s = cls;
	api_hub    *hub = s->hub;

	pthread_mutex_lock(&hub->lock);
	s->released = true;
	s->key->held--;
	pthread_mutex_unlock(&hub->lock);
	hub_wake(hub);
}

/* ---- the endpoint ---- */

enum MHD_Result
api_get_events(api_request *req)
{
	api_context *ctx = req->ctx;
	api_hub    *hub = ctx->hub;
	const char *api_key = api_bearer_key(req);
	const char *last_event_id = MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND,
															MHD_HTTP_HEADER_LAST_EVENT_ID);
	const char *values[2] = {api_key, req->operation_id};
	api_slot   *slot;
	pf_error	err;
	pf_result	r;
	api_stream *s;
	struct MHD_Response *resp;
	const union MHD_ConnectionInfo *fd;
	hub_admission admission;

	if (api_key == NULL)
		return api_reply_unauthorized(req);
	/* the operation must exist for this key before a stream is opened */
	slot = api_pool_acquire(&ctx->pool);
	if (slot == NULL)
		return api_reply_pool_exhausted(req);
	r = pf_pg_exec(slot->pg, STATUS_SQL, 2, values, NULL, &err);
	api_pool_release(&ctx->pool, slot);
	if (r != PF_OK && strncmp(err.code, "22", 2) == 0)
		pf_error_set(&err, PF_ERR_NOT_FOUND, "PF003", "not an operation id");
	if (r != PF_OK)
		return api_reply_db_error(req, &err);

	s = pf_calloc(1, sizeof(*s));
	s->hub = hub;
	s->conn = req->conn;
	fd = MHD_get_connection_info(req->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	s->fd = fd ? fd->connect_fd : MHD_INVALID_SOCKET;
	s->operation_id = pf_strdup(req->operation_id);
	s->api_key = pf_strdup(api_key);
	if (last_event_id)
		s->last_id = strtoll(last_event_id, NULL, 10);
	if (s->last_id < 0)
		s->last_id = 0;
	/* reconnect after 2 s if the connection drops */
	pf_buf_append_str(&s->out, "retry: 2000\n\n");

	admission = hub_add_stream(hub, s);
	if (admission != HUB_ADDED)
	{
		hub_stream_free(s);
		if (admission == HUB_KEY_FULL)
			return api_reply_error(req, MHD_HTTP_TOO_MANY_REQUESTS, "too_many_streams",
								   "this API key holds %d event streams, the most it may; retry later",
								   ctx->cfg.api_max_streams_per_key);
		return api_reply_error(req, MHD_HTTP_SERVICE_UNAVAILABLE, "unavailable",
							   "too many event streams or shutting down, retry later");
	}
	/* from here the stream is the hub's; MHD's release callback lets it go */
	resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, READ_BLOCK, stream_read, s, stream_release);
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
	MHD_add_response_header(resp, "X-Accel-Buffering", "no");
	if (req->correlation_id)
		MHD_add_response_header(resp, "X-Correlation-Id", req->correlation_id);

	req->status = MHD_HTTP_OK;
	req->answered = true;
	req->seconds = (double) (pf_now_us() - req->started_us) / 1e6;
	{
		enum MHD_Result result = api_queue_response(req->conn, MHD_HTTP_OK, resp);

		MHD_destroy_response(resp);
		return result;
	}
}
