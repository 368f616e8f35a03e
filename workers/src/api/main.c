/*
 * main.c
 *		payflow-api: the HTTP edge.
 *
 *		PAYFLOW_DATABASE_URL=... PAYFLOW_LISTEN=127.0.0.1:8080 payflow-api
 *
 * Threading (libmicrohttpd): MHD_USE_INTERNAL_POLLING_THREAD with a pool
 * of PAYFLOW_API_THREADS threads, each running its own epoll loop over its
 * share of the connections. A request's handler blocks on one short
 * statement (bounded by statement_timeout) taken from the bounded
 * PostgreSQL pool; that blocks only its thread's other connections, for
 * milliseconds, and the pool wait is bounded too (503 after it). Thread
 * per connection would give every idle keep-alive client and every
 * server-sent-event stream its own thread; here a stream with nothing to
 * send is a suspended connection (MHD_ALLOW_SUSPEND_RESUME) that costs
 * no thread at all, and the one hub thread (stream.c) resumes it when its
 * operation changes. The main thread waits for signals and, once a
 * second, drops connections whose request head is late (guard.c).
 *
 * SIGTERM or SIGINT: stop accepting (MHD_quiesce_daemon), end every event
 * stream, let the requests in flight finish (up to PAYFLOW_DRAIN_SECONDS),
 * then stop and exit 0 (1 if the drain ran out). A second signal exits at
 * once.
 */
#include "api.h"
#include "submit_batch.h"

#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "payflow/backoff.h"
#include "payflow/listen.h"
#include "payflow/stop_signals.h"

/* Raised only after the drain: from then on database retries give up. */
static volatile sig_atomic_t stop_now = 0;

/* PAYFLOW_LISTEN (host:port, [v6]:port) as a socket address; exits on failure. */
static struct addrinfo *
resolve_listen(const char *listen)
{
	char		why[256];
	struct addrinfo *ai = pf_listen_resolve(listen, why, sizeof(why));

	if (ai == NULL)
	{
		fprintf(stderr, "%s: invalid PAYFLOW_LISTEN: %s\n", API_PROGNAME, why);
		exit(2);
	}
	return ai;
}

static struct MHD_Daemon *
start_http(api_context *ctx, int connection_limit)
{
	struct addrinfo *ai = resolve_listen(ctx->cfg.listen);
	unsigned	flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME |
	MHD_USE_ERROR_LOG;
	struct MHD_Daemon *daemon;

	if (ai->ai_family == AF_INET6)
		flags |= MHD_USE_IPv6;
	/* the logger first, or MHD prints early messages itself */
	daemon = MHD_start_daemon(flags, 0, NULL, NULL, api_handle, ctx,
							  MHD_OPTION_EXTERNAL_LOGGER, api_guard_log_http, ctx->guard,
							  MHD_OPTION_SOCK_ADDR, ai->ai_addr,
							  MHD_OPTION_THREAD_POOL_SIZE, (unsigned int) ctx->cfg.api_threads,
							  MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int) ctx->cfg.api_idle_timeout,
	/* MHD's own ceiling for the head; the router enforces the limit itself */
							  MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t) ctx->cfg.api_max_header_bytes * 2,
							  MHD_OPTION_CONNECTION_LIMIT, (unsigned int) connection_limit,
							  MHD_OPTION_PER_IP_CONNECTION_LIMIT,
							  (unsigned int) ctx->cfg.api_max_connections_per_address,
							  MHD_OPTION_LISTEN_BACKLOG_SIZE, 1024u,
							  MHD_OPTION_UNESCAPE_CALLBACK, api_keep_escaped, NULL,
							  MHD_OPTION_NOTIFY_CONNECTION, api_guard_notify, ctx->guard,
							  MHD_OPTION_NOTIFY_COMPLETED, api_completed, ctx,
							  MHD_OPTION_END);
	freeaddrinfo(ai);
	return daemon;
}

/*
 * Descriptors besides the HTTP connections: stdio, the listening socket,
 * the hub's eventfd and connection, per MHD thread an epoll and a wake-up
 * descriptor, per pool slot a database and S3 sockets, and some slack for
 * libraries (resolver, TLS, credentials file).
 */
static int
reserved_descriptors(const pf_config *cfg)
{
	return 32 + 3 * cfg->api_threads + 3 * cfg->api_pool_size;
}

/*
 * Every connection is a descriptor: with the usual soft limit of 1024 the
 * process would fail accept() with EMFILE long before
 * PAYFLOW_API_MAX_CONNECTIONS, and keep failing. Raise the soft limit to
 * cover the connection limit (up to the hard limit); when even that is too
 * low, lower the connection limit (and the stream limit with it) to what
 * fits, and say so. Returns the connection limit to use.
 */
