/*
 * main.c
 *		payflow-relay: outbox → SQS.
 *
 *		PAYFLOW_DATABASE_URL=... PAYFLOW_QUEUE_URLS=payment-requests=https://... payflow-relay
 *
 * Wakes up on NOTIFY payflow_outbox (sent by the extension's scheduler
 * worker after commits that wrote the outbox), polls every
 * PAYFLOW_POLL_INTERVAL_MS as a fallback, claims again at once while
 * claims come back full, and with every statement that writes acks (at
 * most ACK_DELAY_MS after a call finished). Waits on the libpq socket and the
 * curl transfers together, so claiming, sending and acking overlap.
 *
 * SIGTERM or SIGINT (stop_signals.h: a signalfd the loop reads every turn,
 * at most MAX_WAIT_MS apart): stop claiming, finish the calls in flight,
 * write their acks and nacks, exit 0 (1 if PAYFLOW_DRAIN_SECONDS ran out
 * first). A second signal exits at once; what was in flight is sent again
 * later. While the relay is still starting (waiting for the database), a
 * signal ends the wait and the relay exits 0.
 */
#include "relay.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "payflow/aws_credentials.h"
#include "payflow/backoff.h"
#include "payflow/stop_signals.h"

#define PROGNAME "payflow-relay"
#define LISTEN_CHANNEL "payflow_outbox"
/* the longest the loop sleeps without looking at its flags */
#define MAX_WAIT_MS 200
#define STATS_INTERVAL_MS 60000

/* SIGTERM and SIGINT: a signalfd (stop_signals.h), read by the loop. */
static int	signal_fd = -1;
static bool stop_requested = false;

/* A signal taken: the first starts the drain, a second exits at once. */
static void
take_signals(void)
{
	while (pf_stop_signals_take(signal_fd) != 0)
	{
		if (stop_requested)
		{
			pf_log_warn(NULL, "second signal: exiting at once");
			_exit(1);
		}
		stop_requested = true;
	}
}

static json_t *
stats_json(const relay *r)
{
	return json_pack("{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:i,s:i,s:o}",
					 "spansDropped", (json_int_t) pf_tracer_dropped(),
					 "claims", (json_int_t) r->stats.claims,
					 "claimed", (json_int_t) r->stats.claimed,
					 "sent", (json_int_t) r->stats.sent,
					 "acked", (json_int_t) r->stats.acked,
					 "nacked", (json_int_t) r->stats.failed,
					 "deadLettered", (json_int_t) r->stats.dead_lettered,
					 "calls", (json_int_t) r->stats.calls,
					 "failedCalls", (json_int_t) r->stats.failed_calls,
					 "statements", (json_int_t) r->stats.statements,
					 "inFlight", r->in_flight,
					 "queued", r->queued,
					 "sqs", pf_sqs_counts_json(r->sqs));
}

/*
 * How many rows to claim now. Claims run ahead of the calls: the queue
 * holds up to two rounds of calls (twenty events per call in flight) and
 * is refilled once it is down to one round, so each claim fetches many rows
 * in one statement while the calls are fed from the queue.
 */
static int
claim_room(const relay *r)
{
	int			round = r->max_in_flight * PF_SQS_MAX_BATCH;

	return r->queued <= round ? 2 * round - r->queued : 0;
}

static int
min_int(int a, int b)
{
	return a < b ? a : b;
}

static bool
outcomes_pending(const relay *r)
{
	return r->acks.n > 0 || r->nacks.n > 0 || r->dead.n > 0;
}

/*
 * The loop. Each turn: read the database's answer and notifications, start
 * queued batches, send the database what is due (outcomes that waited long
 * enough, and a claim when there is room and a reason: a wake-up, a full
 * claim, acked rows, the poll interval; a statement sent for one of them
 * carries the other too), then wait for a call to finish, the database
 * socket or the next deadline.
 */
