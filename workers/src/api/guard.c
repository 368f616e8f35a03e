/*
 * guard.c
 *		Every HTTP connection of the process, from accept to close: the
 *		deadline for a request's head, the count of connections dropped
 *		and why, and libmicrohttpd's own messages, all logged at a bounded
 *		rate so that an attack cannot flood the log.
 *
 * libmicrohttpd's time-out (PAYFLOW_API_IDLE_TIMEOUT) is one of inactivity:
 * a client that sends a header line every few seconds and never ends its
 * head ("slowloris") holds its connection for ever, and a few thousand of
 * them hold every connection the process may have. So each connection
 * carries a deadline while it is reading a head: PAYFLOW_API_HEADER_TIMEOUT
 * seconds from its accept, or, on a kept-alive connection, from the end of
 * the previous request plus the idle time-out (an idle client may wait
 * that long before it starts the next one). The main thread sweeps the
 * connections about once a second and shuts down the socket of one past its
 * deadline; libmicrohttpd sees the end of the stream and closes it as if
 * the client had left. A connection whose bytes wait unread in the kernel
 * is spared until they are read: then the process is behind (thousands of
 * connections at once), not the client. shutdown() frees no descriptor:
 * the sweep and the close notice take the same lock, and libmicrohttpd
 * closes the descriptor only after that notice, so the socket shut down is
 * always the one meant.
 *
 * The per-address and global connection limits are libmicrohttpd's
 * (MHD_OPTION_PER_IP_CONNECTION_LIMIT, MHD_OPTION_CONNECTION_LIMIT); a
 * connection refused by either is known here only by the message it logs.
 */
#include "api.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include "payflow/backoff.h"

/* one summary line per window at most, for each kind of message */
#define LOG_WINDOW_MS 10000
/* libmicrohttpd messages logged one by one in a window before they are only counted */
#define HTTP_MESSAGES_PER_WINDOW 10

struct api_conn
{
	struct MHD_Connection *conn;
	MHD_socket	fd;
	int64_t		head_deadline_ms;	/* 0: not reading a head */
	api_request *req;			/* the request in progress, if any */
	char		address[INET6_ADDRSTRLEN];
	api_conn   *prev;
	api_conn   *next;
};

/* A kind of event logged once, then summed up once per window. */
typedef struct log_window
{
	int64_t		start_ms;		/* 0: no window open */
	unsigned long long since;	/* events since the window opened, past the first */
} log_window;

struct api_guard
{
	pthread_mutex_t lock;
	api_conn   *conns;
	int			open;
	int			limit;
	int			per_address;
	int			header_timeout_s;
	int			idle_timeout_s;
	unsigned long long dropped[DROP_COUNT];
	log_window	drop_log;
	unsigned long long drops_in_window[DROP_COUNT];
	log_window	http_log;
	int			http_logged;	/* messages logged in the current window */
};

static const char *const drop_names[DROP_COUNT] = {"limit", "header_timeout"};

api_guard *
api_guard_create(const pf_config *cfg, int connection_limit)
{
	api_guard  *g = pf_calloc(1, sizeof(*g));

	pthread_mutex_init(&g->lock, NULL);
	g->limit = connection_limit;
	g->per_address = cfg->api_max_connections_per_address;
	g->header_timeout_s = cfg->api_header_timeout;
	g->idle_timeout_s = cfg->api_idle_timeout;
	return g;
}

static void
format_address(const struct sockaddr *sa, char *out, size_t len)
{
	out[0] = '\0';
	if (sa == NULL)
		return;
	if (sa->sa_family == AF_INET)
		inet_ntop(AF_INET, &((const struct sockaddr_in *) sa)->sin_addr, out, (socklen_t) len);
	else if (sa->sa_family == AF_INET6)
		inet_ntop(AF_INET6, &((const struct sockaddr_in6 *) sa)->sin6_addr, out, (socklen_t) len);
}

static api_conn *
conn_of(struct MHD_Connection *conn)
{
	const union MHD_ConnectionInfo *info = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);

	return info ? info->socket_context : NULL;
}

/*
 * Note a drop; under the lock. The first drop after a quiet spell is
 * logged at once, later ones are summed up by api_guard_tick.
 */
