#!/bin/bash
# payflow-relay against the local SQS emulator, beside a baseline measured
# in the same run:
#
#   throughput  N events submitted with SQL first, then the time the relay
#               takes to drain the outbox to SQS, vs a plain SendMessageBatch
#               loop (batches of ten, the same calls in flight, the same
#               library and emulator, no database);
#   latency     a steady RATE submits/s for SECONDS s with the relay running:
#               arrival time at a reader - the outbox row's created_at, and
#               SQS's SentTimestamp - created_at, p50, p95 and p99.
#
# Both for the C extension (the relay woken by the scheduler worker's NOTIFY
# right after each commit) and for the C-free flavour (no wake-up per
# commit: run_scheduler, run by pg_cron, notifies at most once a second, and
# the relay polls every PAYFLOW_POLL_INTERVAL_MS, 1000 ms by default; also
# measured with BENCH_RELAY_SQL_POLL_MS), each in a cluster of its own, up at
# the same time; the rounds of the flavours are interleaved.
#
# Medians of ROUNDS rounds; queues are purged between rounds (fauxqs slows
# down as a queue deepens). Prints figures, never fails on timing.
#
#   BENCH_RELAY_EVENTS=10000  BENCH_RELAY_IN_FLIGHT="4 8"  ROUNDS=3
#   BENCH_RELAY_RATE=200  BENCH_RELAY_SECONDS=10  BENCH_RELAY_SQL_POLL_MS=200
#   BENCH_FLAVOURS="c sql"  PF_BENCH_RELAY_PGPORT=54349  PF_BENCH_RELAY_SQL_PGPORT=54348
#   BENCH_RELAY_EMULATOR_PORT=4630
#
# Private clusters (C: payflow and pg_cron preloaded, the scheduler worker
# on; C-free: test/lib/cluster.sh with PF_FLAVOUR=sql) and a private
# emulator; all are gone when the script ends.
set -euo pipefail
cd "$(dirname "$0")/../.."
source test/bench/lib.sh
source test/bench/cost.sh

EVENTS=${BENCH_RELAY_EVENTS:-10000}
IN_FLIGHT=${BENCH_RELAY_IN_FLIGHT:-4 8}
ROUNDS=${ROUNDS:-3}
RATE=${BENCH_RELAY_RATE:-200}
LAT_SECONDS=${BENCH_RELAY_SECONDS:-10}
SQL_POLL_MS=${BENCH_RELAY_SQL_POLL_MS:-200}
bench_flavours "${PF_BENCH_RELAY_PGPORT:-54349}" "${PF_BENCH_RELAY_SQL_PGPORT:-54348}" bench-relay

bench_build
make -s -C workers >/dev/null

work=$(mktemp -d /tmp/payflow-bench-relay.XXXXXX)
export PAYFLOW_EMULATOR_PORT=${BENCH_RELAY_EMULATOR_PORT:-4630}
export PAYFLOW_EMULATOR_BACKEND_PORT=$((PAYFLOW_EMULATOR_PORT + 1))
export PAYFLOW_EMULATOR_RUN_DIR=$work/emulator
relay_pid=
destroy_clusters() {
	local f
	for f in $BENCH_FLAVOURS; do
		bench_use "$f"
		pf_cluster_destroy
	done
}
cleanup() {
	[ -z "$relay_pid" ] || kill -KILL "$relay_pid" 2>/dev/null || true
	[ -z "${PSQL_PID:-}" ] || kill "$PSQL_PID" 2>/dev/null || true
	test/emulator/stop.sh >/dev/null 2>&1 || true
	destroy_clusters
	rm -rf "$work"
}
trap cleanup EXIT

destroy_clusters
for f in $BENCH_FLAVOURS; do
	bench_use "$f"
	pf_cluster_start
done
# use FLAVOUR: psql, pgbench and the relay go to that flavour's cluster
use() {
	bench_use "$1"
	export PAYFLOW_DATABASE_URL="host=$PGHOST port=$PGPORT user=$PGUSER dbname=$PGDATABASE"
}
use c
q() { pf_psql -Atq "$@"; }
eval "$(test/emulator/start.sh 2>"$work/emulator-start.log")"
[ -n "${PAYFLOW_QUEUE_URLS:-}" ] || { cat "$work/emulator-start.log"; exit 1; }
export PAYFLOW_LOG_LEVEL=warn
queue=$(tr ',' '\n' <<<"$PAYFLOW_QUEUE_URLS" | sed -n 's|^payment-requests=||p')

