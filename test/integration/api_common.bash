# shellcheck disable=SC2034  # sets variables for the tests that source it
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
#   sse URL KEY OUT [curl args...]   follows an event stream into OUT (run it with &)
#   header NAME                   a header of the last http answer
#   json_field FIELD              a top-level member of the last body
#   api_contract_check [DOC]      every recorded answer against the OpenAPI document
#
# Every answer payflow-api gives through http, sse, metric and api_healthy
# (and the raw sockets of api_abuse.sh, which write the same records) is
# kept in $API_EXCHANGES; api_contract_check, the last step of each api_*.sh
# test, validates them all against workers/console/openapi.json
# (test/browser/openapi-check.mjs): a status the document does not give for
# that path and method, a body that does not match its schema, a required
# header missing, an event of a stream that does not match, fails the test.
API_REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$API_REPO" || exit 1
# shellcheck source=../lib/cluster.sh
source test/lib/cluster.sh
# shellcheck source=../lib/assert.sh
source test/lib/assert.sh
# shellcheck source=../lib/payload_checksum.sh
source test/lib/payload_checksum.sh

# another build (e.g. with sanitizers) can be tested in its place
API_BIN=${PAYFLOW_API_BIN:-workers/bin/payflow-api}
API_PIDS=()
API_TENANTS=()

q() { pf_psql -Atq "$@"; }

api_init() {
	API_DIR=$(mktemp -d "/tmp/payflow-$1.XXXXXX")
	API_RUN=$1-$(date +%s)-$$
	export API_EXCHANGES=$API_DIR/exchanges
	mkdir -p "$API_EXCHANGES"
	API_CONTRACT_CHECKED=0
	trap 'if [ $? -eq 0 ]; then api_cleanup; else api_cleanup failed; fi' EXIT
	[ -x "$API_BIN" ] || { echo "not ok - $API_BIN is missing (make -C workers)"; exit 1; }
	q -c "DO \$\$ BEGIN
			IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'pf_api') THEN
				CREATE ROLE pf_api LOGIN IN ROLE payflow_app;
			END IF;
		  END \$\$" >/dev/null
	# /metrics shows payflow.metrics(), an admin function: granted explicitly
	q -c "GRANT EXECUTE ON FUNCTION payflow.metrics() TO pf_api" >/dev/null
	# the payload checksum key, for requests put to S3 (as deploy/sql/install.sql grants it)
	q -c "GRANT payflow_payload_mac TO pf_api" >/dev/null
	export PAYFLOW_DATABASE_URL="host=$PGHOST port=$PGPORT user=pf_api dbname=$PF_DB"
	export PAYFLOW_LOG_LEVEL=info
}

api_cleanup() {
	local pid t
	for pid in "${API_PIDS[@]}"; do
		kill -KILL "$pid" 2>/dev/null || true
	done
	if declare -F api_test_cleanup >/dev/null; then api_test_cleanup; fi
	# a test that records answers and ends without checking them would pass
	# however payflow-api answered (other scripts source this file too)
	if [ "$API_CONTRACT_CHECKED" = 0 ] && [ -z "${1:-}" ] && compgen -G "$API_EXCHANGES/*.x" >/dev/null; then
		case ${0##*/} in
			api_*.sh)
				echo "not ok - the recorded answers were checked against the OpenAPI document (api_contract_check)"
				api_status_on_exit=1 ;;
			*) echo "# $(find "$API_EXCHANGES" -name '*.x' | wc -l) answers of payflow-api recorded, not checked (api_contract_check)" ;;
		esac
	fi
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
	if [ "${api_status_on_exit:-0}" != 0 ]; then exit "$api_status_on_exit"; fi
}

api_key() {
	local tenant=$1 name=${2:-test}
	case " ${API_TENANTS[*]} " in *" $tenant "*) ;; *) API_TENANTS+=("$tenant") ;; esac
	q -c "SELECT payflow.create_api_key('$tenant', '$name')"
}

api_healthy() { [ "$(api_curl "$API_DIR/healthy.body" "$API_DIR/healthy.headers" GET "$1/healthz")" = 200 ]; }

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

# api_record METHOD URL HEADERS_FILE BODY_FILE: one exchange for the
# contract check, read when it runs (a stream's files may still grow);
# the status is the headers' last status line, none when there was no answer
api_record() {
	local path=/${2#*://*/}
	[ "$2" != "${2#*://*/}" ] || path=/
	printf '%s\n%s\n%s\n%s\n' "$1" "$path" "$3" "$4" >"$API_EXCHANGES/${EPOCHREALTIME/./}-$BASHPID.x"
}

# api_curl BODY_FILE HEADERS_FILE METHOD URL [curl args...]: curl, the
# exchange kept (copies: the files are written again by the next call);
# prints the status code, returns curl's exit status
api_curl() {
	local body=$1 headers=$2 method=$3 url=$4 code rc=0 id
	shift 4
	rm -f "$body" "$headers"
	code=$(curl -s -o "$body" -D "$headers" -w '%{http_code}' -X "$method" "$@" "$url") || rc=$?
	if [ -s "$headers" ]; then
		id=$API_EXCHANGES/${EPOCHREALTIME/./}-$BASHPID
		cp "$headers" "$id.headers"
		if [ -f "$body" ]; then cp "$body" "$id.body"; else : >"$id.body"; fi
		api_record "$method" "$url" "$id.headers" "$id.body"
	fi
	printf '%s' "$code"
	return $rc
}

http() {
	local method=$1 url=$2 key=$3
	shift 3
	local auth=()
	[ -z "$key" ] || auth=(-H "Authorization: Bearer $key")
	api_curl "$API_DIR/body" "$API_DIR/headers" "$method" "$url" "${auth[@]}" "$@"
}

# sse URL KEY OUT [curl args...]: the stream's events in OUT, its headers in
# OUT.headers; returns curl's exit status (28 for -m). Run with &, $! is
# curl itself (a kill -9 of it is a client that vanishes)
sse() {
	local url=$1 key=$2 out=$3
	shift 3
	api_record GET "$url" "$out.headers" "$out"
	: >"$out"
	if [ "$BASHPID" != "$$" ]; then
		exec curl -sN -o "$out" -D "$out.headers" -H "Authorization: Bearer $key" "$@" "$url"
	fi
	curl -sN -o "$out" -D "$out.headers" -H "Authorization: Bearer $key" "$@" "$url"
}

# api_contract_check [DOCUMENT]: every answer recorded so far against the
# OpenAPI document (the repository's by default); prints each mismatch
api_contract_check() {
	local doc=${1:-workers/console/openapi.json} out
	API_CONTRACT_CHECKED=1
	test/browser/install.sh >/dev/null
	out=$(node test/browser/openapi-check.mjs "$doc" "$API_EXCHANGES" 2>&1) || true
	{ grep -v '^openapi: ' <<<"$out" || true; } | sed 's/^/# /' | head -n 50
	pf_eq "every answer matches the OpenAPI document ($(grep '^openapi: ' <<<"$out" | sed 's/^openapi: //'))" 0 \
		"$(grep -vc '^openapi: ' <<<"$out" || true)"
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
	api_curl "$API_DIR/metrics.body" "$API_DIR/metrics.headers" GET "$API_URL/metrics" >/dev/null || true
	touch "$API_DIR/metrics.body"
	awk -v m="$1" '$1 == m { v = $2 } END { print (v == "" ? 0 : v) }' "$API_DIR/metrics.body"
}
