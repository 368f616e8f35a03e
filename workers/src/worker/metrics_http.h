/*
 * metrics_http.h
 *		The worker's own figures for Prometheus: GET /metrics on
 *		PAYFLOW_METRICS_LISTEN (off when unset).
 *
 * What only the worker knows: how many messages it holds, whether its
 * heartbeat keeps up, how many leases it renewed and lost. The database's
 * figures (backlog, ages, failures) are payflow-api's /metrics.
 */
#ifndef PAYFLOW_METRICS_HTTP_H
#define PAYFLOW_METRICS_HTTP_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

/* Written by the main thread and the lease renewer, read by the HTTP thread. */
typedef struct worker_stats
{
	atomic_llong concurrency;
	atomic_llong held;			/* messages held now */
	atomic_llong handled;		/* messages whose outcome was acted on */
	atomic_llong heartbeat_rounds;	/* ticks */
	atomic_llong heartbeat_behind;	/* 1 while behind: no receiving */
	atomic_llong heartbeat_behind_total;	/* ticks or rounds that were behind */
	atomic_llong heartbeat_late_ms; /* the latest one's lateness */
	atomic_llong lease_rounds;	/* rounds of lease renewals finished */
	atomic_llong lease_round_ms;	/* the latest round's duration */
	atomic_llong leases_renewed;
	atomic_llong leases_lost;
	atomic_llong lease_rounds_failed;	/* a chunk failed: its leases left as they were */
} worker_stats;

typedef struct metrics_http metrics_http;

/*
 * Serve stats on listen (host:port); NULL with why set when it cannot.
 * role names the worker's role in every series' labels.
 */
metrics_http *metrics_http_start(const char *listen, const worker_stats *stats, const char *role, char *why,
								 size_t why_len);
void		metrics_http_stop(metrics_http *m);

#endif							/* PAYFLOW_METRICS_HTTP_H */
