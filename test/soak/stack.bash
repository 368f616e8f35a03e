# test/soak/stack.bash — the whole pipeline for the soak runner, started
# with the project's own helpers (test/lib/cluster.sh, test/emulator/start.sh,
# test/fixtures/legacy/setup.sh, test/fixtures/invoice-api/start.sh), and
# the edge processes, which it watches and restarts.  Sourced by run.sh
# after cluster.sh and assert.sh.
#
#   soak_stack_up                 cluster (payflow + pg_cron, soak GUCs), ledger, emulator,
#                                 legacy DBMS, invoice API, relay and one worker per role
#   soak_kill9 NAME DOWN_MS       kill -9, restarted DOWN_MS later by soak_supervise
#   soak_supervise                restarts what is due; a process that died by itself is
#                                 logged in unexpected.tsv and restarted a second later
#   soak_stack_down               everything this run started, and only that
#
# Needs SOAK_DIR, SOAK_EMULATOR_PORT, SOAK_INVOICE_PORT and the PF_* of cluster.sh.

SOAK_PROCESSES="relay payment postprocess invoice"
declare -A SOAK_PID=() SOAK_DOWN_UNTIL=()
SOAK_ALL_PIDS=()
SOAK_STARTS=0

# The settings that make recovery and clean-up happen within minutes:
# re-emit a step's event after 15 s unclaimed, retry in 1-5 s, keep
# finished operations 30 s.  max_attempts is raised so that the faults
# injected at random (several may hit one operation) end in a retry, and
# only the permanent ones fail an operation.  autovacuum visits every
# database every 10 s instead of every minute: the outbox and steps churn
# through thousands of row versions a minute, and at the default (and after
# each crash, which resets the statistics autovacuum goes by) they bloat
# between visits (SOAK_AUTOVACUUM_NAPTIME=1min shows it).
SOAK_CLUSTER_CONF="
autovacuum_naptime = '${SOAK_AUTOVACUUM_NAPTIME:-10s}'
payflow.scheduler_naptime = '500ms'
payflow.stuck_after = '${SOAK_STUCK_AFTER:-15s}'
payflow.retry_base_delay = '1s'
payflow.retry_max_delay = '5s'
payflow.max_attempts = 10
payflow.retention_payloads = '10s'
payflow.retention_completed = '${SOAK_RETENTION:-30s}'
payflow.retention_failed = '60s'
payflow.retention_published = '30s'
payflow.retention_consumed = '60s'
"
SOAK_LEGACY_TIMEOUT=3			# seconds; the legacy time-out fault sleeps longer
SOAK_INVOICE_TIMEOUT_MS=2000	# the invoice time-out fault holds the answer longer

soak_now_ms() {
	local t=${EPOCHREALTIME/./}
	SOAK_NOW=$((t / 1000))
}

soak_queue_url() { tr ',' '\n' <<<"$PAYFLOW_QUEUE_URLS" | sed -n "s|^$1=||p"; }
soak_dlq_url() { tr ',' '\n' <<<"$PAYFLOW_DLQ_URLS" | sed -n "s|^$1=||p"; }

soak_emulator_up() {
	local env_text
	env_text=$(test/emulator/start.sh 2>>"$SOAK_DIR/emulator-start.log") || return 1
	eval "$env_text"
	export AWS_ENDPOINT_URL AWS_REGION AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY PAYFLOW_QUEUE_URLS PAYFLOW_DLQ_URLS
}