# The baseline sender and the latency reader: a small C program on the same
# library as the relay.
cat >"$work/relay_bench.c" <<'C'
/*
 * relay_bench send QUEUE_URL EVENTS IN_FLIGHT
 *		SendMessageBatch calls of ten, IN_FLIGHT at once, bodies shaped like
 *		payflow's events; prints events/s and its own CPU ms.
 * relay_bench purge QUEUE_URL
 * relay_bench read QUEUE_URL EVENTS IDLE_MS
 *		Long polls (four at once), deletes what it got; one line per message:
 *		"<arrival ms> <createdAt ms> <SentTimestamp ms>" (epoch), until EVENTS
 *		arrived or nothing did for IDLE_MS.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>

#include "payflow/aws_client.h"
#include "payflow/aws_credentials.h"
#include "payflow/backoff.h"
#include "payflow/config.h"
#include "payflow/sqs.h"

static pf_sqs *sqs;

static int64_t
wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int
send_events(const char *url, int total, int in_flight)
{
	static char bodies[10][600];
	static char ops[10][40];
	static char ids[10][4];
	int			next = 0, done = 0, running = 0, failed = 0;
	int64_t		start = pf_now_ms();
	pf_error	err;

	while (done < total)
	{
		pf_aws_call *call;

		while (running < in_flight && next < total)
		{
			pf_sqs_send_entry e[10];
			pf_sqs_attribute attrs[10][3];
			int			n = total - next < 10 ? total - next : 10;

			for (int i = 0; i < n; i++, next++)
			{
				snprintf(ops[i], sizeof(ops[i]), "pay_01BENCH0000000000%010d", next);
				snprintf(bodies[i], sizeof(bodies[i]),
						 "{\"attempt\": 1, \"eventId\": \"00000000-0000-4000-8000-%012d\", \"payload\": "
						 "{\"key\": \"payments/%s/request.json\", \"size\": 40, \"store\": \"pg\", \"checksum\": "
						 "\"sha256:8c37069c637bad186ef9d155641606edfec0f1336759fe8ecee8bbeadac07ad7\"}, "
						 "\"createdAt\": \"2026-11-29T22:22:08.876Z\", \"eventType\": \"PaymentRequested\", "
						 "\"paymentId\": \"bench-%d\", \"operationId\": \"%s\", \"eventVersion\": 1, "
						 "\"correlationId\": \"corr-%d\"}", next, ops[i], next, ops[i], next);
				snprintf(ids[i], sizeof(ids[i]), "%d", i);
				attrs[i][0] = (pf_sqs_attribute) {"eventType", "PaymentRequested"};
				attrs[i][1] = (pf_sqs_attribute) {"operationId", ops[i]};
				attrs[i][2] = (pf_sqs_attribute) {"correlationId", ops[i]};
				memset(&e[i], 0, sizeof(e[i]));
				e[i].id = ids[i];
				e[i].body = bodies[i];
				e[i].group_id = ops[i];
				e[i].dedup_id = ops[i];
				e[i].attributes = attrs[i];
				e[i].n_attributes = 3;
			}
			if (pf_sqs_send_message_batch_start(sqs, url, e, n, (void *) (intptr_t) n, &err) == NULL)
			{
				fprintf(stderr, "relay_bench: %s\n", err.message);
				return 1;
			}
			running++;
		}
		if ((call = pf_sqs_wait(sqs, 1000, -1)) != NULL)
		{
			int			n = (int) (intptr_t) pf_sqs_call_user(call);
			pf_sqs_batch_result res;

			if (pf_sqs_send_message_batch_finish(call, &res, &err) != PF_OK)
				failed += n;
			else
			{
				failed += res.n_failed;
				pf_sqs_batch_result_free(&res);
			}
			done += n;
			running--;
		}
	}
	{
		struct rusage ru;

		/* events/s, and this process's CPU ms (user + system) */
		getrusage(RUSAGE_SELF, &ru);
		printf("%.0f %.1f\n", total * 1000.0 / (double) (pf_now_ms() - start + 1),
			   (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000.0 +
			   (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1000.0);
	}
	if (failed)
		fprintf(stderr, "relay_bench: %d entries failed\n", failed);
	return failed ? 1 : 0;
}