static int
relay_run(relay *r)
{
	bool		stopping = false;
	int64_t		next_poll_ms = 0;
	int64_t		drain_deadline_ms = 0;
	int64_t		next_stats_ms = pf_now_ms() + STATS_INTERVAL_MS;
	long		last_stats_sent = 0;

	r->claim_wanted = true;
	for (;;)
	{
		int64_t		now = pf_now_ms();
		pf_aws_call *call;
		int			timeout;
		int			room;
		int			pgsock;

		take_signals();
		if (stop_requested && !stopping)
		{
			stopping = true;
			drain_deadline_ms = now + (int64_t) r->cfg.drain_seconds * 1000;
			pf_log_info(NULL, "stopping: finishing %d call(s) in flight and %d queued event(s)",
						r->in_flight, r->queued);
		}
		if (stopping)
		{
			if (r->in_flight == 0 && r->queued == 0 && !outcomes_pending(r) && !r->db.active)
				break;
			if (now >= drain_deadline_ms)
			{
				pf_log_write(PF_LOG_WARN, NULL, stats_json(r),
							 "PAYFLOW_DRAIN_SECONDS ran out with %d call(s) in flight; "
							 "their events are sent again once their claims expire", r->in_flight);
				return 1;
			}
		}

		if (relay_db_poll(r) > 0)
		{
			pf_log_debug(NULL, "woken by a notification");
			r->claim_wanted = true;
		}
		relay_start_batches(r);

		room = stopping ? 0 : claim_room(r);
		if (relay_db_ready(r))
		{
			bool		claim = room > 0 && (r->claim_wanted || now >= next_poll_ms);

			if (claim || relay_outcomes_due(r, now, stopping))
			{
				/* a statement that goes anyway claims too: same round trip */
				if (room > 0)
				{
					r->claim_wanted = false;
					next_poll_ms = now + r->cfg.poll_interval_ms;
				}
				relay_db_send(r, room);
				relay_start_batches(r);
			}
		}
		else if (stopping && !r->db.active && outcomes_pending(r))
			relay_outcomes_abandon(r);	/* the database failed: do not wait for it */

		/* how long to wait for a call to finish or the socket to wake us */
		now = pf_now_ms();
		room = stopping ? 0 : claim_room(r);
		timeout = MAX_WAIT_MS;
		if (relay_db_ready(r) && (relay_outcomes_due(r, now, stopping) || (room > 0 && r->claim_wanted)))
			timeout = 0;
		else if (!r->db.active)
		{
			int64_t		acks_due = relay_outcomes_deadline(r);

			if (room > 0)
				timeout = min_int(timeout, (int) (next_poll_ms > now ? next_poll_ms - now : 0));
			if (now < r->db_retry_at_ms)
				timeout = min_int(timeout, (int) (r->db_retry_at_ms - now));
			/* gathered acks fall due (not before the database may be tried) */
			if (acks_due != INT64_MAX)
			{
				if (acks_due < r->db_retry_at_ms)
					acks_due = r->db_retry_at_ms;
				timeout = min_int(timeout, (int) (acks_due > now ? acks_due - now : 0));
			}
		}
		if (r->queued > 0 && relay_batch_deadline(r) != INT64_MAX)
		{
			int64_t		due = relay_batch_deadline(r);

			/* a partial batch held back for more rows falls due */
			timeout = min_int(timeout, (int) (due > now ? due - now : 0));
		}
		if (timeout < 1 && pf_aws_pending(r->aws) > 0)
			timeout = 1;		/* a zero wait would not move the transfers */
		pgsock = relay_db_socket(r);
		call = pf_sqs_wait(r->sqs, timeout, pgsock);
		if (call == NULL && pf_aws_pending(r->aws) == 0 && pgsock < 0 && timeout > 0)
			pf_sleep_ms(timeout);	/* nothing to wait on: just let time pass */
		/*
		 * A finished call wants no claim of its own: the queue's room did
		 * not change, and its acks, written within ACK_DELAY_MS, take a
		 * claim along.
		 */
		while (call != NULL)
		{
			relay_finish_batch(r, call);
			call = pf_sqs_wait(r->sqs, 0, -1);
		}

		if (now >= next_stats_ms)
		{
			if (r->stats.sent != last_stats_sent)
				pf_log_write(PF_LOG_INFO, NULL, stats_json(r), "relay statistics");
			last_stats_sent = r->stats.sent;
			next_stats_ms = now + STATS_INTERVAL_MS;
		}
	}
	pf_log_write(PF_LOG_INFO, NULL, stats_json(r), "stopped: every call in flight finished and was written back");
	return 0;
}

static void
usage(FILE *out)
{
	fprintf(out,
			"usage: " PROGNAME "\n"
			"Moves payflow's outbox to SQS. Settings come from the environment:\n"
			"  PAYFLOW_DATABASE_URL, PAYFLOW_QUEUE_URLS (destination=queue-url,...),\n"
			"  PAYFLOW_RELAY_IN_FLIGHT, PAYFLOW_RELAY_LEASE_SECONDS, PAYFLOW_POLL_INTERVAL_MS,\n"
			"  PAYFLOW_SQS_BATCH_WAIT_MS,\n"
			"  PAYFLOW_WORKER_ID, PAYFLOW_DRAIN_SECONDS, PAYFLOW_LOG_LEVEL, AWS_*.\n"
			"--print-settings prints every setting it reads as JSON lines, without starting.\n");
}