static void
note_drop(api_guard *g, api_drop_reason reason, const char *address)
{
	g->dropped[reason]++;
	if (g->drop_log.start_ms != 0)
	{
		g->drop_log.since++;
		g->drops_in_window[reason]++;
		return;
	}
	g->drop_log.start_ms = pf_now_ms();
	if (reason == DROP_HEADER_TIMEOUT)
		pf_log_write(PF_LOG_WARN, NULL, json_pack("{s:s,s:s}", "reason", drop_names[reason], "address", address),
					 "dropped a connection from %s: its request head was not complete within %d s "
					 "(PAYFLOW_API_HEADER_TIMEOUT); further drops are summed up every %d s",
					 address, g->header_timeout_s, LOG_WINDOW_MS / 1000);
	else
		pf_log_write(PF_LOG_WARN, NULL, json_pack("{s:s,s:i,s:i,s:i}", "reason", drop_names[reason],
												  "connections", g->open, "limit", g->limit,
												  "perAddress", g->per_address),
					 "refused a connection: %d connections open, limits %d in all and %d per address "
					 "(PAYFLOW_API_MAX_CONNECTIONS, PAYFLOW_API_MAX_CONNECTIONS_PER_ADDRESS); "
					 "further drops are summed up every %d s", g->open, g->limit, g->per_address,
					 LOG_WINDOW_MS / 1000);
}

void
api_guard_notify(void *cls, struct MHD_Connection *conn, void **socket_context,
				 enum MHD_ConnectionNotificationCode code)
{
	api_guard  *g = cls;
	api_conn   *c = *socket_context;

	if (code == MHD_CONNECTION_NOTIFY_STARTED)
	{
		const union MHD_ConnectionInfo *fd = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
		const union MHD_ConnectionInfo *addr = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);

		c = pf_calloc(1, sizeof(*c));
		c->conn = conn;
		c->fd = fd ? fd->connect_fd : MHD_INVALID_SOCKET;
		format_address(addr ? addr->client_addr : NULL, c->address, sizeof(c->address));
		c->head_deadline_ms = pf_now_ms() + (int64_t) g->header_timeout_s * 1000;
		pthread_mutex_lock(&g->lock);
		c->next = g->conns;
		if (g->conns)
			g->conns->prev = c;
		g->conns = c;
		g->open++;
		pthread_mutex_unlock(&g->lock);
		*socket_context = c;
		return;
	}
	if (c == NULL)
		return;
	/* closed: after this the descriptor may be closed and reused */
	pthread_mutex_lock(&g->lock);
	if (c->prev)
		c->prev->next = c->next;
	else
		g->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	g->open--;
	pthread_mutex_unlock(&g->lock);
	free(c);
	*socket_context = NULL;
}

void
api_guard_head_done(api_guard *g, struct MHD_Connection *conn, api_request *req)
{
	api_conn   *c = conn_of(conn);

	if (c == NULL)
		return;
	pthread_mutex_lock(&g->lock);
	c->head_deadline_ms = 0;
	c->req = req;
	pthread_mutex_unlock(&g->lock);
}

void
api_guard_request_done(api_guard *g, struct MHD_Connection *conn)
{
	api_conn   *c = conn_of(conn);

	if (c == NULL)
		return;
	pthread_mutex_lock(&g->lock);
	c->req = NULL;
	c->head_deadline_ms = pf_now_ms() + (int64_t) (g->idle_timeout_s + g->header_timeout_s) * 1000;
	pthread_mutex_unlock(&g->lock);
}

api_request *
api_guard_request(struct MHD_Connection *conn)
{
	api_conn   *c = conn_of(conn);

	/* read by the connection's own thread, the only one that sets it */
	return c ? c->req : NULL;
}

/* An open window whose time is up: its summary is due. */
static bool
window_over(const log_window *w, int64_t now)
{
	return w->start_ms != 0 && now - w->start_ms >= LOG_WINDOW_MS;
}

void
api_guard_tick(api_guard *g)
{
	int64_t		now = pf_now_ms();

	pthread_mutex_lock(&g->lock);
	for (api_conn *c = g->conns; c; c = c->next)
	{
		int			unread = 0;

		if (c->head_deadline_ms == 0 || now < c->head_deadline_ms || c->fd == MHD_INVALID_SOCKET)
			continue;
		if (ioctl(c->fd, FIONREAD, &unread) == 0 && unread > 0)
			continue;			/* the head may be there: we are late reading it */
		c->head_deadline_ms = 0;
		shutdown(c->fd, SHUT_RDWR);
		note_drop(g, DROP_HEADER_TIMEOUT, c->address);
	}
	if (window_over(&g->drop_log, now))
	{
		if (g->drop_log.since > 0)
		{
			pf_log_write(PF_LOG_WARN, NULL,
						 json_pack("{s:I,s:I,s:I,s:i,s:i,s:i}", "dropped", (json_int_t) g->drop_log.since,
								   "refused", (json_int_t) g->drops_in_window[DROP_LIMIT],
								   "headerTimeouts", (json_int_t) g->drops_in_window[DROP_HEADER_TIMEOUT],
								   "connections", g->open, "limit", g->limit, "perAddress", g->per_address),
						 "dropped %llu more connections in the last %d s: %llu refused by a connection limit, "
						 "%llu past the header time-out; %d connections open",
						 g->drop_log.since, LOG_WINDOW_MS / 1000, g->drops_in_window[DROP_LIMIT],
						 g->drops_in_window[DROP_HEADER_TIMEOUT], g->open);
			g->drop_log.start_ms = now;
		}
		else
			g->drop_log.start_ms = 0;
		g->drop_log.since = 0;
		memset(g->drops_in_window, 0, sizeof(g->drops_in_window));
	}
	if (window_over(&g->http_log, now))
	{
		if (g->http_log.since > 0)
			pf_log_write(PF_LOG_WARN, NULL, json_pack("{s:I}", "suppressed", (json_int_t) g->http_log.since),
						 "http: %llu more messages of libmicrohttpd in the last %d s were not logged",
						 g->http_log.since, LOG_WINDOW_MS / 1000);
		g->http_log.start_ms = 0;
		g->http_log.since = 0;
		g->http_logged = 0;
	}
	pthread_mutex_unlock(&g->lock);
}

