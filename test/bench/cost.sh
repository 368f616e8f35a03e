# shellcheck shell=bash
# test/bench/cost.sh — what one operation costs the server, measured around
# a burst of N operations.  Sourced, not run, after test/bench/lib.sh, with
# the cluster to measure selected (bench_use: PF_CLUSTER_DIR, PGHOST, PGPORT,
# PF_DB).
#
#   cost_watch NAME PID...   processes outside the cluster whose CPU is also
#                            reported per operation (relay, workers, SQS
#                            emulator, fixtures, a peer's node process);
#                            NAME's list is replaced, an empty list removes it
#   cost_sqs URL             the emulator's request counters to read
#                            (sigv4-front's GET /_front/calls); "" for none
#   cost_begin               snapshot before the burst
#   cost_end KEY OPS         snapshot after it; adds this window's figures per
#                            operation to KEY's rounds (first waits up to 2 s
#                            for the window's extra backends to end, unless
#                            COST_KEEP_BACKENDS=1)
#   cost_med KEY FIELD       the median of FIELD over KEY's rounds ("-" if none)
#   cost_rounds KEY FIELD    the rounds' values, blank-separated
#   cost_table_header        the table of systems side by side, and a row of
#   cost_table_row LABEL KEY OPS_PER_S_ROUNDS
#                            medians over KEY's rounds
#   cost_detail KEY          where the time goes: PostgreSQL's CPU by kind
#                            of process, each watched process, SQS calls by
#                            action (medians per operation)
#
# What is counted, per operation:
#   PG CPU ms    user + system CPU (/proc/<pid>/stat utime + stime, in
#                getconf CLK_TCK ticks) of every process of the cluster: the
#                postmaster, each of its children alive at either snapshot
#                (backends, background workers such as payflow's scheduler,
#                autovacuum, walwriter, checkpointer, background writer), and
#                those that exited in between (the postmaster's cutime +
#                cstime, less what they had used before the first snapshot).
#                Clients (psql, pgbench, node, the edge processes) are not
#                children of the postmaster and are not counted; the
#                backends serving them are.  The legacy DBMS fixture's
#                sessions (database "legacy": the stand-in for an external
#                system) are reported apart and not counted.
#   commits      COMMIT records in the WAL of the measured database (PF_DB)
#                between the snapshots: transactions that wrote, each one a
#                WAL flush with synchronous_commit on (read-only ones write
#                none).  Not pg_stat_database.xact_commit: an idle backend
#                reports it up to 10 s late (PGSTAT_IDLE_INTERVAL).
#   WAL KB       pg_current_wal_flush_lsn() difference, less the WAL records
#                pg_waldump attributes to another database (the legacy
#                fixture's): by the relation a record touches, else by its
#                transaction (and subtransactions).
#   statements   pg_stat_statements calls in PF_DB (with track = all: also
#                the statements inside functions), when it is loaded
#   SQS calls    requests the emulator's front forwarded (COST_SQS_URL),
#                every action, S3 not included
# The snapshots' own psql session (a backend, some 2 ms of CPU for a burst)
# falls in the window.
#
# COST_DIR holds the rounds (a directory of its own, made on first use).

COST_HZ=$(getconf CLK_TCK)
declare -A COST_WATCH=()
COST_SQS_URL=${COST_SQS_URL:-}

