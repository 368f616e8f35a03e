#!/bin/bash
# shellcheck disable=SC2154  # WK_PID_<name>: set by name (printf -v) when a worker starts
# The S3 objects purge leaves behind, and the HTTP edge's orphan uploads,
# deleted by payflow-s3-sweep (issue 26, L3); nothing that an operation
# keeps, and no upload younger than PAYFLOW_S3_ORPHAN_GRACE.
#
#   a  an operation whose payloads purge() purged (retention_payloads):
#      its request object and its result object go
#   b  an operation purge() deleted (retention_completed): both go
#   c  orphans older than the grace: an upload no operation names
#      (requests/) and objects of an operation id that never committed
#      (payments/<id>/), 600 of them for the crash below: all go
#   d  an orphan upload younger than the grace: stays
#   e  a live operation (its request and result), a request object shared
#      by a purged operation and a live one, and a key outside payments/
#      and requests/: stay
#
# The sweeper is killed with SIGKILL in the middle of a pass (pages of 5
# keys); a new one finishes the work.
set -euo pipefail
source "$(dirname "$0")/worker_common.bash"

wk_init s3-purge 4760 4761 5
wk_start_relay
p=sp-$WK_RUN
GRACE=10
[ -x workers/bin/payflow-s3-sweep ] || { echo "not ok - workers/bin/payflow-s3-sweep is missing (make -C workers)"; exit 1; }

# s3 put KEY FILE | s3 orphans PREFIX N (N objects, one per operation id
# that payflow never had) | s3 keys (every key of the bucket, one a line)
s3() {
	node --input-type=module -e '
		import { readFileSync } from "node:fs";
		import { clientCredentials, clientRegion, requireFromCache } from "./test/emulator/emulator-config.mjs";
		const { S3Client, PutObjectCommand, ListObjectsV2Command } = requireFromCache("@aws-sdk/client-s3");
		const [op, a, b] = process.argv.slice(1);
		const s3 = new S3Client({ endpoint: process.env.AWS_ENDPOINT_URL, region: clientRegion(),
								  credentials: clientCredentials(), forcePathStyle: true });
		const Bucket = process.env.PAYFLOW_S3_BUCKET;
		if (op === "put")
			await s3.send(new PutObjectCommand({ Bucket, Key: a, Body: readFileSync(b) }));
		else if (op === "orphans") {
			for (let i = 0; i < Number(b); i += 50)
				await Promise.all(Array.from({ length: Math.min(50, Number(b) - i) }, (_, j) =>
					s3.send(new PutObjectCommand({ Bucket, Key: `payments/${a}${String(i + j).padStart(4, "0")}/request.json`,
												   Body: "{\"card\": \"4111111111111111\"}" }))));
		} else {
			let ContinuationToken;
			do {
				const page = await s3.send(new ListObjectsV2Command({ Bucket, ContinuationToken }));
				for (const o of page.Contents ?? []) console.log(o.Key);
				ContinuationToken = page.NextContinuationToken;
			} while (ContinuationToken);
		}
	' "$@"
}
sum_of() { pf_payload_checksum "$1"; }
size_of() { wc -c <"$1" | tr -d ' '; }
# request_key FILE: where the HTTP edge puts a request body (content-addressed)
request_key() { pf_request_key "$1"; }

# put_request NAME JSON: a request body in S3, and the operation naming it
put_request() {
	printf '%s' "$2" >"$WK_DIR/$1.json"
	s3 put "$(request_key "$WK_DIR/$1.json")" "$WK_DIR/$1.json"
	q -c "SELECT payflow.submit_ref('$p-$1', 's3', '$(request_key "$WK_DIR/$1.json")',
								  '$(sum_of "$WK_DIR/$1.json")', $(size_of "$WK_DIR/$1.json"))"
}

# finish OP: the two steps after the payment, by hand, up to COMPLETED
finish() {
	q -c "SELECT payflow.claim_step('$1', 'POST_PROCESS', 'sweep-test', 60)" >/dev/null
	q -c "SELECT payflow.complete_step('$1', 'POST_PROCESS', 'sweep-test', '{\"amount\": 1}')" >/dev/null
	q -c "SELECT payflow.claim_step('$1', 'CREATE_INVOICE', 'sweep-test', 60)" >/dev/null
	q -c "SELECT payflow.complete_step('$1', 'CREATE_INVOICE', 'sweep-test', '{\"invoiceId\": \"inv-$1\"}')" >/dev/null
}

result_key() { echo "payments/$1/payment-result.attempt-1.json"; }