static int64_t
iso_ms(const char *text)
{
	struct tm	tm;
	int			ms = 0;

	memset(&tm, 0, sizeof(tm));
	if (text == NULL || sscanf(text, "%d-%d-%dT%d:%d:%d.%dZ", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
							   &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &ms) < 6)
		return 0;
	tm.tm_year -= 1900;
	tm.tm_mon -= 1;
	return (int64_t) timegm(&tm) * 1000 + ms;
}

static void
start_receive(const char *url)
{
	pf_sqs_receive_options opts = {10, 1, 60};

	pf_sqs_receive_message_start(sqs, url, &opts, NULL);
}

static int
read_events(const char *url, int total, int idle_ms)
{
	int			got = 0;
	int64_t		last = pf_now_ms();
	pf_error	err;

	for (int i = 0; i < 4; i++)
		start_receive(url);
	while (got < total && pf_now_ms() - last < idle_ms)
	{
		pf_aws_call *call = pf_sqs_wait(sqs, 200, -1);
		pf_sqs_messages msgs;
		int64_t		arrival;
		json_t	   *entries;

		if (call == NULL)
			continue;
		if (strcmp(pf_sqs_call_action(call), "ReceiveMessage") != 0)
		{
			pf_sqs_finish(call, NULL, NULL);
			continue;
		}
		arrival = wall_ms();
		if (pf_sqs_receive_message_finish(call, &msgs, &err) != PF_OK)
		{
			fprintf(stderr, "relay_bench: receive: %s %s\n", err.code, err.message);
			pf_sleep_ms(100);
		}
		entries = json_array();
		for (int i = 0; i < msgs.n; i++)
		{
			json_t	   *body = json_loads(msgs.items[i].body, 0, NULL);
			const char *sent = json_string_value(json_object_get(msgs.items[i].system_attributes, "SentTimestamp"));
			char		id[16];

			printf("%lld %lld %lld\n", (long long) arrival,
				   (long long) iso_ms(json_string_value(json_object_get(body, "createdAt"))),
				   sent ? atoll(sent) : 0LL);
			json_decref(body);
			snprintf(id, sizeof(id), "m%d", i);
			json_array_append_new(entries, json_pack("{s:s,s:s}", "Id", id,
													 "ReceiptHandle", msgs.items[i].receipt_handle));
		}
		if (msgs.n > 0)
		{
			pf_sqs_start(sqs, "DeleteMessageBatch", json_pack("{s:s,s:o}", "QueueUrl", url, "Entries", entries), NULL);
			got += msgs.n;
			last = pf_now_ms();
		}
		else
			json_decref(entries);
		pf_sqs_messages_free(&msgs);
		start_receive(url);
	}
	fflush(stdout);
	return 0;
}

int
main(int argc, char **argv)
{
	pf_config	cfg;
	char		error[512];
	pf_error	err;
	pf_aws_credentials_provider *creds;
	pf_aws_client *aws;

	if (argc < 3 || (strcmp(argv[1], "purge") != 0 && argc != 5))
	{
		fprintf(stderr, "usage: relay_bench send|read QUEUE_URL EVENTS IN_FLIGHT|IDLE_MS, relay_bench purge QUEUE_URL\n");
		return 2;
	}
	if (!pf_config_load(&cfg, 0, error, sizeof(error)))
	{
		fprintf(stderr, "relay_bench: %s\n", error);
		return 2;
	}
	pf_log_init("relay_bench", PF_LOG_WARN);
	if ((creds = pf_aws_credentials_provider_create(&cfg, &err)) == NULL)
	{
		fprintf(stderr, "relay_bench: %s\n", err.message);
		return 2;
	}
	aws = pf_aws_client_create(&cfg, creds);
	sqs = pf_sqs_create(aws, &cfg);
	if (strcmp(argv[1], "purge") == 0)
	{
		pf_aws_call *call = pf_sqs_start(sqs, "PurgeQueue", json_pack("{s:s}", "QueueUrl", argv[2]), NULL);

		pf_aws_perform(aws, call);
		return pf_sqs_finish(call, NULL, NULL) == PF_OK ? 0 : 1;
	}
	if (strcmp(argv[1], "send") == 0)
		return send_events(argv[2], atoi(argv[3]), atoi(argv[4]));
	return read_events(argv[2], atoi(argv[3]), atoi(argv[4]));
}
C
(
	cd workers
	# shellcheck disable=SC2046
	cc -std=c11 -D_GNU_SOURCE -O2 -Wall -Werror -Iinclude -I"$(pg_config --includedir)" \
		$(pkg-config --cflags libcurl jansson) -o "$work/relay_bench" "$work/relay_bench.c" \
		build/libpayflow-edge.a -lpq $(pkg-config --libs libcurl jansson libcrypto) -lm
)