soak_stack_up() {
	pf_cluster_destroy
	PF_CLUSTER_EXTRA_CONF=$SOAK_CLUSTER_CONF pf_cluster_start
	pf_psql -q -f test/soak/ledger.sql >/dev/null
	# pg_cron's finest schedule is a minute (1.4); the sampler purges in between
	pf_psql -Atqc "SELECT payflow.schedule_purge('* * * * *')" >/dev/null

	export PAYFLOW_EMULATOR_PORT=$SOAK_EMULATOR_PORT PAYFLOW_EMULATOR_BACKEND_PORT=$((SOAK_EMULATOR_PORT + 1))
	export PAYFLOW_EMULATOR_RUN_DIR=$SOAK_DIR/emulator PAYFLOW_EMULATOR_MAX_RECEIVE_COUNT=3
	test/emulator/stop.sh >/dev/null 2>&1 || true
	soak_emulator_up || { echo "soak: the emulator does not start (see $SOAK_DIR/emulator-start.log)"; return 1; }

	export PAYFLOW_INVOICE_API_PORT=$SOAK_INVOICE_PORT PAYFLOW_INVOICE_API_RUN_DIR=$SOAK_DIR/invoice-api
	eval "$(test/fixtures/invoice-api/start.sh 2>>"$SOAK_DIR/invoice-api-start.log")"
	export PAYFLOW_INVOICE_URL

	export PAYFLOW_LEGACY_ODBC
	PAYFLOW_LEGACY_ODBC=$(test/fixtures/legacy/setup.sh 2>>"$SOAK_DIR/legacy-setup.log")

	export PAYFLOW_DATABASE_URL="postgresql://postgres@127.0.0.1:$PF_PGPORT/$PF_DB"
	export PAYFLOW_LEGACY_CALL='SELECT * FROM charge(:idempotency_key, :payment_id, :details.amount, :details.currency)'
	export PAYFLOW_LEGACY_LOOKUP='SELECT * FROM lookup_charge(:idempotency_key, :payment_id)'
	export PAYFLOW_LEGACY_TIMEOUT=$SOAK_LEGACY_TIMEOUT PAYFLOW_LEGACY_CONNECT_TIMEOUT=3
	export PAYFLOW_POSTPROCESS_FUNCTION='payflow.default_postprocess(text,jsonb)'
	export PAYFLOW_INVOICE_TIMEOUT_MS=$SOAK_INVOICE_TIMEOUT_MS
	export PAYFLOW_LOG_LEVEL=info PAYFLOW_POLL_INTERVAL_MS=200 PAYFLOW_VISIBILITY_TIMEOUT=6
	export PAYFLOW_CONCURRENCY=8

	local name
	for name in $SOAK_PROCESSES; do
		soak_start "$name"
	done
	for name in payment postprocess invoice; do
		pf_wait_for 15 grep -qs '"payflow-worker started"' "$SOAK_DIR/$name.log" ||
			echo "soak: the $name worker did not say it started"
	done
}

# soak_start NAME: one process, its output appended to NAME.log
soak_start() {
	local name=$1 queue
	SOAK_STARTS=$((SOAK_STARTS + 1))
	# a lease owner must be unique per process, also across restarts
	export PAYFLOW_WORKER_ID="soak-$name-$SOAK_STARTS"
	case $name in
		relay) workers/bin/payflow-relay >>"$SOAK_DIR/relay.log" 2>&1 & ;;
		*)
			case $name in
				payment) queue=payment-requests ;;
				postprocess) queue=payment-completed ;;
				invoice) queue=invoice-requests ;;
			esac
			PAYFLOW_QUEUE_URL=$(soak_queue_url $queue) \
				workers/bin/payflow-worker --role "$name" >>"$SOAK_DIR/$name.log" 2>&1 &
			;;
	esac
	SOAK_PID[$name]=$!
	SOAK_ALL_PIDS+=($!)
	SOAK_DOWN_UNTIL[$name]=0
	unset PAYFLOW_WORKER_ID
}

# alive and not a zombie (a dead child stays in /proc until reaped)
soak_alive() {
	local state
	state=$(sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1) || return 1
	[ -n "$state" ] && [ "$state" != Z ] && [ "$state" != X ]
}

soak_kill9() {
	local name=$1 down_ms=$2 pid=${SOAK_PID[$1]}
	pf_kill_ours 9 "$pid"
	wait "$pid" 2>/dev/null || true
	soak_now_ms
	SOAK_DOWN_UNTIL[$name]=$((SOAK_NOW + down_ms))
}

soak_supervise() {
	local name pid status
	soak_now_ms
	for name in $SOAK_PROCESSES; do
		pid=${SOAK_PID[$name]}
		if [ "${SOAK_DOWN_UNTIL[$name]}" != 0 ]; then
			[ "$SOAK_NOW" -lt "${SOAK_DOWN_UNTIL[$name]}" ] || soak_start "$name"
		elif ! soak_alive "$pid"; then
			status=0
			wait "$pid" 2>/dev/null || status=$?
			printf '%s\t%s\t%s\n' "$SOAK_NOW" "$name" "$status" >>"$SOAK_DIR/unexpected.tsv"
			echo "soak: $name (pid $pid) exited by itself with status $status; restarting it"
			SOAK_DOWN_UNTIL[$name]=$((SOAK_NOW + 1000))
		fi
	done
}

soak_stack_down() {
	local pid user
	user=$(id -un)
	for pid in "${SOAK_ALL_PIDS[@]}"; do
		pf_kill_ours 9 "$pid"
		wait "$pid" 2>/dev/null || true
		# psqlODBC's CommLog (on in Debian's odbcinst.ini): one file per process
		rm -f "/tmp/psqlodbc_payflow-worker_$user$pid.log"
	done
	SOAK_ALL_PIDS=()
	test/fixtures/invoice-api/stop.sh >/dev/null 2>&1 || true
	test/emulator/stop.sh >/dev/null 2>&1 || true
	if [ "${SOAK_KEEP_CLUSTER:-0}" = 1 ]; then
		echo "soak: cluster kept in $PF_CLUSTER_DIR (port $PF_PGPORT)"
	else
		pf_cluster_destroy
	fi
}