cost_watch() {
	local name=$1
	shift
	if [ $# -eq 0 ]; then
		unset "COST_WATCH[$name]"
	else
		COST_WATCH[$name]="$*"
	fi
}

cost_sqs() { COST_SQS_URL=$1; }

# the rounds' directory, made by the first cost_begin (the caller removes it)
COST_DIR=${COST_DIR:-}

# "pid ticks class" for the postmaster and each child; "exited ticks" for
# what reaped children used (cumulative).  The postmaster first: a child
# reaped after that and before its own line is read is missed by one
# snapshot rather than counted twice.
cost_cpu_lines() {
	local pm
	pm=$(head -n 1 "$PF_CLUSTER_DIR/data/postmaster.pid")
	awk '{ print "exited", $16 + $17; print $1, $14 + $15, "postmaster" }' "/proc/$pm/stat"
	ps -o pid=,args= --ppid "$pm" | awk '
		{ pid = $1; sub(/^ *[0-9]+ /, "") }
		/^postgres: autovacuum worker/ { print pid, "autovacuum"; next }
		/^postgres: [^ ]+ legacy / { print pid, "legacy"; next }
		/^postgres: [^ ]+ [^ ]+ (\[local\]|[0-9.:]+\([0-9]+\)|[0-9.:]+) / { print pid, "backend"; next }
		{ print pid, "background" }' |
		while read -r pid class; do
			# a process gone since ps is in the postmaster's cutime
			awk -v c="$class" '{ print $1, $14 + $15, c }' "/proc/$pid/stat" 2>/dev/null || true
		done
}

cost_watch_lines() {
	local name pid
	for name in "${!COST_WATCH[@]}"; do
		for pid in ${COST_WATCH[$name]}; do
			awk -v n="$name" '{ print n, $14 + $15 }' "/proc/$pid/stat" 2>/dev/null || true
		done
	done
}

# "NAME switches": the context switches of a watched process's threads,
# voluntary (a wait) and not (preempted), summed over /proc/<pid>/task.
# An exact count where CPU time is noisy: a wake-up that finds nothing to
# do costs a switch and the caches it disturbs (the workers' batch queue
# once woke every executor for each request, test/bench/README.md).
cost_switch_lines() {
	local name pid
	for name in "${!COST_WATCH[@]}"; do
		for pid in ${COST_WATCH[$name]}; do
			cat /proc/"$pid"/task/*/status 2>/dev/null |
				awk -v n="$name" '/^(non)?voluntary_ctxt_switches:/ { s += $2 } END { if (NR) print n, s }'
		done
	done
}

# "action count" lines of the emulator's counters
cost_sqs_lines() {
	[ -n "$COST_SQS_URL" ] || return 0
	curl -fsS --max-time 5 "$COST_SQS_URL" | tr -d '{}"' | tr ',' '\n' | awk -F: 'NF == 2 { gsub(/ /, "_", $1); print $1, $2 }'
}

# the WAL position, the database's oid, and pg_stat_statements' calls in it
cost_sql_line() {
	pf_psql -Atq -F ' ' <<-'SQL'
		SELECT to_regclass('pg_stat_statements') IS NOT NULL AS pss \gset
		SELECT pg_current_wal_flush_lsn(), oid,
		\if :pss
			   (SELECT sum(calls) FROM pg_stat_statements s WHERE s.dbid = d.oid)
		\else
			   '-'
		\endif
		  FROM pg_database d WHERE datname = current_database();
		SQL
}

# "pid application_name" of the client backends (blanks made _), so that a
# backend's CPU is told by the client it serves: the relay, each worker
# role ("payflow-worker payment"), the submitting clients
cost_app_lines() {
	pf_psql -Atq -F ' ' -c "SELECT pid, translate(coalesce(nullif(application_name, ''), 'unnamed'), ' /', '__')
							  FROM pg_stat_activity WHERE backend_type = 'client backend'" 2>/dev/null || true
}

cost_snapshot() {
	local out=$1
	{
		cost_app_lines | sed 's/^/app /'
		cost_cpu_lines | sed 's/^/cpu /'
		cost_watch_lines | sed 's/^/watch /'
		cost_switch_lines | sed 's/^/switch /'
		cost_sqs_lines | sed 's/^/sqs /'
	} >"$out"
}

# client backends of the cluster now
cost_backends() {
	ps -o args= --ppid "$(head -n 1 "$PF_CLUSTER_DIR/data/postmaster.pid")" | grep -c '^postgres: [^ ]* [^ ]* \(\[local\]\|[0-9]\)' || true
}

cost_begin() {
	local d
	[ -n "$COST_DIR" ] || COST_DIR=$(mktemp -d /tmp/payflow-bench-cost.XXXXXX)
	d=$COST_DIR
	cost_backends >"$d/backends0"
	cost_snapshot "$d/snap0"
	cost_sql_line >"$d/sql0"
	stat -c %s "$PF_CLUSTER_DIR/postgres.log" >"$d/log0" 2>/dev/null || echo 0 >"$d/log0"
}

# Autovacuum's CPU from the server log, when the cluster logs every run
# (log_autovacuum_min_duration = 0): "db.schema.table runs cpu_seconds"
# lines for the runs logged after byte FROM.  Each run's message names its table and ends
# with "system usage: CPU: user: U s, system: S s" (10 ms resolution): the
# autovacuum workers come and go within a burst, so /proc sees most of them
# only as "exited".
cost_autovacuum_lines() {
	tail -c +"$(($1 + 1))" "$PF_CLUSTER_DIR/postgres.log" 2>/dev/null | awk '
		match($0, /automatic (vacuum|analyze) of table "[^"]+"/) {
			t = substr($0, RSTART, RLENGTH); sub(/^[^"]*"/, "", t); sub(/"$/, "", t); runs[t]++
		}
		t != "" && match($0, /CPU: user: [0-9.]+ s, system: [0-9.]+ s/) {
			split(substr($0, RSTART, RLENGTH), f, " "); cpu[t] += f[3] + f[6]; t = ""
		}
		END { for (x in runs) print x, runs[x], cpu[x] + 0 }'
}

# WAL records between two LSNs: "<bytes of records of other databases> <commits of DB>"
cost_wal() {
	local from=$1 to=$2 db=$3 waldump=$PF_PGBIN/pg_waldump
	[ -x "$waldump" ] || waldump=/usr/lib/postgresql/15/bin/pg_waldump
	"$waldump" -p "$PF_CLUSTER_DIR/data/pg_wal" -s "$from" -e "$to" 2>/dev/null | awk -v db="$db" '
		{
			match($0, /\(rec\/tot\): *[0-9]+\/ *[0-9]+/); split(substr($0, RSTART, RLENGTH), a, "/"); len = a[3] + 0
			match($0, /tx: *[0-9]+/); tx = substr($0, RSTART + 3, RLENGTH - 3) + 0
			rdb = ""
			if (match($0, /rel [0-9]+\/[0-9]+\//)) { split(substr($0, RSTART + 4, RLENGTH - 4), r, "/"); rdb = r[2] }
			else if (match($0, /desc: LOCK xid [0-9]+ db [0-9]+/)) { split(substr($0, RSTART, RLENGTH), r, " "); rdb = r[6] }
			if (rdb == "0") rdb = ""
			if (rdb != "" && tx != 0 && !(tx in txdb)) txdb[tx] = rdb
			n++; bytes[n] = len; recdb[n] = rdb; rectx[n] = tx
			if ($2 == "Transaction" && / desc: COMMIT /) {
				commit[n] = 1
				if (match($0, /subxacts:( [0-9]+)+/)) {
					k = split(substr($0, RSTART + 9, RLENGTH - 9), s, " ")
					for (i = 1; i <= k; i++) sub_of[s[i]] = tx
				}
			}
		}
		END {
			# a subtransaction that wrote tells its top transaction'"'"'s database
			for (t in txdb) if ((t in sub_of) && !(sub_of[t] in txdb)) txdb[sub_of[t]] = txdb[t]
			for (i = 1; i <= n; i++) {
				d = recdb[i]
				if (d == "" && (rectx[i] in txdb)) d = txdb[rectx[i]]
				if (d != "" && d != db) other += bytes[i]
				if (commit[i] && d == db) commits++
			}
			print other + 0, commits + 0
		}'
}

# an LSN (X/Y) as a byte position
cost_lsn() { echo $((16#${1%/*} * 4294967296 + 16#${1#*/})); }