bench=$work/relay_bench

# One psql session polls the outbox (a process per poll would cost more CPU
# than the relay); each query is its own transaction, so no snapshot holds
# back vacuum while the relay deletes rows.  relay_round points it at the
# flavour's cluster (\connect) when that changes.
coproc PSQL { pf_psql -Atq -c "SET enable_seqscan = off" -f - 2>&1; }
psql_port=$PGPORT
outbox_rows() {
	echo "SELECT count(*) FROM payflow.outbox;" >&"${PSQL[1]}"
	read -r line <&"${PSQL[0]}"
	echo "$line"
}
# The poll while the relay drains: "t" once the outbox is empty.  The
# first live row by outbox_seq_idx (the acked rows' entries are marked dead
# as the scan passes them), not count(*): a count reads every page of the
# outbox, ~3 ms at 10,000 rows, and every 10 ms that cost the cluster
# 23 µs per event, a third of what the relay itself was charged.
outbox_empty() {
	echo "SELECT (SELECT seq FROM payflow.outbox WHERE seq > 0 ORDER BY seq LIMIT 1) IS NULL;" >&"${PSQL[1]}"
	read -r line <&"${PSQL[0]}"
	echo "$line"
}

# relay_round FLAVOUR IN_FLIGHT: submit EVENTS, time the relay draining
# them; events/s in $round_rate (no subshell: the psql session's connection
# is kept)
relay_round() {
	local t0 t1 n
	use "$1"
	if [ "$psql_port" != "$PGPORT" ]; then
		echo "\\connect '$PAYFLOW_DATABASE_URL'" >&"${PSQL[1]}"
		echo "SET enable_seqscan = off;" >&"${PSQL[1]}"
		psql_port=$PGPORT
	fi
	q -c "SELECT count(payflow.submit('bench-$RANDOM$RANDOM-' || g, jsonb_build_object('amount', g, 'currency', 'EUR'),
										 correlation_id => 'corr-' || g))
			FROM generate_series(1, $EVENTS) g" >/dev/null
	# what autovacuum would have done by now
	q -c "VACUUM ANALYZE payflow.outbox"
	n=$(outbox_rows)
	cost_watch_emulator
	cost_begin
	t0=$EPOCHREALTIME
	PAYFLOW_RELAY_IN_FLIGHT=$2 workers/bin/payflow-relay 2>>"$work/relay.log" &
	relay_pid=$!
	while [ "$(outbox_empty)" != t ]; do sleep 0.01; done
	t1=$EPOCHREALTIME
	# the relay and its backend still up, so each is read apart
	relay_ticks=$(awk '{ print $14 + $15 }' "/proc/$relay_pid/stat")
	COST_KEEP_BACKENDS=1 cost_end "$1.$2" "$n"
	kill -TERM "$relay_pid"
	wait "$relay_pid" || echo "relay exited with $?" >&2
	relay_pid=
	awk -v t="$relay_ticks" -v hz="$COST_HZ" -v n="$n" 'BEGIN { printf "%.4f\n", t * 1000 / hz / n }' \
		>>"$COST_DIR/$1.$2/proc_client"
	"$bench" purge "$queue"
	round_rate=$(awk -v n="$n" -v a="$t0" -v b="$t1" 'BEGIN { printf "%.0f\n", n / (b - a) }')
}

# the emulator's two processes, whose CPU each round reports per event
cost_watch_emulator() {
	cost_watch fauxqs "$(cat "$PAYFLOW_EMULATOR_RUN_DIR/fauxqs.pid")"
	cost_watch sigv4-front "$(cat "$PAYFLOW_EMULATOR_RUN_DIR/front.pid")"
}

# baseline_round IN_FLIGHT: events/s in $round_rate
baseline_round() {
	local out
	use c
	cost_watch_emulator
	cost_begin
	out=$("$bench" send "$queue" "$EVENTS" "$1")
	cost_end "base.$1" "$EVENTS"
	awk -v ms="${out#* }" -v n="$EVENTS" 'BEGIN { printf "%.4f\n", ms / n }' >>"$COST_DIR/base.$1/proc_client"
	round_rate=${out% *}
	"$bench" purge "$queue"
}

