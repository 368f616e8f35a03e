/*
 * metrics_http.c
 *		GET /metrics of payflow-worker (metrics_http.h), on one
 *		libmicrohttpd thread: a scrape is a few hundred bytes, every few
 *		seconds at most.
 */
#include "metrics_http.h"

#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "payflow/buf.h"
#include "payflow/listen.h"
#include "payflow/tracer.h"

struct metrics_http
{
	struct MHD_Daemon *daemon;
	const worker_stats *stats;
	char	   *role;
};

typedef struct series
{
	const char *name;
	const char *type;
	const char *help;
	const atomic_llong *value;
	double		scale;			/* 0.001: milliseconds shown as seconds */
} series;

static void
render(const metrics_http *m, pf_buf *out)
{
	const worker_stats *s = m->stats;
	const series all[] = {
		{"payflow_worker_concurrency", "gauge", "Executors (PAYFLOW_CONCURRENCY).", &s->concurrency, 1},
		{"payflow_worker_messages_held", "gauge", "Messages held now (received, not yet let go).", &s->held, 1},
		{"payflow_worker_messages_handled_total", "counter", "Messages whose outcome was acted on.", &s->handled, 1},
		{"payflow_worker_heartbeat_ticks_total", "counter", "Heartbeat ticks (every visibility/3).",
		&s->heartbeat_rounds, 1},
		{"payflow_worker_heartbeat_behind", "gauge",
			"1 while the heartbeat is behind (a renewal later than visibility/3): no new messages are taken.",
		&s->heartbeat_behind, 1},
		{"payflow_worker_heartbeat_behind_total", "counter", "Ticks and lease rounds that were behind.",
		&s->heartbeat_behind_total, 1},
		{"payflow_worker_heartbeat_lateness_seconds", "gauge", "How late the latest tick or lease round was.",
		&s->heartbeat_late_ms, 0.001},
		{"payflow_worker_lease_rounds_total", "counter", "Rounds of database lease renewals finished.",
		&s->lease_rounds, 1},
		{"payflow_worker_lease_rounds_failed_total", "counter",
		"Rounds in which some renewals failed (left to the next round).", &s->lease_rounds_failed, 1},
		{"payflow_worker_lease_round_seconds", "gauge", "How long the latest round of lease renewals took.",
		&s->lease_round_ms, 0.001},
		{"payflow_worker_leases_renewed_total", "counter", "Step leases renewed.", &s->leases_renewed, 1},
		{"payflow_worker_leases_lost_total", "counter", "Step leases found lost (another worker took over).",
		&s->leases_lost, 1},
	};

	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
	{
		char		line[512];
		long long	v = atomic_load_explicit(all[i].value, memory_order_relaxed);

		if (all[i].scale == 1)
			snprintf(line, sizeof(line), "# HELP %s %s\n# TYPE %s %s\n%s{role=\"%s\"} %lld\n", all[i].name,
					 all[i].help, all[i].name, all[i].type, all[i].name, m->role, v);
		else
			snprintf(line, sizeof(line), "# HELP %s %s\n# TYPE %s %s\n%s{role=\"%s\"} %.3f\n", all[i].name,
					 all[i].help, all[i].name, all[i].type, all[i].name, m->role, (double) v * all[i].scale);
		pf_buf_append_str(out, line);
	}
	pf_tracer_render_metrics(out);
}

static enum MHD_Result
reply(struct MHD_Connection *c, unsigned int status, const char *type, const char *body, size_t len)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(len, (void *) body, MHD_RESPMEM_MUST_COPY);
	enum MHD_Result ret;

	if (r == NULL)
		return MHD_NO;
	MHD_add_response_header(r, "Content-Type", type);
	ret = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return ret;
}

static enum MHD_Result
handle(void *cls, struct MHD_Connection *c, const char *url, const char *method, const char *version,
	   const char *upload, size_t *upload_len, void **state)
{
	const metrics_http *m = cls;
	pf_buf		body = PF_BUF_INIT;
	enum MHD_Result ret;

	if (*state == NULL)
	{
		*state = (void *) 1;	/* the head first; a body, if any, is ignored */
		return MHD_YES;
	}
	*upload_len = 0;
	if (strcmp(url, "/metrics") != 0)
	{
		static const char not_found[] = "{\"error\":\"not_found\",\"message\":\"only GET /metrics here\"}";

		return reply(c, MHD_HTTP_NOT_FOUND, "application/json", not_found, strlen(not_found));
	}
	if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
	{
		static const char not_allowed[] = "{\"error\":\"method_not_allowed\",\"message\":\"GET /metrics\"}";

		return reply(c, MHD_HTTP_METHOD_NOT_ALLOWED, "application/json", not_allowed, strlen(not_allowed));
	}
	render(m, &body);
	ret = reply(c, MHD_HTTP_OK, "text/plain; version=0.0.4", body.data, body.len);
	pf_buf_free(&body);
	return ret;
}

metrics_http *
metrics_http_start(const char *listen, const worker_stats *stats, const char *role, char *why, size_t why_len)
{
	struct addrinfo *ai = pf_listen_resolve(listen, why, why_len);
	metrics_http *m;
	unsigned	flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL;

	if (ai == NULL)
		return NULL;
	m = pf_calloc(1, sizeof(*m));
	m->stats = stats;
	m->role = pf_strdup(role);
	if (ai->ai_family == AF_INET6)
		flags |= MHD_USE_IPv6;
	m->daemon = MHD_start_daemon(flags, 0, NULL, NULL, handle, m,
								 MHD_OPTION_SOCK_ADDR, ai->ai_addr,
								 MHD_OPTION_CONNECTION_LIMIT, 16u,
								 MHD_OPTION_CONNECTION_TIMEOUT, 10u,
								 MHD_OPTION_THREAD_STACK_SIZE, (size_t) (256 * 1024),
								 MHD_OPTION_END);
	freeaddrinfo(ai);
	if (m->daemon == NULL)
	{
		snprintf(why, why_len, "cannot listen on %s", listen);
		free(m->role);
		free(m);
		return NULL;
	}
	return m;
}

void
metrics_http_stop(metrics_http *m)
{
	if (m == NULL)
		return;
	MHD_stop_daemon(m->daemon);
	free(m->role);
	free(m);
}
