#!/bin/bash
# The soak / fault runner: the whole pipeline (PostgreSQL with payflow and
# pg_cron, the SQS emulator, the legacy DBMS fixture, the invoice API
# stand-in, the relay and one worker per role) under a steady stream of
# submissions, while faults are injected at moments drawn from the seed:
#
#   kill -9 of the relay and of each worker role (restarted after a while);
#   PostgreSQL stopped with -m immediate and started again; the emulator
#   stopped and started (it is in memory: every queued message is lost, and
#   the scheduler's stuck-step recovery must re-drive those operations);
#   the legacy DBMS slow, timing out (before or after charging), failing
#   transiently, dropping the connection, declining a card; the invoice API
#   answering 429/503, timing out or dropping the connection (before or
#   after creating the invoice); copies of published events and poison
#   messages sent straight to the queues.
#
# Purge runs during the load (pg_cron every minute, the runner every 10 s,
# short retentions) so that table sizes level off.  Then it waits until
# every operation is terminal and the queues are quiet, purges once more,
# checks the invariants (invariants.sql) and prints the report
# (report.sql).  A broken invariant fails the run, printing the seed and
# the operations concerned.
#
#   test/soak/run.sh --seed 42 --minutes 5 [--rate 5] [--no-build]
#   make soak SEED=42 MINUTES=30
#
# Environment: SOAK_PGPORT (54541), SOAK_CLUSTER_DIR (/tmp/pf-soak-cluster-<port>),
# SOAK_EMULATOR_PORT (4910; the back end takes the next port), SOAK_INVOICE_PORT
# (4912), SOAK_DIR (/tmp/pf-soak-run-<port>: logs, kept after the run),
# SOAK_RATE (5), SOAK_DRAIN_SECONDS (240), SOAK_KEEP_CLUSTER=1 (leave the
# cluster for a look).  test/integration/soak_short.sh (make check) uses
# other ports, so the two never collide.
set -euo pipefail
cd "$(dirname "$0")/../.."

usage() {
	echo "usage: test/soak/run.sh --seed N --minutes M [--rate OPS_PER_S] [--no-build]" >&2
	exit "$1"
}

SOAK_SEED=
MINUTES=
RATE=${SOAK_RATE:-5}
BUILD=1
while [ $# -gt 0 ]; do
	case $1 in
		--seed) SOAK_SEED=${2:-}; shift 2 || usage 2 ;;
		--minutes) MINUTES=${2:-}; shift 2 || usage 2 ;;
		--rate) RATE=${2:-}; shift 2 || usage 2 ;;
		--no-build) BUILD=0; shift ;;
		-h | --help) usage 0 ;;
		*) echo "soak: unknown argument '$1'" >&2; usage 2 ;;
	esac
done
[[ $SOAK_SEED =~ ^[0-9]{1,18}$ ]] || { echo "soak: --seed must be a non-negative integer" >&2; usage 2; }
[[ $MINUTES =~ ^[0-9]+(\.[0-9]+)?$ ]] || { echo "soak: --minutes must be a number" >&2; usage 2; }
[[ $RATE =~ ^[1-9][0-9]{0,3}$ ]] || { echo "soak: --rate must be an integer from 1 to 9999" >&2; usage 2; }
DURATION_S=$(awk -v m="$MINUTES" 'BEGIN { printf "%d", m * 60 }')
[ "$DURATION_S" -ge 30 ] || { echo "soak: --minutes must be at least 0.5" >&2; usage 2; }

export PF_PGPORT=${SOAK_PGPORT:-54541}
export PF_CLUSTER_DIR=${SOAK_CLUSTER_DIR:-/tmp/pf-soak-cluster-$PF_PGPORT}
SOAK_EMULATOR_PORT=${SOAK_EMULATOR_PORT:-4910}
SOAK_INVOICE_PORT=${SOAK_INVOICE_PORT:-4912}
SOAK_DIR=${SOAK_DIR:-/tmp/pf-soak-run-$PF_PGPORT}
DRAIN_S=${SOAK_DRAIN_SECONDS:-240}

source test/lib/cluster.sh
source test/lib/assert.sh
source test/lib/proc.sh
for f in prng plan stack faults load sampler collect; do
	# shellcheck source=/dev/null  # each test/soak/*.bash is linted on its own
	source "test/soak/$f.bash"
done