cost_end() {
	local key=$1 ops=$2 d lsn0 lsn1 oid stm0 stm1 other commits
	d=$COST_DIR
	# the burst's own sessions (pgbench's) gone and reaped, so that their
	# CPU is in this window, not the next (2 s at most); not with
	# COST_KEEP_BACKENDS=1, whose caller reads a client's backend still alive
	for _ in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do
		[ "${COST_KEEP_BACKENDS:-0}" = 0 ] && [ "$(cost_backends)" -gt "$(cat "$d/backends0")" ] || break
		sleep 0.1
	done
	cost_sql_line >"$d/sql1"
	cost_snapshot "$d/snap1"
	read -r lsn0 oid stm0 <"$d/sql0"
	read -r lsn1 _ stm1 <"$d/sql1"
	read -r other commits <<<"$(cost_wal "$lsn0" "$lsn1" "$oid")"
	mkdir -p "$d/$key"
	{
		# CPU: each pid alive at the end against its start (0 if new); the
		# exited ones through the postmaster's cutime
		awk -v hz="$COST_HZ" -v ops="$ops" '
			FNR == NR { if ($1 == "cpu") { t0[$2] = $3; c0[$2] = $4 } else if ($1 == "watch") w0[$2] += $3
						else if ($1 == "switch") x0[$2] += $3
						else if ($1 == "sqs") s0[$2] = $3; else if ($1 == "app") app[$2] = $3; next }
			$1 == "app" { app[$2] = $3; next }
			$1 == "cpu" && $2 == "exited" { exited1 = $3; next }
			$1 == "cpu" { v = $3 - ($2 in t0 ? t0[$2] : 0); cls[$4] += v; seen[$2] = 1
						  if ($4 == "backend") bpid[$2] = v; next }
			$1 == "watch" { w1[$2] += $3; next }
			$1 == "switch" { x1[$2] += $3; next }
			$1 == "sqs" { s1[$2] = $3; next }
			END {
				gone = 0
				for (p in t0) if (p != "exited" && !(p in seen)) gone += t0[p]
				cls["exited"] = exited1 - t0["exited"] - gone
				ms = 1000 / hz / ops
				for (c in cls) { printf "pg_%s %.4f\n", c, cls[c] * ms; if (c != "legacy") pg += cls[c] }
				for (p in bpid) by[p in app ? app[p] : "unnamed"] += bpid[p]
				for (a in by) printf "client_%s %.4f\n", a, by[a] * ms
				printf "pg_ms %.4f\n", pg * ms
				for (w in w1) printf "proc_%s %.4f\n", w, (w1[w] - w0[w]) * ms
				for (x in x1) printf "switches_%s %.4f\n", x, (x1[x] - x0[x]) / ops
				for (s in s1) { v = (s1[s] - s0[s]) / ops; printf "sqs_%s %.4f\n", s, v; if (s !~ /^S3_/) sqs += v; any = 1 }
				if (any) printf "sqs %.4f\n", sqs
			}' "$d/snap0" "$d/snap1"
		awk -v bytes="$(($(cost_lsn "$lsn1") - $(cost_lsn "$lsn0")))" -v other="$other" -v commits="$commits" -v ops="$ops" \
			'BEGIN { printf "wal_kb %.4f\nwal_other_kb %.4f\ncommits %.4f\n", (bytes - other) / 1024 / ops, other / 1024 / ops, commits / ops }'
		[ "$stm0" = - ] || awk -v a="$stm0" -v b="$stm1" -v ops="$ops" 'BEGIN { printf "stmts %.4f\n", (b - a) / ops }'
		cost_autovacuum_lines "$(cat "$d/log0")" | awk -v ops="$ops" '
			{ runs += $2; cpu += $3; tables = tables (NR > 1 ? "," : "") $1 }
			END { if (NR) printf "autovac_runs %d\nautovac_ms %.4f\nautovac_tables %s\n", runs, cpu * 1000 / ops, tables }'
	} | while read -r field value; do
		echo "$value" >>"$d/$key/$field"
	done
}

