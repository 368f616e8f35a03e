/*
 * api.h
 *		payflow-api: the HTTP edge over payflow's SQL API.
 *
 *		POST /payments                  202 + Location + Retry-After
 *		GET  /operations/{id}           the status document
 *		GET  /operations/{id}/events    server-sent events, one per status change
 *		GET  /metrics, /healthz, /readyz
 *		     /admin/…                   the admin API (admin keys only)
 *		GET  /console/…, /openapi.json  the operator console, the OpenAPI document
 *
 * The process holds no tenant state: every statement authenticates its
 * API key in the database (payflow.authenticate in the same statement), so
 * row-level security and the SQL functions decide what a key may see.
 *
 *		main.c			settings, signals, the HTTP daemon, drain on SIGTERM
 *		guard.c			connections: head deadline, drops, libmicrohttpd's log
 *		router.c		MHD's handler: head checks, routes, body limits, access log
 *		payments.c		POST /payments (pg or S3 claim check)
 *		operations.c	GET /operations/{id}
 *		credentials.c	the API key a request carries (Authorization: Bearer)
 *		details_scan.c	finds "details" in a body as it arrives, hashing it
 *		events.c		GET /operations/{id}/events: server-sent events
 *		hub.c			the thread that feeds every stream (one LISTEN connection)
 *		pool.c			the bounded pool of PostgreSQL connections
 *		reply.c			JSON answers (libmicrohttpd's own errors too), SQLSTATE -> HTTP
 *		metrics.c		request counters, latency histogram, /metrics text
 *		admin.c			/admin/…: one payflow.admin_*() statement per endpoint
 *		console.c		/console/… and /openapi.json: static files, strict CSP
 */
#ifndef PAYFLOW_API_H
#define PAYFLOW_API_H

#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>
#include <microhttpd.h>
#include <openssl/evp.h>

#include "payflow/aws_client.h"
#include "payflow/aws_credentials.h"
#include "payflow/buf.h"
#include "payflow/config.h"
#include "payflow/error.h"
#include "payflow/log.h"
#include "payflow/clock.h"
#include "payflow/pg.h"
#include "payflow/pg_pool.h"
#include "payflow/s3.h"
#include "payflow/trace_context.h"
#include "payflow/tracer.h"

#define API_PROGNAME "payflow-api"

/* ---- pool.c ---- */

/*
 * One PostgreSQL connection of the pool (pg_pool.h) and, lazily, an S3
 * client in its data: a request holds one.
 */
typedef pf_pg_slot api_slot;

typedef struct api_pool
{
	pf_pg_pool *pg;
	int			wait_ms;		/* PAYFLOW_API_POOL_WAIT_MS, then 503 */
} api_pool;

void		api_pool_init(api_pool *pool, const pf_config *cfg, const volatile sig_atomic_t *stop);
void		api_pool_destroy(api_pool *pool);

/* A free slot, or NULL when none came free within the pool's wait. */
api_slot   *api_pool_acquire(api_pool *pool);
void		api_pool_release(api_pool *pool, api_slot *slot);

/* The calling HTTP thread's S3 client (no database connection needed); NULL with err set. */
pf_s3	   *api_thread_s3(const pf_config *cfg, pf_error *err);

/* Options every API connection uses (short connect, few retries, statement_timeout). */
pf_pg_options api_pg_options(const pf_config *cfg, const char *application_name,
							 const volatile sig_atomic_t *stop);

/* ---- metrics.c ---- */

typedef enum api_route
{
	ROUTE_PAYMENTS = 0,
	ROUTE_OPERATION,
	ROUTE_EVENTS,
	ROUTE_METRICS,
	ROUTE_HEALTHZ,
	ROUTE_READYZ,
	ROUTE_ADMIN,
	ROUTE_CONSOLE,
	ROUTE_OTHER,
	ROUTE_COUNT
} api_route;

const char *api_route_name(api_route route);
void		api_metrics_init(void);

/* One finished request: its route, status and seconds until its answer was queued. */
void		api_metrics_record(api_route route, unsigned status, double seconds);

/* The process's own series in Prometheus text format. */
void		api_metrics_render(pf_buf *out);