int
main(int argc, char **argv)
{
	relay		r;
	pf_pg_options pg_options;
	pf_error	err;
	json_t	   *settings;
	pf_result	rc;
	int			status;

	if (argc == 2 && strcmp(argv[1], "--print-settings") == 0)
	{
		pf_config_print_settings(stdout, PROGNAME, NULL, PF_PROGRAM_RELAY);
		return 0;
	}
	if (argc > 1)
	{
		bool		help = strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0;

		usage(help ? stdout : stderr);
		return help ? 0 : 2;
	}
	signal_fd = pf_stop_signals_block();
	if (signal_fd < 0)
	{
		perror(PROGNAME ": signalfd");
		return 1;
	}
	memset(&r, 0, sizeof(r));
	pf_config_load_or_exit(&r.cfg, PROGNAME, PF_PROGRAM_RELAY);
	/* SQS takes UTF-8 only, whatever the database's encoding */
	setenv("PGCLIENTENCODING", "UTF8", 1);

	r.relay_id = r.cfg.worker_id;
	r.max_in_flight = r.cfg.relay_in_flight;
	r.batch_wait_ms = r.cfg.sqs_batch_wait_ms;
	r.lease_seconds = r.cfg.relay_lease_seconds;
	relay_destinations_init(&r);

	settings = pf_config_to_json(&r.cfg);
	json_object_set_new(settings, "relayId", json_string(r.relay_id));
	pf_log_write(PF_LOG_INFO, NULL, settings, "starting");
	pf_config_warn_unknown_variables();
	pf_tracer_start("payflow-relay", NULL);

	r.credentials = pf_aws_credentials_provider_create(&r.cfg, &err);
	if (r.credentials == NULL)
	{
		pf_log_error(NULL, "no AWS credentials: %s", err.message);
		pf_config_free(&r.cfg);
		return 2;
	}
	r.aws = pf_aws_client_create(&r.cfg, r.credentials);
	r.sqs = pf_sqs_create(r.aws, &r.cfg);
	/* the only wait for credentials: the loop signs with cached ones while they refresh */
	{
		const pf_aws_credentials *creds;

		if (pf_aws_credentials_get(r.credentials, true, &creds, &err) != PF_OK)
			pf_log_warn(NULL, "no AWS credentials yet (%s: %s); sends fail until they come", err.code,
						err.message);
	}

	memset(&pg_options, 0, sizeof(pg_options));
	pg_options.application_name = PROGNAME;
	pg_options.statement_timeout_ms = 15000;
	/* the loop backs off and retries by itself; keep each call short */
	pg_options.max_attempts = 3;
	pg_options.backoff_cap_ms = 1000;
	r.pg = pf_pg_create(r.cfg.database_url, &pg_options);

	/*
	 * Connects (retrying until the database answers) and listens; a signal
	 * meanwhile ends the wait (nothing claimed yet, nothing to write back).
	 */
	pf_pg_watch_stop_signals(r.pg, signal_fd);
	rc = pf_pg_listen(r.pg, LISTEN_CHANNEL, &err);
	pf_pg_watch_stop_signals(r.pg, -1);
	take_signals();
	if (rc != PF_OK && !stop_requested)
	{
		pf_log_error(NULL, "LISTEN %s failed: %s", LISTEN_CHANNEL, err.message);
		status = 1;
	}
	else
	{
		if (!stop_requested)
			pf_log_info(NULL, "listening on %s; sending to %d destination(s) with up to %d call(s) in flight",
						LISTEN_CHANNEL, r.n_destinations, r.max_in_flight);
		status = relay_run(&r);
	}

	pf_tracer_stop(2000);
	pf_pg_destroy(r.pg);
	relay_destinations_free(&r);
	relay_outcomes_free(&r.acks);
	relay_outcomes_free(&r.nacks);
	relay_outcomes_free(&r.dead);
	pf_sqs_destroy(r.sqs);
	pf_aws_client_destroy(r.aws);
	pf_aws_credentials_provider_destroy(r.credentials);
	pf_config_free(&r.cfg);
	return status;
}
