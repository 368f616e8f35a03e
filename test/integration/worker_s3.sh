#!/bin/bash
# shellcheck disable=SC2154  # WK_PID_<name>: set by name (printf -v) when a worker starts
# The claim check in S3, both ways: requests submitted with
# payflow.submit_ref point at objects in the emulator's bucket, and a
# payment worker with PAYFLOW_STORE=s3 reads them there (checksum verified)
# and writes its result there (complete_step gets the reference).
#
#   good        read, charged once, result object in S3 whose keyed
#               checksum (issue 26, M4) and size match the step's result_ref
#   keyed       a request with a keyed checksum: read and charged
#   tampered    keyed, the object changed behind it: PF005, no legacy call
#   corrupt     the object does not hash to the submitted checksum: PF005,
#               FAILED, no legacy call
#   missing     no such object: FAILED (payload_missing), no legacy call
set -euo pipefail
source "$(dirname "$0")/worker_common.bash"

wk_init worker-s3 4679 4680 5
wk_start_relay
p=ws-$WK_RUN

# s3 put KEY FILE | s3 get KEY FILE, with the AWS SDK for JavaScript
s3() {
	node --input-type=module -e '
		import { readFileSync, writeFileSync } from "node:fs";
		import { clientCredentials, clientRegion, requireFromCache } from "./test/emulator/emulator-config.mjs";
		const { S3Client, PutObjectCommand, GetObjectCommand } = requireFromCache("@aws-sdk/client-s3");
		const [op, key, file] = process.argv.slice(1);
		const s3 = new S3Client({ endpoint: process.env.AWS_ENDPOINT_URL, region: clientRegion(),
								  credentials: clientCredentials(), forcePathStyle: true });
		const Bucket = process.env.PAYFLOW_S3_BUCKET;
		if (op === "put")
			await s3.send(new PutObjectCommand({ Bucket, Key: key, Body: readFileSync(file) }));
		else
			writeFileSync(file, await (await s3.send(new GetObjectCommand({ Bucket, Key: key }))).Body.transformToByteArray());
	' "$@"
}
# an application's own plain checksum (submit_ref takes it), and the keyed one
sum_of() { echo "sha256:$(sha256sum "$1" | cut -d' ' -f1)"; }
size_of() { wc -c <"$1" | tr -d ' '; }

printf '{"amount": 4.20, "currency": "EUR"}' >"$WK_DIR/good.json"
printf '{"amount": 5, "currency": "EUR"}' >"$WK_DIR/corrupt.json"
printf '{"amount": 5000, "currency": "EUR"}' >"$WK_DIR/tampered.json"
s3 put "requests/$p-good.json" "$WK_DIR/good.json"
s3 put "requests/$p-corrupt.json" "$WK_DIR/tampered.json"

submit_ref() {
	q -c "SELECT payflow.submit_ref('$1', 's3', '$2', '$3', $4)"
}
good=$(submit_ref "$p-good" "requests/$p-good.json" "$(sum_of "$WK_DIR/good.json")" "$(size_of "$WK_DIR/good.json")")
corrupt=$(submit_ref "$p-corrupt" "requests/$p-corrupt.json" "$(sum_of "$WK_DIR/corrupt.json")" \
	"$(size_of "$WK_DIR/tampered.json")")
missing=$(submit_ref "$p-missing" "requests/$p-missing.json" "$(sum_of "$WK_DIR/good.json")" 10)
printf '{"amount": 7.30, "currency": "EUR"}' >"$WK_DIR/keyed.json"
s3 put "requests/$p-keyed.json" "$WK_DIR/keyed.json"
keyed=$(submit_ref "$p-keyed" "requests/$p-keyed.json" "$(pf_payload_checksum "$WK_DIR/keyed.json")" "$(size_of "$WK_DIR/keyed.json")")
# the same length, other bytes: only the checksum can tell
printf '{"amount": 9.30, "currency": "EUR"}' >"$WK_DIR/keyed-tampered.json"
s3 put "requests/$p-ktampered.json" "$WK_DIR/keyed-tampered.json"
ktampered=$(submit_ref "$p-ktampered" "requests/$p-ktampered.json" "$(pf_payload_checksum "$WK_DIR/keyed.json")" \
	"$(size_of "$WK_DIR/keyed.json")")

wk_start_worker w1 PAYFLOW_STORE=s3

pf_ok "good: PAYMENT_COMPLETED" wk_wait_status "$good" PAYMENT_COMPLETED 20
pf_eq "good: charged once, the amount as stored in S3" "1|4.20" \
	"$(legacy -c "SELECT count(*), max(amount) FROM charges WHERE payment_id = '$p-good'")"