/* payflow.metrics() (a JSON document) flattened into gauges "payflow_<path>". */
void		api_metrics_render_db(const char *json_text, pf_buf *out);

/* ---- guard.c ---- */

typedef struct api_request api_request;
typedef struct api_guard api_guard;
typedef struct api_conn api_conn;

typedef enum api_drop_reason
{
	DROP_LIMIT = 0,				/* refused by the global or per-address limit */
	DROP_HEADER_TIMEOUT,		/* its head took longer than PAYFLOW_API_HEADER_TIMEOUT */
	DROP_COUNT
} api_drop_reason;

api_guard  *api_guard_create(const pf_config *cfg, int connection_limit);

/* MHD_OPTION_NOTIFY_CONNECTION */
void		api_guard_notify(void *cls, struct MHD_Connection *conn, void **socket_context,
							 enum MHD_ConnectionNotificationCode code);

/* A request's head is in (no deadline until it is answered), or its answer is done. */
void		api_guard_head_done(api_guard *g, struct MHD_Connection *conn, api_request *req);
void		api_guard_request_done(api_guard *g, struct MHD_Connection *conn);

/* The request in progress on a connection, or NULL; from the connection's thread. */
api_request *api_guard_request(struct MHD_Connection *conn);

/* About once a second: drop heads past their deadline, write due log summaries. */
void		api_guard_tick(api_guard *g);

/* MHD_OPTION_EXTERNAL_LOGGER (cls: the guard) */
void		api_guard_log_http(void *cls, const char *fmt, va_list ap);

/* What libmicrohttpd said of the refusal it is sending on this thread, once; or NULL. */
const char *api_guard_take_refusal(void);

/* Connection gauges and drop counters for /metrics. */
void		api_guard_render(api_guard *g, pf_buf *out);

/* ---- details_scan.c ---- */

/*
 * Watches a JSON body go by, chunk after chunk, and hashes the bytes of the
 * top-level member "details" (when it is an object) as they arrive, so the
 * checksum of a large request is ready when its last byte is.
 */
typedef struct details_scan
{
	EVP_MD_CTX *sha;
	size_t		offset;			/* bytes seen so far */
	int			depth;
	bool		in_string;
	bool		escape;
	bool		expect_key;		/* at depth 1: the next string is a member name */
	bool		collecting_key;
	bool		key_is_details;
	bool		key_plain;		/* the name had no escapes */
	pf_buf		key;
	bool		in_details;
	bool		found;
	bool		ambiguous;		/* escaped name or a second "details": not used */
	size_t		start;			/* details occupy body[start, end) */
	size_t		end;
	bool		keyed;			/* digest is an HMAC under the key given to init */
	unsigned char outer_pad[64];
	unsigned char digest[32];
} details_scan;

/* key: the payload checksum key, or NULL while it is not known (plain SHA-256, unused). */
void		details_scan_init(details_scan *scan, const pf_checksum_key *key);
void		details_scan_feed(details_scan *scan, const char *data, size_t len);

/* True when exactly one "details" object was seen; digest, start, end are set. */
bool		details_scan_finish(details_scan *scan);
void		details_scan_free(details_scan *scan);

/* ---- reply.c ---- */


/* Queue a JSON answer (consumes body). */
enum MHD_Result api_reply_json(api_request *req, unsigned status, json_t *body);

/* The same with extra headers: name, value, …, NULL. */
enum MHD_Result api_reply_json_headers(api_request *req, unsigned status, json_t *body,
									   const char *const *headers);

/* {"error":{"code":…,"message":…}} */
enum MHD_Result api_reply_error(api_request *req, unsigned status, const char *code, const char *fmt,...)
			__attribute__((format(printf, 4, 5)));

/* The answer for a failed statement: SQLSTATE -> status, no SQL text. */
enum MHD_Result api_reply_db_error(api_request *req, const pf_error *err);
enum MHD_Result api_reply_text(api_request *req, unsigned status, const char *content_type, pf_buf *body);

/* Queue a response made by the caller, with the headers every answer carries (consumes resp). */
enum MHD_Result api_reply_response(api_request *req, unsigned status, struct MHD_Response *resp);

