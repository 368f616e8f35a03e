# test/integration/api_common.bash — shared by the payflow-api tests
# (api_*.sh) and test/bench/api.sh.  Sourced after the caller set the
# cluster's env (named .bash so make check does not run it as a test).
#
# Uses the running cluster (test/lib/cluster.sh).  The API logs in as
# pf_api, a member of payflow_app only (created here once); keys are made
# per run for tenants named after the run, so runs never see each other.
#
#   api_init NAME                 $API_DIR, $API_RUN, EXIT trap
#   api_key TENANT [NAME]         prints a new API key for TENANT
#   api_start NAME PORT [VAR=value...]   background payflow-api; sets API_PID, API_URL
#                                 (API_OPEN_FILES=N: under ulimit -n N)
#   api_stop PID                  SIGTERM + wait; exit status in $api_status
#   http METHOD URL KEY [curl args...]   body in $API_DIR/body, headers in
#                                 $API_DIR/headers, prints the status code
#   header NAME                   a header of the last http answer
#   json_field FIELD              a top-level member of the last body
API_REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$API_REPO"
# shellcheck source=../lib/cluster.sh
source test/lib/cluster.sh
# shellcheck source=../lib/assert.sh
source test/lib/assert.sh

# another build (e.g. with sanitizers) can be tested in its place
API_BIN=${PAYFLOW_API_BIN:-workers/bin/payflow-api}
API_PIDS=()
API_TENANTS=()

q() { pf_psql -Atq "$@"; }

api_init() {
	API_DIR=$(mktemp -d "/tmp/payflow-$1.XXXXXX")
	API_RUN=$1-$(date +%s)-$$
	trap 'if [ $? -eq 0 ]; then api_cleanup; else api_cleanup failed; fi' EXIT
	[ -x "$API_BIN" ] || { echo "not ok - $API_BIN is missing (make -C workers)"; exit 1; }
	q -c "DO \$\$ BEGIN
			IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'pf_api') THEN
				CREATE ROLE pf_api LOGIN IN ROLE payflow_app;
			END IF;
		  END \$\$" >/dev/null
	# /metrics shows payflow.metrics(), an admin function: granted explicitly
	q -c "GRANT EXECUTE ON FUNCTION payflow.metrics() TO pf_api" >/dev/null
	export PAYFLOW_DATABASE_URL="host=$PGHOST port=$PGPORT user=pf_api dbname=$PF_DB"
	export PAYFLOW_LOG_LEVEL=info
}

api_cleanup() {
	local pid t
	for pid in "${API_PIDS[@]}"; do
		kill -KILL "$pid" 2>/dev/null || true
	done
	if declare -F api_test_cleanup >/dev/null; then api_test_cleanup; fi
	# a failure shows what the API said
	if [ "${PF_FAILURES:-0}" -ne 0 ] || [ "${1:-}" = failed ]; then
		for log in "$API_DIR"/api-*.log; do
			[ -f "$log" ] && { echo "# --- $log"; tail -n 20 "$log" | sed 's/^/# /'; }
		done
	fi
	# no worker will take these operations: keep relays of other tests off them
	for t in "${API_TENANTS[@]}"; do
		q -c "BEGIN" -c "SELECT payflow.authenticate(payflow.create_api_key('$t', 'cleanup'))" \
			-c "SELECT count(payflow.cancel(id, 'api test over')) FROM payflow.operations
				 WHERE tenant = '$t' AND status = 'PENDING'" -c "COMMIT" >/dev/null 2>&1 || true
	done
	rm -rf "$API_DIR"
}

api_key() {
	local tenant=$1 name=${2:-test}
	case " ${API_TENANTS[*]} " in *" $tenant "*) ;; *) API_TENANTS+=("$tenant") ;; esac
	q -c "SELECT payflow.create_api_key('$tenant', '$name')"
}

api_healthy() { curl -sf -o /dev/null "$1/healthz"; }

api_start() {
	local name=$1 port=$2
	shift 2
	# a process left on the port would answer in our place
	if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
		echo "not ok - port $port is free for payflow-api $name"
		exit 1
	fi
	if [ -n "${API_OPEN_FILES:-}" ]; then
		(ulimit -n "$API_OPEN_FILES" && exec env PAYFLOW_LISTEN="127.0.0.1:$port" "$@" "$API_BIN") 2>>"$API_DIR/api-$name.log" &
	else
		env PAYFLOW_LISTEN="127.0.0.1:$port" "$@" "$API_BIN" 2>>"$API_DIR/api-$name.log" &
	fi
	API_PID=$!
	API_PIDS+=("$API_PID")
	API_URL=http://127.0.0.1:$port
	pf_wait_for 20 api_healthy "$API_URL" || { echo "not ok - payflow-api $name starts"; cat "$API_DIR/api-$name.log"; exit 1; }
}

api_stop() {
	api_status=0
	kill -TERM "$1"
	wait "$1" || api_status=$?
}

http() {
	local method=$1 url=$2 key=$3
	shift 3
	local auth=()
	[ -z "$key" ] || auth=(-H "Authorization: Bearer $key")
	curl -s -o "$API_DIR/body" -D "$API_DIR/headers" -w '%{http_code}' -X "$method" "${auth[@]}" "$@" "$url"
}

header() { sed -n "s/^$1: *//Ip" "$API_DIR/headers" | tr -d '\r' | tail -1; }

json_field() {
	node -e 'const fs = require("fs"); let v; try { v = JSON.parse(fs.readFileSync(process.argv[1], "utf8")); } catch { v = undefined; }
		for (const k of process.argv[2].split(".")) v = v !== null && typeof v === "object" ? v[k] : undefined;
		console.log(v === undefined || v === null ? "" : typeof v === "object" || typeof v === "boolean" ? JSON.stringify(v) : String(v));' \
		"$API_DIR/body" "$1"
}

# post_payment KEY PAYMENT_ID DETAILS_JSON [curl args...]: prints the status code
post_payment() {
	local key=$1 pid=$2 details=$3
	shift 3
	http POST "$API_URL/payments" "$key" -H 'Content-Type: application/json' \
		--data-binary "{\"paymentId\":\"$pid\",\"details\":$details}" "$@"
}

# metric NAME_WITH_LABELS: its value on /metrics (0 when absent)
metric() {
	curl -s "$API_URL/metrics" | awk -v m="$1" '$1 == m { v = $2 } END { print (v == "" ? 0 : v) }'
}