# --- operations whose requests and results live in S3 (a real payment worker writes the results)
op_a=$(put_request a '{"amount": 1.10, "currency": "EUR", "card": "4111111111111111"}')
op_b=$(put_request b '{"amount": 2.20, "currency": "EUR", "card": "4111111111111111"}')
op_e=$(put_request e '{"amount": 3.30, "currency": "EUR", "card": "4111111111111111"}')
# one request body, two operations (the same details under two payment ids)
op_s1=$(put_request shared '{"amount": 4.40, "currency": "EUR", "card": "4111111111111111"}')
op_s2=$(q -c "SELECT payflow.submit_ref('$p-shared-2', 's3', '$(request_key "$WK_DIR/shared.json")',
									  '$(sum_of "$WK_DIR/shared.json")', $(size_of "$WK_DIR/shared.json"))")
wk_start_worker w1 PAYFLOW_STORE=s3
for op in "$op_a" "$op_b" "$op_e" "$op_s1" "$op_s2"; do
	pf_ok "$op: PAYMENT_COMPLETED, its result in S3" wk_wait_status "$op" PAYMENT_COMPLETED 30
done
for op in "$op_a" "$op_b" "$op_s1"; do finish "$op"; done
pf_eq "a, b and one sharing operation COMPLETED" "COMPLETED COMPLETED COMPLETED" \
	"$(wk_status "$op_a") $(wk_status "$op_b") $(wk_status "$op_s1")"
# a ended two days ago (past retention_payloads, 1d), b eight (past retention_completed, 7d)
q -c "UPDATE payflow.operations SET terminal_at = now() - interval '2 days' WHERE id IN ('$op_a', '$op_s1')"
q -c "UPDATE payflow.operations SET terminal_at = now() - interval '8 days' WHERE id = '$op_b'"
q -c "SELECT payflow.purge()" >/dev/null
pf_eq "purge: a kept with its payloads purged, b gone" "t|0" \
	"$(q -c "SELECT payloads_purged_at IS NOT NULL FROM payflow.operations WHERE id = '$op_a'")|$(q -c "SELECT count(*) FROM payflow.operations WHERE id = '$op_b'")"

# --- orphans older than the grace: an upload never submitted, 600 objects of ids never committed
printf '{"amount": 5.50, "card": "4111111111111111"}' >"$WK_DIR/orphan-old.json"
s3 put "$(request_key "$WK_DIR/orphan-old.json")" "$WK_DIR/orphan-old.json"
s3 orphans "pay_01HZZZZZZZZZZZZZZZZZZZ" 600
printf '{"keep": true}' >"$WK_DIR/elsewhere.json"
s3 put "elsewhere/$p.json" "$WK_DIR/elsewhere.json"
sleep $((GRACE + 1))
# --- an orphan younger than the grace (a submit may still be committing)
printf '{"amount": 6.60, "card": "4111111111111111"}' >"$WK_DIR/orphan-young.json"
s3 put "$(request_key "$WK_DIR/orphan-young.json")" "$WK_DIR/orphan-young.json"

s3 keys >"$WK_DIR/before.keys"
has_key() { grep -qxF "$2" "$WK_DIR/$1.keys"; }
bulk_left() { s3 keys | grep -c '^payments/pay_01HZZZZZZZZZZZZZZZZZZZ' || true; }
pf_eq "before: the 600 orphans of ids never committed are there" 600 \
	"$(grep -c '^payments/pay_01HZZZZZZZZZZZZZZZZZZZ' "$WK_DIR/before.keys")"
pf_ok "before: a's result object is there" has_key before "$(result_key "$op_a")"

# --- a sweeper killed half-way through a pass: each DeleteObjects held
# 300 ms by the S3 stand-in's front, 120 pages of 5 keys
hold_deletes() {
	curl -fsS -X POST "$AWS_ENDPOINT_URL/_front/hold" -H 'content-type: application/json' \
		-d "{\"action\": \"S3 POST\", \"ms\": 300, \"count\": $1}" >/dev/null
}
hold_deletes 1000
sweep_env=("PAYFLOW_S3_ORPHAN_GRACE=$GRACE" PAYFLOW_S3_SWEEP_PAGE=5 PAYFLOW_S3_SWEEP_INTERVAL=3600 PAYFLOW_LOG_LEVEL=debug)
env "${sweep_env[@]}" workers/bin/payflow-s3-sweep >"$WK_DIR/sweep1.log" 2>&1 &
sweep1=$!
WK_PIDS+=("$sweep1")
pf_ok "sweeper 1: deletes pages" pf_wait_for 20 grep -q '"deleted [0-9]* object(s)"' "$WK_DIR/sweep1.log"
wk_kill9 "$sweep1"
hold_deletes 0
left=$(bulk_left)
if [ "$left" -gt 0 ] && [ "$left" -lt 600 ]; then
	echo "ok - sweeper 1 killed mid-way: $left of the 600 orphans left"