# cpu_row LABEL KEY: CPU µs per event by process, medians of the rounds
cpu_row() {
	local key=$1
	us() { awk -v v="$(cost_med "$key" "$1")" 'BEGIN { if (v == "-") print "-"; else printf "%.0f", v * 1000 }'; }
	printf "%-34s %9s %9s %9s %9s %9s %9s\n" "$2" "$(us proc_client)" "$(us client_payflow-relay)" \
		"$(awk -v a="$(cost_med "$key" pg_ms)" -v b="$(cost_med "$key" client_payflow-relay)" \
			'BEGIN { if (b == "-") b = 0; printf "%.0f", (a - b) * 1000 }')" \
		"$(us proc_sigv4-front)" "$(us proc_fauxqs)" \
		"$(for f in proc_client pg_ms proc_sigv4-front proc_fauxqs; do cost_med "$key" "$f"; done |
			awk '$1 != "-" { t += $1 } END { printf "%.0f", t * 1000 }')"
}

# warm up node's JIT, the connections and the caches, untimed
"$bench" send "$queue" 3000 4 >/dev/null
"$bench" purge "$queue"
# cost.sh's rounds, gone with the rest
COST_DIR=$work/cost
mkdir -p "$COST_DIR"
EVENTS_SAVED=$EVENTS
EVENTS=3000
for f in $BENCH_FLAVOURS; do relay_round "$f" 4; done
rm -rf "${COST_DIR:?}"/*
EVENTS=$EVENTS_SAVED
use c

echo "payflow-relay bench: $EVENTS events per round, $ROUNDS rounds, medians; $(nproc) cores"
echo "(fauxqs behind the SigV4-checking front; PostgreSQL $(q -c 'SHOW server_version'), synchronous_commit=$(q -c 'SHOW synchronous_commit'))"
echo
printf "%-52s %9s %10s %7s\n" "outbox -> SQS" "in flight" "events/s" "ratio"
declare -A relay relay_rounds
for k in $IN_FLIGHT; do
	base=""
	for f in $BENCH_FLAVOURS; do relay[$f]=""; done
	for round in $(seq 1 "$ROUNDS"); do
		# interleaved, so a noisy neighbour hits all alike
		baseline_round "$k"
		base+="$round_rate "
		for f in $(bench_order "$round"); do
			relay_round "$f" "$k"
			relay[$f]+="$round_rate "
		done
	done
	base=$(bench_med "$base")
	printf "%-52s %9s %10.0f %7s\n" "plain SendMessageBatch loop (baseline)" "$k" "$base" "1.00"
	for f in $BENCH_FLAVOURS; do
		r=$(bench_med "${relay[$f]}")
		relay_rounds[$f.$k]=${relay[$f]}
		label="payflow-relay (claim, send, ack)"
		[ "$f" = c ] || label="payflow-relay, $(bench_label "$f") flavour"
		printf "%-52s %9s %10.0f %7s\n" "$label" "$k" "$r" "$(bench_ratio "$r" "$base")"
	done
done
echo
echo "CPU µs per event by process (medians; the 2 cores are shared by all of them):"
printf "%-34s %9s %9s %9s %9s %9s %9s\n" "" "sender" "its PG" "other PG" "SQS front" "fauxqs" "total"
for k in $IN_FLIGHT; do
	cpu_row "base.$k" "plain loop, $k in flight"
	for f in $BENCH_FLAVOURS; do
		cpu_row "$f.$k" "payflow-relay $(bench_label "$f"), $k in flight"
	done
done
echo "  sender: the loop or payflow-relay; its PG: the relay's backend; other PG: the rest of"
echo "  the cluster (the bench's outbox poll, the scheduler, autovacuum, ...); per process:"
for k in $IN_FLIGHT; do
	for f in $BENCH_FLAVOURS; do
		echo " payflow-relay $(bench_label "$f"), $k in flight (ms per event):"
		cost_detail "$f.$k" | grep -v "^  SQS calls"
	done
done

# latency at a steady rate: pgbench paces the submits, the reader deletes as
# it goes so the queue stays shallow
cat >"$work/submit.sql" <<'SQL'
\set n random(1, 2000000000)
SELECT payflow.submit('lat-' || :client_id || '-' || :n, '{"amount": 1250, "currency": "EUR"}');
SQL
# the outbox has churned through the rounds above
for f in $BENCH_FLAVOURS; do
	use "$f"
	q -c "VACUUM ANALYZE payflow.outbox"
done
# latency_round FLAVOUR [POLL_MS]: "messages reader-p50 p95 p99 sqs-p50 p95 p99"
latency_round() {
	local expected=$((RATE * LAT_SECONDS)) poll=()
	use "$1"
	[ -z "${2:-}" ] || poll=(PAYFLOW_POLL_INTERVAL_MS="$2")
	env "${poll[@]}" PAYFLOW_RELAY_IN_FLIGHT=4 workers/bin/payflow-relay 2>>"$work/relay.log" &
	relay_pid=$!
	sleep 1
	"$bench" read "$queue" "$expected" 5000 >"$work/arrivals.txt" &
	local reader=$!
	"$PF_PGBIN/pgbench" -n -c 2 -j 2 -R "$RATE" -T "$LAT_SECONDS" -f "$work/submit.sql" "$PF_DB" >/dev/null 2>&1
	wait "$reader" || true
	kill -TERM "$relay_pid"
	wait "$relay_pid" || echo "relay exited with $?" >&2
	relay_pid=
	"$bench" purge "$queue"
	# arrival - created_at, and SentTimestamp - created_at
	awk '{ print $1 - $2 }' "$work/arrivals.txt" | sort -n >"$work/reader.txt"
	awk '$3 > 0 { print $3 - $2 }' "$work/arrivals.txt" | sort -n >"$work/queue.txt"
	echo "$(wc -l <"$work/reader.txt") $(for t in reader queue; do for p in 50 95 99; do
		printf '%s ' "$(bench_pct $p "$work/$t.txt")"; done; done)"
}
# the variants: each flavour with the relay's default poll, and the C-free
# flavour once more with a shorter poll
variants=$BENCH_FLAVOURS
! bench_has sql || [ -z "$SQL_POLL_MS" ] || variants+=" sql-poll"
declare -A lat
for round in $(seq 1 "$ROUNDS"); do
	for v in $(bench_rotate "$round" $variants); do
		case $v in
			sql-poll) line=$(latency_round sql "$SQL_POLL_MS") ;;
			*) line=$(latency_round "$v") ;;
		esac
		read -r c a50 a95 a99 q50 q95 q99 <<<"$line"
		lat[$v.count]+="$c "
		for x in a50 a95 a99 q50 q95 q99; do lat[$v.$x]+="${!x} "; done
	done
done
echo
variant_label() {
	case $1 in
		c) echo C ;;
		sql) echo "C-free, relay poll 1000 ms (its default)" ;;
		sql-poll) echo "C-free, relay poll $SQL_POLL_MS ms" ;;
	esac
}
echo "commit-to-queue latency, $RATE submits/s for ${LAT_SECONDS}s (messages per round: $(for v in $variants; do
	printf '%s %s; ' "$(variant_label "$v" | sed 's/ (its default)//; s/, relay poll 1000 ms//')" "${lat[$v.count]% }"; done | sed 's/; $//'))"
printf "%-52s %9s %10s %10s\n" "" "p50 ms" "p95 ms" "p99 ms"
lat_rows() {
	local v=$1 indent=$2
	printf "%-52s %9s %10s %10s\n" "${indent}arrival at a reader - outbox created_at" \
		"$(bench_med "${lat[$v.a50]}")" "$(bench_med "${lat[$v.a95]}")" "$(bench_med "${lat[$v.a99]}")"
	printf "%-52s %9s %10s %10s\n" "${indent}accepted by SQS (SentTimestamp) - created_at" \
		"$(bench_med "${lat[$v.q50]}")" "$(bench_med "${lat[$v.q95]}")" "$(bench_med "${lat[$v.q99]}")"
}
lat_rows c ""
for v in $variants; do
	[ "$v" != c ] || continue
	echo "$(variant_label "$v"):"
	lat_rows "$v" "  "
done
echo
echo "aims: relay >= 0.8 of the baseline; latency p50 < 10 ms"
bench_result c.relay_sqs_p50 "${lat[c.q50]}"
bench_result c.relay_sqs_p95 "${lat[c.q95]}"
if bench_has sql; then
	echo
	bench_compare_header "C-free flavour vs C"
	for k in $IN_FLIGHT; do
		bench_compare_row "relay throughput, $k in flight, events/s" "${relay_rounds[c.$k]}" "${relay_rounds[sql.$k]}"
	done
	for p in 50 95; do
		bench_compare_row "commit -> SQS (SentTimestamp) p$p, ms" "${lat[c.q$p]}" "${lat[sql.q$p]}" %.0f -
		bench_result sql.relay_sqs_p$p "${lat[sql.q$p]}"
	done
fi