if [ "$BUILD" = 1 ]; then
	source test/lib/deps.sh
	pf_install_deps
	make -s >/dev/null && make -s install >/dev/null
	# only the programs the soak runs: an unrelated one that does not build
	# must not stop it
	make -s -C workers bin/payflow-worker bin/payflow-relay >/dev/null
fi

rm -rf "$SOAK_DIR"
mkdir -p "$SOAK_DIR"
BG_PIDS=()
on_exit() {
	local pid
	touch "$SOAK_DIR/stop-load" "$SOAK_DIR/stop-sampler"
	for pid in "${BG_PIDS[@]}"; do
		pf_kill_ours TERM "$pid"
		wait "$pid" 2>/dev/null || true
	done
	soak_stack_down
}
trap on_exit EXIT

say() { printf '# %s\n' "$*"; }
q() { pf_psql -Atq "$@"; }

say "soak: seed $SOAK_SEED, $MINUTES min of load ($DURATION_S s) at $RATE operations/s;" \
	"PostgreSQL $PF_PGPORT, emulator $SOAK_EMULATOR_PORT, invoice API $SOAK_INVOICE_PORT; logs in $SOAK_DIR"
soak_seed "$SOAK_SEED"
soak_plan "$DURATION_S" "$SOAK_DIR/plan.tsv"
say "fault plan: $(wc -l <"$SOAK_DIR/plan.tsv") faults: $(cut -f2 "$SOAK_DIR/plan.tsv" | sort | uniq -c |
	awk '{ printf "%s%s %d", sep, $2, $1; sep = ", " }')"

soak_stack_up
say "stack up: relay and workers running"

soak_load "$RATE" &
BG_PIDS+=($!)
LOAD_PID=$!
soak_sampler 5 10 &
BG_PIDS+=($!)
SAMPLER_PID=$!

# ---- the load phase: the plan's faults at their moments ----
progress() {
	say "$1 $(q -c "
		SELECT 'submitted ' || (SELECT count(*) FROM soak.submitted) || ', ' ||
			   coalesce((SELECT string_agg(to_status || ' ' || n, ', ' ORDER BY to_status)
						   FROM (SELECT to_status, count(*) n FROM soak.transitions
								  WHERE to_status IN ('COMPLETED', 'FAILED') GROUP BY 1) x), 'none terminal')" 2>/dev/null ||
		echo '(database unreachable)')"
}
soak_now_ms
LOAD_START_MS=$SOAK_NOW
exec 3<"$SOAK_DIR/plan.tsv"
next_at='' next_kind='' next_args=''
IFS=$'\t' read -r next_at next_kind next_args <&3 || next_at=
next_progress=15
while :; do
	soak_now_ms
	elapsed=$((SOAK_NOW - LOAD_START_MS))
	[ "$elapsed" -lt $((DURATION_S * 1000)) ] || break
	while [ -n "$next_at" ] && [ "$next_at" -le "$elapsed" ]; do
		say "$(printf '+%5.1fs' "$(awk -v ms="$elapsed" 'BEGIN { print ms / 1000 }')") fault $next_kind $next_args"
		soak_inject "$next_kind" "$next_args"
		IFS=$'\t' read -r next_at next_kind next_args <&3 || next_at=
		soak_now_ms
		elapsed=$((SOAK_NOW - LOAD_START_MS))
	done
	soak_supervise
	if [ "$elapsed" -ge $((next_progress * 1000)) ]; then
		progress "+${next_progress}s"
		next_progress=$((next_progress + 15))
	fi
	sleep 0.2
done
exec 3<&-
touch "$SOAK_DIR/stop-load"
wait "$LOAD_PID" || true
soak_now_ms
LOAD_END_MS=$SOAK_NOW
say "load stopped after $(((LOAD_END_MS - LOAD_START_MS) / 1000)) s: $(cat "$SOAK_DIR/submitted.count" 2>/dev/null) operations submitted"

# ---- quiescence ----
# Armed faults that have not fired yet are disarmed: the drain measures
# recovery, not further faults.
pf_psql -d legacy -Atqc "SELECT clear_faults()" >/dev/null || true
curl -fsS -X DELETE "http://127.0.0.1:$SOAK_INVOICE_PORT/_faults" >/dev/null || true
soak_collect_runner_files