static int
fit_descriptor_limit(pf_config *cfg)
{
	struct rlimit rl;
	rlim_t		reserved = (rlim_t) reserved_descriptors(cfg);
	rlim_t		wanted = (rlim_t) cfg->api_max_connections + reserved;
	int			limit;
	int			streams;

	if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
		return cfg->api_max_connections;
	if (rl.rlim_cur < wanted)
	{
		struct rlimit raised = rl;

		raised.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= wanted ? wanted : rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &raised) == 0)
			rl = raised;
	}
	if (rl.rlim_cur >= wanted)
		return cfg->api_max_connections;
	if (rl.rlim_cur < reserved + 16)
	{
		fprintf(stderr, "%s: open files limited to %lu: too few for even 16 connections (ulimit -n)\n",
				API_PROGNAME, (unsigned long) rl.rlim_cur);
		exit(2);
	}
	limit = (int) (rl.rlim_cur - reserved);
	streams = (int) ((long long) cfg->api_max_streams * limit / cfg->api_max_connections);
	if (streams < 1)
		streams = 1;
	pf_log_write(PF_LOG_WARN, NULL, json_pack("{s:I,s:i,s:i,s:i,s:i}", "openFiles", (json_int_t) rl.rlim_cur,
											  "connectionLimit", limit, "configured", cfg->api_max_connections,
											  "streamLimit", streams, "configuredStreams", cfg->api_max_streams),
				 "open files limited to %lu (ulimit -n): connection limit lowered from %d to %d, "
				 "event streams from %d to %d", (unsigned long) rl.rlim_cur, cfg->api_max_connections, limit,
				 cfg->api_max_streams, streams);
	cfg->api_max_streams = streams;
	return limit;
}

static int
active_requests(api_context *ctx)
{
	int			n;

	pthread_mutex_lock(&ctx->active_lock);
	n = ctx->active;
	pthread_mutex_unlock(&ctx->active_lock);
	return n;
}


int
main(int argc, char **argv)
{
	static api_context ctx;
	int			signal_fd;
	int64_t		deadline;
	int			status = 0;
	int			connection_limit;

	/* the settings table only, no value (config_print.c) */
	if (argc > 1 && strcmp(argv[1], "--print-settings") == 0)
	{
		pf_config_print_settings(stdout, API_PROGNAME, NULL, PF_PROGRAM_API);
		return 0;
	}
	/* before any thread starts (stop_signals.h): only the main thread below takes them */
	signal_fd = pf_stop_signals_block();
	if (signal_fd < 0)
	{
		perror(API_PROGNAME ": signalfd");
		return 1;
	}

	pf_log_init(API_PROGNAME, PF_LOG_INFO);
	pf_config_load_or_exit(&ctx.cfg, API_PROGNAME, PF_PROGRAM_API);
	ctx.stop = &stop_now;
	ctx.s3_enabled = ctx.cfg.store == PF_STORE_S3;
	ctx.console_dir = api_console_find_dir();
	pthread_mutex_init(&ctx.active_lock, NULL);
	pthread_mutex_init(&ctx.mac_lock, NULL);
	connection_limit = fit_descriptor_limit(&ctx.cfg);
	ctx.guard = api_guard_create(&ctx.cfg, connection_limit);
	api_metrics_init();
	pf_tracer_start(API_PROGNAME, NULL);
	api_pool_init(&ctx.pool, &ctx.cfg, &stop_now);
	ctx.submits = api_submits_create(ctx.cfg.api_pool_size);
	ctx.hub = api_hub_start(&ctx);
	ctx.daemon = start_http(&ctx, connection_limit);
	if (ctx.daemon == NULL)
	{
		fprintf(stderr, "%s: cannot listen on %s (in use, or not an address of this host)\n", API_PROGNAME,
				ctx.cfg.listen);
		exit(1);
	}
	pf_log_write(PF_LOG_INFO, NULL, json_pack("{s:o}", "config", pf_config_to_json(&ctx.cfg)),
				 "listening on %s (%d threads, %d database connections, at most %d connections, S3 claim check %s, "
				 "console %s)",
				 ctx.cfg.listen, ctx.cfg.api_threads, ctx.cfg.api_pool_size, connection_limit,
				 ctx.s3_enabled ? "on" : "off", ctx.console_dir ? ctx.console_dir : "off (no console folder)");
	pf_config_warn_unknown_variables();

	/* the main thread also drops heads past their deadline, once a second */
	while (pf_stop_signals_wait(signal_fd, 1000) == 0)
		api_guard_tick(ctx.guard);
	pf_log_info(NULL, "stopping: no new connections, ending event streams, %d request(s) in flight",
				active_requests(&ctx));
	{
		MHD_socket	fd = MHD_quiesce_daemon(ctx.daemon);

		if (fd != MHD_INVALID_SOCKET)
			close(fd);
	}
	api_hub_close_streams(ctx.hub);
	deadline = pf_now_ms() + (int64_t) ctx.cfg.drain_seconds * 1000;
	while (active_requests(&ctx) > 0)
	{
		if (pf_now_ms() >= deadline)
		{
			pf_log_warn(NULL, "drain time over with %d request(s) in flight", active_requests(&ctx));
			status = 1;
			break;
		}
		api_guard_tick(ctx.guard);
		if (pf_stop_signals_wait(signal_fd, 50) != 0)
		{
			pf_log_warn(NULL, "second signal: exiting at once");
			_exit(1);
		}
	}
	stop_now = 1;
	MHD_stop_daemon(ctx.daemon);
	api_hub_stop(ctx.hub);
	api_pool_destroy(&ctx.pool);
	api_submits_destroy(ctx.submits);
	pf_tracer_stop(2000);
	pf_log_info(NULL, "stopped");
	pf_config_free(&ctx.cfg);
	return status;
}
