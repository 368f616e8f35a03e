#!/usr/bin/env bash
# Self-test of the local SQS/S3 stack: starts a private copy (own run dir
# and ports, so a stack left running for development is not disturbed),
# runs selftest.mjs against it, stops it, starts it again to check that a
# restart brings the queues back, and stops it for good.
# Exits non-zero on any failure; the last line reads
# "selftest: N passed, M failed".
#
# Ports: PAYFLOW_EMULATOR_SELFTEST_PORT (4572) for the front and
# PAYFLOW_EMULATOR_SELFTEST_BACKEND_PORT (4573) for fauxqs.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo_root=$(cd "$here/../.." && pwd)

# The private stack's settings override whatever the caller exported for
# its own stack. A 1 s visibility timeout and a maxReceiveCount of 2 let the
# redrive check finish in a few seconds.
export PAYFLOW_EMULATOR_RUN_DIR="$repo_root/.cache/run/emulator-selftest"
export PAYFLOW_EMULATOR_PORT="${PAYFLOW_EMULATOR_SELFTEST_PORT:-4572}"
export PAYFLOW_EMULATOR_BACKEND_PORT="${PAYFLOW_EMULATOR_SELFTEST_BACKEND_PORT:-4573}"
export PAYFLOW_EMULATOR_MAX_RECEIVE_COUNT=2
export PAYFLOW_EMULATOR_VISIBILITY_TIMEOUT=1
unset PAYFLOW_TEST_AWS_ACCESS_KEY_ID PAYFLOW_TEST_AWS_SECRET_ACCESS_KEY PAYFLOW_TEST_AWS_REGION
unset AWS_ENDPOINT_URL AWS_ENDPOINT_URL_SQS AWS_ENDPOINT_URL_S3 AWS_SESSION_TOKEN AWS_PROFILE

trap '"$here/stop.sh"' EXIT

"$here/start.sh" >/dev/null
# shellcheck source=/dev/null
. "$PAYFLOW_EMULATOR_RUN_DIR/env.sh"
first_urls="$PAYFLOW_QUEUE_URLS $PAYFLOW_QUEUE_URLS_FIFO"

status=0
node "$here/selftest.mjs" all | tee "$PAYFLOW_EMULATOR_RUN_DIR/selftest.out" || status=1

# Every rejection above left one line in the front's log.
if ! grep -q 'sigv4-front: rejected 403 SignatureDoesNotMatch' "$PAYFLOW_EMULATOR_RUN_DIR/front.log"; then
	echo "not ok - the front logged no rejected request" >&2
	status=1
fi

# The outage drill the integration tests run: stop (twice, as a careless
# teardown would), start again, and find the same queues at the same URLs.
"$here/stop.sh"
"$here/stop.sh"
"$here/start.sh" >/dev/null
. "$PAYFLOW_EMULATOR_RUN_DIR/env.sh"
if [ "$PAYFLOW_QUEUE_URLS $PAYFLOW_QUEUE_URLS_FIFO" != "$first_urls" ]; then
	echo "not ok - queue URLs changed across a restart" >&2
	status=1
fi
node "$here/selftest.mjs" restart | tee -a "$PAYFLOW_EMULATOR_RUN_DIR/selftest.out" || status=1

# The two runs print one summary line each; close with one for the whole.
read -r passed failed < <(awk '/^selftest: [0-9]+ passed, [0-9]+ failed$/ { p += $2; f += $4 } END { print p + 0, f + 0 }' \
	"$PAYFLOW_EMULATOR_RUN_DIR/selftest.out")
# A failure outside the checks (a log line missing, URLs moved) counts too.
if [ "$status" != 0 ] && [ "$failed" = 0 ]; then
	failed=1
fi
echo "emulator: $passed passed, $failed failed"
exit "$status"