open_work() {
	q -c "
		SELECT (SELECT count(*) FROM soak.submitted s
				 WHERE NOT EXISTS (SELECT FROM soak.transitions t WHERE t.operation_id = s.operation_id
									  AND t.to_status IN ('COMPLETED', 'FAILED', 'CANCELLED')))
			 + (SELECT count(*) FROM payflow.outbox)
			 + (SELECT count(*) FROM soak.poison p
				 WHERE NOT EXISTS (SELECT FROM soak.dead_letters d WHERE position(p.marker IN d.message_body) > 0)
				   AND NOT EXISTS (SELECT FROM soak.faults e WHERE e.kind = 'emulator-restart'
																AND e.started_at > p.sent_at))" 2>/dev/null || echo unknown
}
deadline=$((SECONDS + DRAIN_S))
next_progress=$((SECONDS + 15))
while :; do
	soak_supervise
	open=$(open_work)
	if [ "$open" = 0 ]; then
		queued=$(soak_queued)
		[ "${queued:-1}" = 0 ] && break
		open="0 (and $queued messages in the work queues)"
	fi
	[ $SECONDS -lt $deadline ] || { say "not quiet after ${DRAIN_S}s: $open open"; break; }
	if [ $SECONDS -ge $next_progress ]; then
		progress "draining ($open open):"
		next_progress=$((SECONDS + 15))
	fi
	sleep 1
done
soak_now_ms
[ "$open" != 0 ] || say "quiet $(((SOAK_NOW - LOAD_END_MS) / 1000)) s after the load stopped"

# ---- the last purge: everything past its retention goes ----
sleep "$(($(q -c "SELECT extract(epoch FROM current_setting('payflow.retention_payloads')::interval)::int") + 1))"
for _ in $(seq 1 50); do
	q -c "SELECT (payflow.purge() ->> 'more')::boolean" | grep -q t || break
done
soak_sample_sizes
touch "$SOAK_DIR/stop-sampler"
wait "$SAMPLER_PID" || true

soak_collect

# ---- invariants and report ----
q -v ON_ERROR_STOP=1 -F $'\t' -f test/soak/invariants.sql >"$SOAK_DIR/invariants.tsv"
echo
say "invariants"
violations=0
while IFS=$'\t' read -r name count ids; do
	if [ "$count" = 0 ]; then
		echo "ok - $name"
	else
		echo "not ok - $name: $count (seed $SOAK_SEED): $ids"
		violations=$((violations + 1))
	fi
done <"$SOAK_DIR/invariants.tsv"
queued=$(soak_queued)
if [ "${queued:-1}" = 0 ]; then echo "ok - work queues empty"; else
	echo "not ok - work queues hold ${queued:-?} messages (seed $SOAK_SEED)"
	violations=$((violations + 1))
fi
legacy_dups=$(pf_psql -d legacy -Atqc "SELECT count(*) FROM duplicate_charges()")
if [ "$legacy_dups" = 0 ]; then echo "ok - the legacy fixture's duplicate_charges() is empty"; else
	echo "not ok - duplicate_charges() lists $legacy_dups (seed $SOAK_SEED)"
	violations=$((violations + 1))
fi

pf_psql -X -q -v seed="$SOAK_SEED" -v load_start="$((LOAD_START_MS / 1000))" -v load_end="$((LOAD_END_MS / 1000))" \
	-f test/soak/report.sql
echo
say "legacy calls: $(pf_psql -d legacy -Atqc "SELECT string_agg(fn || ' ' || outcome || coalesce(' ' || sqlstate, '') || ': ' || n, ', ')
	FROM (SELECT fn, outcome, sqlstate, count(*) n FROM call_log GROUP BY 1, 2, 3 ORDER BY 1, 2, 3) x")"
say "invoice API: $(curl -fsS "http://127.0.0.1:$SOAK_INVOICE_PORT/_stats")"
if [ -s "$SOAK_DIR/unexpected.tsv" ]; then
	say "processes that exited by themselves (restarted): $(cut -f2,3 "$SOAK_DIR/unexpected.tsv" | sort | uniq -c |
		awk '{ printf "%s%s (status %s) x%d", sep, $2, $3, $1; sep = ", " }')"
else
	say "no process exited by itself"
fi

if [ "$violations" -ne 0 ]; then
	echo "soak FAILED: $violations invariant(s) broken; seed $SOAK_SEED (rerun: test/soak/run.sh --seed $SOAK_SEED --minutes $MINUTES --rate $RATE); logs in $SOAK_DIR"
	exit 1
fi
say "soak passed: seed $SOAK_SEED, $MINUTES min, every invariant held"