ref=$(q -c "SELECT result_ref FROM payflow.steps WHERE operation_id = '$good' AND step_name = 'PROCESS_PAYMENT'")
# the attempt is in the name: a worker that lost its lease and writes late
# writes its own attempt's object, never the one a newer completion names
pf_eq "good: the result's reference names S3, and the attempt's own object" "s3|payments/$good/payment-result.attempt-1.json" \
	"$(q -c "SELECT '$ref'::jsonb->>'store', '$ref'::jsonb->>'key'")"
s3 get "payments/$good/payment-result.attempt-1.json" "$WK_DIR/result.json"
pf_eq "good: the result object matches its reference (keyed checksum and size)" \
	"$(q -c "SELECT '$ref'::jsonb->>'checksum', '$ref'::jsonb->>'size'")" \
	"$(pf_payload_checksum "$WK_DIR/result.json")|$(size_of "$WK_DIR/result.json")"
pf_ok "good: the result object holds the charge" grep -q '"charge_id":"ch_' "$WK_DIR/result.json"
pf_eq "good: the next event carries that reference" "$ref" \
	"$(q -c "SELECT input_ref FROM payflow.steps WHERE operation_id = '$good' AND step_name = 'POST_PROCESS'")"

pf_ok "corrupt: FAILED" wk_wait_status "$corrupt" FAILED 20
pf_eq "corrupt: PF005" PF005 "$(q -c "SELECT last_error->>'code' FROM payflow.steps WHERE operation_id = '$corrupt' AND step_name = 'PROCESS_PAYMENT'")"
pf_ok "missing: FAILED" wk_wait_status "$missing" FAILED 20
pf_eq "missing: payload_missing" payload_missing \
	"$(q -c "SELECT last_error->>'code' FROM payflow.steps WHERE operation_id = '$missing' AND step_name = 'PROCESS_PAYMENT'")"
pf_ok "keyed: PAYMENT_COMPLETED" wk_wait_status "$keyed" PAYMENT_COMPLETED 20
pf_eq "keyed: charged once, the amount as stored in S3" "1|7.30" \
	"$(legacy -c "SELECT count(*), max(amount) FROM charges WHERE payment_id = '$p-keyed'")"
pf_ok "tampered (keyed): FAILED" wk_wait_status "$ktampered" FAILED 20
pf_eq "tampered (keyed): PF005" PF005 \
	"$(q -c "SELECT last_error->>'code' FROM payflow.steps WHERE operation_id = '$ktampered' AND step_name = 'PROCESS_PAYMENT'")"
pf_eq "corrupt, missing, tampered: the legacy DBMS never called" 0 \
	"$(legacy -c "SELECT count(*) FROM call_log WHERE payment_id IN ('$p-corrupt', '$p-missing', '$p-ktampered')")"

# --- a takeover writes its own attempt's object (issue 26, M6): the dead
# worker's attempt 1 and the new holder's attempt 2 never share a key
kill -TERM "$WK_PID_w1"
wait "$WK_PID_w1" 2>/dev/null || true
legacy -c "SELECT set_fault('slow', payment_id => '$p-take', seconds => 8)" >/dev/null
printf '{"amount": 6.10, "currency": "EUR"}' >"$WK_DIR/take.json"
s3 put "requests/$p-take.json" "$WK_DIR/take.json"
take=$(submit_ref "$p-take" "requests/$p-take.json" "$(sum_of "$WK_DIR/take.json")" "$(size_of "$WK_DIR/take.json")")
wk_start_worker w2 PAYFLOW_STORE=s3
take_calling() { [ "$(legacy -c "SELECT call_count('charge', '$p-take')")" -ge 1 ]; }
pf_ok "takeover: w2's legacy call runs" pf_wait_for 20 take_calling
wk_kill9 "$WK_PID_w2"
wk_start_worker w3 PAYFLOW_STORE=s3
pf_ok "takeover: PAYMENT_COMPLETED by w3" wk_wait_status "$take" PAYMENT_COMPLETED 40
take_ref=$(q -c "SELECT result_ref FROM payflow.steps WHERE operation_id = '$take' AND step_name = 'PROCESS_PAYMENT'")
pf_eq "takeover: the completion names attempt 2's own object" "2|payments/$take/payment-result.attempt-2.json" \
	"$(q -c "SELECT attempt FROM payflow.steps WHERE operation_id = '$take' AND step_name = 'PROCESS_PAYMENT'")|$(q -c "SELECT '$take_ref'::jsonb->>'key'")"
s3 get "payments/$take/payment-result.attempt-2.json" "$WK_DIR/take-result.json"
pf_eq "takeover: which matches its reference" "$(q -c "SELECT '$take_ref'::jsonb->>'checksum'")" \
	"$(pf_payload_checksum "$WK_DIR/take-result.json")"

wk_invariants "$good" "$corrupt" "$missing" "$take" "$keyed" "$ktampered"
pf_done