cost_rounds() {
	local f
	f=$COST_DIR/$1/$2
	# shellcheck disable=SC2046  # the figures, newlines made spaces
	[ -s "$f" ] && echo $(cat "$f")
}

cost_med() {
	local f
	f=$COST_DIR/$1/$2
	if [ -s "$f" ]; then bench_median <"$f"; else echo -; fi
}

# a median with a format, or "-"
cost_fmt() {
	local v
	v=$(cost_med "$2" "$3")
	# shellcheck disable=SC2059
	if [ "$v" = - ]; then echo -; else printf "$1" "$v"; fi
}

# The tables autovacuum ran on in a key's rounds: payflow's by name, the
# rest (another system's rounds, the legacy fixture, catalogs) counted; a
# run often lands in the next round's window.
cost_autovacuum_tables() {
	tr ',' '\n' <"$1" | sort -u | awk '
		/^[^.]+\.payflow\./ { sub(/^[^.]+\.payflow\./, ""); ours = ours (ours == "" ? "" : ", ") $0; next }
		{ others++ }
		END { printf "%s%s%d other table(s)", ours, (ours == "" ? "" : "; "), others }'
}

cost_table_header() {
	printf "%-34s %8s %12s %10s %9s %9s %9s\n" "system" "ops/s" "PG CPU ms/op" "commits/op" "WAL KB/op" "SQS/op" "stmts/op"
}