/* 401: no key, or one that cannot be a key (not printable ASCII). */
enum MHD_Result api_reply_unauthorized(api_request *req);

/* Queue any response (every answer of ours goes through it, never MHD_queue_response). */
enum MHD_Result api_queue_response(struct MHD_Connection *conn, unsigned status, struct MHD_Response *resp);

/* 503 when no connection came free in time. */
enum MHD_Result api_reply_pool_exhausted(api_request *req);
unsigned	api_status_for_sqlstate(const char *sqlstate, pf_result result);

/* ---- the process ---- */

typedef struct api_hub api_hub;
typedef struct api_submits api_submits;

typedef struct api_context
{
	pf_config	cfg;
	api_pool	pool;
	api_submits *submits;		/* POST /payments' gatherer (submit_batch.h) */
	api_hub    *hub;
	api_guard  *guard;
	struct MHD_Daemon *daemon;
	bool		s3_enabled;		/* PAYFLOW_STORE=s3: large details go to S3 */
	pthread_mutex_t mac_lock;
	pf_checksum_key payload_mac;	/* read with the first S3 request (payments.c) */
	char	   *console_dir;	/* the console's files, or NULL (console.c) */
	volatile sig_atomic_t *stop;
	pthread_mutex_t active_lock;
	int			active;			/* requests between first call and completion */
} api_context;

/* One request, from its first byte to its completion notice. */
struct api_request
{
	api_context *ctx;
	struct MHD_Connection *conn;
	api_route	route;
	const char *method;
	char	   *operation_id;	/* from the path */
	char	   *path;			/* decoded, or NULL when it could not be */
	int64_t		started_us;
	double		seconds;		/* until the answer was queued */
	unsigned	status;
	bool		answered;
	/* the body, bounded by PAYFLOW_API_MAX_BODY */
	pf_buf		body;
	size_t		received;		/* body bytes, kept or not */
	bool		body_too_large;
	details_scan scan;
	bool		scanning;
	const char *correlation_id;
	/*
	 * This request's span (tracer.h): otel.ctx is what the logs and the
	 * operation's trace name; exported for the API's routes only.
	 */
	pf_span		otel;
	const char *tracestate;		/* the caller's, for this request's span */
	const char *bad_path;		/* why the path cannot be decoded, or NULL */
	bool		close_after;	/* the answer closes the connection */
	int			retry_after;	/* this answer's Retry-After (s); 0: PAYFLOW_API_RETRY_AFTER */
};


/* router.c */
enum MHD_Result api_handle(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
						   const char *version, const char *upload_data, size_t *upload_data_size,
						   void **con_cls);
void		api_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
						  enum MHD_RequestTerminationCode toe);

/* MHD_OPTION_UNESCAPE_CALLBACK: paths are decoded by the router, not by MHD. */
size_t		api_keep_escaped(void *cls, struct MHD_Connection *conn, char *text);

/* credentials.c */
/* "Bearer <key>" from Authorization, or NULL when there is none or it cannot
 * be a key (then the caller answers api_reply_unauthorized). */
const char *api_bearer_key(api_request *req);

/* Printable ASCII only: what a header value of ours may hold. */
bool		api_printable_ascii(const char *text);

/* payments.c, operations.c */
enum MHD_Result api_post_payment(api_request *req);
enum MHD_Result api_get_operation(api_request *req);

/* admin.c */
bool		api_admin_route(const char *path);

/* Whether the request's body is read (an admin action's JSON). */
bool		api_admin_takes_body(api_request *req);
enum MHD_Result api_admin(api_request *req);

/* console.c */
/* The console's folder next to the program, or NULL. */
char	   *api_console_find_dir(void);
enum MHD_Result api_console(api_request *req);

/* hub.c, events.c */
api_hub    *api_hub_start(api_context *ctx);

/* End every stream and stop the hub's thread. */
void		api_hub_close_streams(api_hub *hub);
void		api_hub_stop(api_hub *hub);

/* Streams the hub holds (open, or ended and not yet freed). */
int			api_hub_stream_count(api_hub *hub);
enum MHD_Result api_get_events(api_request *req);

#endif							/* PAYFLOW_API_H */