else
	echo "not ok - sweeper 1 killed mid-way: $left of the 600 orphans left"
	PF_FAILURES=$((PF_FAILURES + 1))
fi

# --- a new sweeper finishes: one pass, exit 0
rc=0
env "${sweep_env[@]}" workers/bin/payflow-s3-sweep --once >"$WK_DIR/sweep2.log" 2>&1 || rc=$?
pf_eq "sweeper 2: one pass, exit 0" 0 "$rc"
pf_ok "sweeper 2: says what it did" grep -q '"pass done"' "$WK_DIR/sweep2.log"
s3 keys >"$WK_DIR/after.keys"

gone() { ! has_key after "$1"; }
pf_ok "a: request object deleted" gone "$(request_key "$WK_DIR/a.json")"
pf_ok "a: result object deleted" gone "$(result_key "$op_a")"
pf_ok "b: request object deleted" gone "$(request_key "$WK_DIR/b.json")"
pf_ok "b: result object deleted" gone "$(result_key "$op_b")"
pf_ok "c: old orphan upload deleted" gone "$(request_key "$WK_DIR/orphan-old.json")"
pf_eq "c: every orphan of an id never committed deleted" 0 \
	"$(grep -c '^payments/pay_01HZZZZZZZZZZZZZZZZZZZ' "$WK_DIR/after.keys" || true)"
pf_ok "d: young orphan upload kept" has_key after "$(request_key "$WK_DIR/orphan-young.json")"
pf_ok "e: live operation's request kept" has_key after "$(request_key "$WK_DIR/e.json")"
pf_ok "e: live operation's result kept" has_key after "$(result_key "$op_e")"
pf_ok "e: a request shared with a purged operation kept for the live one" has_key after "$(request_key "$WK_DIR/shared.json")"
pf_ok "e: the purged sharing operation's result deleted" gone "$(result_key "$op_s1")"
pf_ok "e: the live sharing operation's result kept" has_key after "$(result_key "$op_s2")"
pf_ok "e: a key outside payments/ and requests/ kept" has_key after "elsewhere/$p.json"
pf_eq "nothing else deleted" \
	"$(grep -v -e '^payments/pay_01HZZZZZZZZZZZZZZZZZZZ' "$WK_DIR/before.keys" | grep -vxF \
		-e "$(request_key "$WK_DIR/a.json")" -e "$(result_key "$op_a")" -e "$(request_key "$WK_DIR/b.json")" \
		-e "$(result_key "$op_b")" -e "$(request_key "$WK_DIR/orphan-old.json")" -e "$(result_key "$op_s1")" | sort)" \
	"$(sort "$WK_DIR/after.keys")"

# --- the live operation still runs on its objects
finish "$op_e"
pf_eq "e: COMPLETED after the sweep" COMPLETED "$(wk_status "$op_e")"

# --- a second pass finds nothing to do
rc=0
env "${sweep_env[@]}" workers/bin/payflow-s3-sweep --once >"$WK_DIR/sweep3.log" 2>&1 || rc=$?
pf_eq "sweeper 3: nothing left to delete" "0|0|0" \
	"$rc|$(grep '"pass done"' "$WK_DIR/sweep3.log" | sed -n 's/.*"deletedPurged":\([0-9]*\).*/\1/p')|$(grep '"pass done"' "$WK_DIR/sweep3.log" | sed -n 's/.*"deletedOrphans":\([0-9]*\).*/\1/p')"

# --- as a service: a pass at start, then waits for the next; SIGTERM ends it with 0
env "${sweep_env[@]}" workers/bin/payflow-s3-sweep >"$WK_DIR/sweep4.log" 2>&1 &
sweep4=$!
WK_PIDS+=("$sweep4")
pf_ok "sweeper 4: a pass at start" pf_wait_for 20 grep -q '"pass done"' "$WK_DIR/sweep4.log"
kill -TERM "$sweep4"
rc=0
wait "$sweep4" || rc=$?
pf_eq "sweeper 4: SIGTERM while it waits: exit 0" "0|1" "$rc|$(grep -c '"stopped"' "$WK_DIR/sweep4.log")"

charges=""
for pay in a b e shared shared-2; do charges+="$(legacy -c "SELECT charge_count('$p-$pay')") "; done
pf_eq "every payment charged exactly once" "1 1 1 1 1 " "$charges"
pf_done