cost_table_row() {
	local label=$1 key=$2 rate
	rate=$(bench_med "$3")
	printf "%-34s %8.0f %12s %10s %9s %9s %9s\n" "$label" "$rate" "$(cost_fmt %.2f "$key" pg_ms)" \
		"$(cost_fmt %.1f "$key" commits)" "$(cost_fmt %.1f "$key" wal_kb)" "$(cost_fmt %.2f "$key" sqs)" "$(cost_fmt %.0f "$key" stmts)"
}

cost_detail() {
	local key=$1 d f line=
	d=$COST_DIR/$key
	for f in backend background autovacuum postmaster exited legacy; do
		[ -s "$d/pg_$f" ] && line+="$f $(cost_fmt %.3f "$key" "pg_$f"), "
	done
	echo "  PostgreSQL CPU ms/op by process: ${line%, }"
	line=
	for f in "$d"/client_*; do
		[ -s "$f" ] && [ "$(cost_fmt %.3f "$key" "${f##*/}")" != 0.000 ] &&
			line+="$(echo "${f##*/client_}" | tr _ ' ') $(cost_fmt %.3f "$key" "${f##*/}"), "
	done
	[ -z "$line" ] || echo "  backends' CPU ms/op by client (application_name): ${line%, }"
	line=
	for f in "$d"/proc_*; do
		[ -s "$f" ] && line+="${f##*/proc_} $(cost_fmt %.3f "$key" "${f##*/}"), "
	done
	[ -z "$line" ] || echo "  CPU ms/op outside PostgreSQL: ${line%, }"
	line=
	for f in "$d"/switches_*; do
		[ -s "$f" ] && line+="${f##*/switches_} $(cost_fmt %.1f "$key" "${f##*/}"), "
	done
	[ -z "$line" ] || echo "  context switches/op outside PostgreSQL (threads, voluntary and not): ${line%, }"
	line=
	for f in "$d"/sqs_*; do
		[ -s "$f" ] && [ "$(cost_fmt %.2f "$key" "${f##*/}")" != 0.00 ] &&
			line+="$(echo "${f##*/sqs_}" | tr _ ' ') $(cost_fmt %.2f "$key" "${f##*/}"), "
	done
	[ -z "$line" ] || echo "  SQS calls/op by action: ${line%, }"
	# (no CPU by table: a median per table over the rounds it ran in
	# could exceed the total's, and the log's 10 ms steps make it noise)
	[ ! -s "$d/autovac_ms" ] ||
		echo "  of the PostgreSQL CPU, autovacuum (its log): $(cost_fmt %.3f "$key" autovac_ms) ms/op in" \
			"$(cost_fmt %.0f "$key" autovac_runs) runs a round ($(cost_autovacuum_tables "$d/autovac_tables"))"
	[ ! -s "$d/wal_other_kb" ] || [ "$(cost_med "$key" wal_other_kb)" = 0.0000 ] ||
		echo "  WAL of other databases (not counted): $(cost_fmt %.2f "$key" wal_other_kb) KB/op"
}