/*
 * The text of libmicrohttpd's last refusal on this thread: it logs the
 * page it is about to send ("Error processing request (HTTP response code
 * is 400 ('<html>…<body>Your HTTP request has wrong value for
 * <b>Content-Length</b> header.</body></html>'))") just before it sends
 * it, on the connection's thread; reply.c says the same in JSON.
 */
static __thread char last_refusal[256];

static void
note_refusal(const char *msg)
{
	const char *body = strstr(msg, "<body>");
	const char *end = body ? strstr(body, "</body>") : NULL;
	size_t		n = 0;

	last_refusal[0] = '\0';
	if (strncmp(msg, "Error processing request", 24) != 0 || end == NULL)
		return;
	for (const char *p = body + 6; p < end && n + 1 < sizeof(last_refusal); p++)
	{
		if (*p == '<')
		{
			const char *close = memchr(p, '>', (size_t) (end - p));

			if (close == NULL)
				break;
			p = close;
		}
		else if (strncmp(p, "&quot;", 6) == 0)
		{
			last_refusal[n++] = '"';
			p += 5;
		}
		else
			last_refusal[n++] = *p;
	}
	last_refusal[n] = '\0';
}

const char *
api_guard_take_refusal(void)
{
	static __thread char taken[sizeof(last_refusal)];

	memcpy(taken, last_refusal, sizeof(taken));
	last_refusal[0] = '\0';
	return taken[0] ? taken : NULL;
}

/*
 * libmicrohttpd's log. A refused connection is a drop; anything else is
 * logged, up to HTTP_MESSAGES_PER_WINDOW lines per window, then counted.
 */
void
api_guard_log_http(void *cls, const char *fmt, va_list ap)
{
	api_guard  *g = cls;
	pf_buf		msg = PF_BUF_INIT;
	bool		log_it = false;

	pf_buf_vappendf(&msg, fmt, ap);
	while (msg.len > 0 && (msg.data[msg.len - 1] == '\n' || msg.data[msg.len - 1] == '\r'))
		msg.data[--msg.len] = '\0';
	note_refusal(pf_buf_str(&msg));
	pthread_mutex_lock(&g->lock);
	if (strncmp(pf_buf_str(&msg), "Server reached connection limit", 31) == 0)
		note_drop(g, DROP_LIMIT, NULL);
	else if (strstr(pf_buf_str(&msg), "failed to queue error response") != NULL)
		;						/* reply.c wrote the answer itself: expected */
	else
	{
		if (g->http_log.start_ms == 0)
			g->http_log.start_ms = pf_now_ms();
		if (g->http_logged < HTTP_MESSAGES_PER_WINDOW)
		{
			g->http_logged++;
			log_it = true;
		}
		else
			g->http_log.since++;
	}
	pthread_mutex_unlock(&g->lock);
	if (log_it)
		pf_log_warn(NULL, "http: %s", pf_buf_str(&msg));
	pf_buf_free(&msg);
}

void
api_guard_render(api_guard *g, pf_buf *out)
{
	pthread_mutex_lock(&g->lock);
	pf_buf_appendf(out, "# HELP payflow_api_connections HTTP connections open, event streams included.\n"
				   "# TYPE payflow_api_connections gauge\npayflow_api_connections %d\n"
				   "# HELP payflow_api_connection_limit The most HTTP connections open at once.\n"
				   "# TYPE payflow_api_connection_limit gauge\npayflow_api_connection_limit %d\n"
				   "# HELP payflow_api_connections_dropped_total Connections refused by a limit or "
				   "closed past the header time-out.\n"
				   "# TYPE payflow_api_connections_dropped_total counter\n", g->open, g->limit);
	for (int r = 0; r < DROP_COUNT; r++)
		pf_buf_appendf(out, "payflow_api_connections_dropped_total{reason=\"%s\"} %llu\n", drop_names[r],
					   g->dropped[r]);
	pthread_mutex_unlock(&g->lock);
}
