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
 * operation changes. The main thread only waits for signals.
 *
 * SIGTERM or SIGINT: stop accepting (MHD_quiesce_daemon), end every event
 * stream, let the requests in flight finish (up to PAYFLOW_DRAIN_SECONDS),
 * then stop and exit 0 (1 if the drain ran out). A second signal exits at
 * once.
 */
#include "api.h"

#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "payflow/backoff.h"

/* Raised only after the drain: from then on database retries give up. */
static volatile sig_atomic_t stop_now = 0;

static void
mhd_logger(void *cls, const char *fmt, va_list ap)
{
	pf_buf		msg = PF_BUF_INIT;

	(void) cls;
	pf_buf_vappendf(&msg, fmt, ap);
	while (msg.len > 0 && (msg.data[msg.len - 1] == '\n' || msg.data[msg.len - 1] == '\r'))
		msg.data[--msg.len] = '\0';
	pf_log_warn(NULL, "http: %s", pf_buf_str(&msg));
	pf_buf_free(&msg);
}

/* PAYFLOW_LISTEN (host:port, [v6]:port) as a socket address; exits on failure. */
static struct addrinfo *
resolve_listen(const char *listen)
{
	char	   *copy = pf_strdup(listen);
	char	   *colon = strrchr(copy, ':');
	char	   *host = copy;
	struct addrinfo hints;
	struct addrinfo *ai = NULL;
	int			rc;

	*colon = '\0';				/* the config module checked host:port */
	if (host[0] == '[' && colon[-1] == ']')
	{
		host++;
		colon[-1] = '\0';
	}
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
	rc = getaddrinfo(host, colon + 1, &hints, &ai);
	if (rc != 0 || ai == NULL)
	{
		fprintf(stderr, "%s: invalid PAYFLOW_LISTEN: cannot resolve %s: %s\n", API_PROGNAME, listen,
				gai_strerror(rc));
		exit(2);
	}
	free(copy);
	return ai;
}

static struct MHD_Daemon *
start_http(api_context *ctx)
{
	struct addrinfo *ai = resolve_listen(ctx->cfg.listen);
	unsigned	flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME |
		MHD_USE_ERROR_LOG;
	struct MHD_Daemon *daemon;

	if (ai->ai_family == AF_INET6)
		flags |= MHD_USE_IPv6;
	/* the logger first, or MHD prints early messages itself */
	daemon = MHD_start_daemon(flags, 0, NULL, NULL, api_handle, ctx,
							  MHD_OPTION_EXTERNAL_LOGGER, mhd_logger, NULL,
							  MHD_OPTION_SOCK_ADDR, ai->ai_addr,
							  MHD_OPTION_THREAD_POOL_SIZE, (unsigned int) ctx->cfg.api_threads,
							  MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int) ctx->cfg.api_idle_timeout,
	/* request line and headers must fit in half; the rest buffers body and answer */
							  MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t) ctx->cfg.api_max_header_bytes * 2,
							  MHD_OPTION_CONNECTION_LIMIT, (unsigned int) ctx->cfg.api_max_streams + 1024,
							  MHD_OPTION_LISTEN_BACKLOG_SIZE, 1024u,
							  MHD_OPTION_NOTIFY_COMPLETED, api_completed, ctx,
							  MHD_OPTION_END);
	freeaddrinfo(ai);
	return daemon;
}

/*
 * Every event stream is a socket: the usual soft limit of 1024 descriptors
 * would cap PAYFLOW_API_MAX_STREAMS long before memory does. Raise it up
 * to the hard limit, and say so when even that is too low.
 */
static void
raise_descriptor_limit(const pf_config *cfg)
{
	struct rlimit rl;
	rlim_t		wanted = (rlim_t) cfg->api_max_streams + (rlim_t) cfg->api_pool_size + 256;

	if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= wanted)
		return;
	rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= wanted ? wanted : rl.rlim_max;
	if (setrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur < wanted)
		pf_log_warn(NULL, "open files limited to %lu: fewer than PAYFLOW_API_MAX_STREAMS=%d streams fit",
					(unsigned long) rl.rlim_cur, cfg->api_max_streams);
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

/* Wait for SIGTERM/SIGINT (blocked in every thread, taken here). */
static int
wait_signal(const sigset_t *set, int timeout_ms)
{
	struct timespec ts = {timeout_ms / 1000, (long) (timeout_ms % 1000) * 1000000L};
	int			sig;

	if (timeout_ms < 0)
	{
		if (sigwait(set, &sig) != 0)
			return -1;
		return sig;
	}
	return sigtimedwait(set, NULL, &ts);
}

int
main(int argc, char **argv)
{
	static api_context ctx;
	sigset_t	signals;
	struct sigaction sa;
	int64_t		deadline;
	int			status = 0;

	(void) argc;
	(void) argv;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = SIG_IGN;
	sigaction(SIGPIPE, &sa, NULL);
	/* block before any thread starts, so only sigwait below sees them */
	sigemptyset(&signals);
	sigaddset(&signals, SIGTERM);
	sigaddset(&signals, SIGINT);
	pthread_sigmask(SIG_BLOCK, &signals, NULL);

	pf_log_init(API_PROGNAME, PF_LOG_INFO);
	pf_config_load_or_exit(&ctx.cfg, API_PROGNAME, PF_PROGRAM_API);
	ctx.stop = &stop_now;
	ctx.s3_enabled = ctx.cfg.store == PF_STORE_S3;
	pthread_mutex_init(&ctx.active_lock, NULL);
	raise_descriptor_limit(&ctx.cfg);
	api_metrics_init();
	api_pool_init(&ctx.pool, &ctx.cfg, &stop_now);
	ctx.hub = api_hub_start(&ctx);
	ctx.daemon = start_http(&ctx);
	if (ctx.daemon == NULL)
	{
		fprintf(stderr, "%s: cannot listen on %s (in use, or not an address of this host)\n", API_PROGNAME,
				ctx.cfg.listen);
		exit(1);
	}
	pf_log_write(PF_LOG_INFO, NULL, json_pack("{s:o}", "config", pf_config_to_json(&ctx.cfg)),
				 "listening on %s (%d threads, %d database connections, S3 claim check %s)", ctx.cfg.listen,
				 ctx.cfg.api_threads, ctx.cfg.api_pool_size, ctx.s3_enabled ? "on" : "off");
	pf_config_warn_unknown_variables();

	wait_signal(&signals, -1);
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
		if (wait_signal(&signals, 50) > 0)
		{
			pf_log_warn(NULL, "second signal: exiting at once");
			_exit(1);
		}
	}
	stop_now = 1;
	MHD_stop_daemon(ctx.daemon);
	api_hub_stop(ctx.hub);
	api_pool_destroy(&ctx.pool);
	pf_log_info(NULL, "stopped");
	pf_config_free(&ctx.cfg);
	return status;
}
