# test/soak/collect.bash — after the run, brings the evidence into schema
# soak, where invariants.sql and report.sql read it: the runner's files
# (faults, poison and duplicate messages, size samples), the legacy DBMS's
# charges, the invoice API's invoices and every message left in a DLQ.
# Sourced.
#
#   soak_collect_runner_files   faults, poison and duplicates sent (once the load stopped)
#   soak_collect                the rest, once the pipeline is quiet

soak_copy_file() {
	local table=$1 columns=$2 file=$3 select=$4
	[ -s "$file" ] || return 0
	pf_psql -q -c "CREATE TEMP TABLE f ($columns)" -c "\\copy f FROM '$file'" \
		-c "INSERT INTO soak.$table $select" >/dev/null
}

soak_collect_runner_files() {
	soak_copy_file faults "kind text, args text, s bigint, e bigint, ok boolean" "$SOAK_DIR/faults.tsv" \
		"SELECT kind, args, to_timestamp(s / 1000.0), to_timestamp(e / 1000.0), ok FROM f"
	soak_copy_file poison "marker text, kind text, queue text, s bigint" "$SOAK_DIR/poison.tsv" \
		"SELECT marker, kind, queue, to_timestamp(s / 1000.0) FROM f"
	soak_copy_file duplicates "event_id text, operation_id text, queue text, s bigint" "$SOAK_DIR/duplicates.tsv" \
		"SELECT event_id, operation_id, queue, to_timestamp(s / 1000.0) FROM f"
}

soak_collect() {
	soak_copy_file sizes "at timestamptz, relname text, total bigint, idx bigint, live bigint, dead bigint" "$SOAK_DIR/sizes.tsv" \
		"SELECT * FROM f"

	pf_psql -d legacy -Atq -c "\\copy (SELECT charge_id, idempotency_key, payment_id FROM charges
									   WHERE payment_id LIKE 'soak-$SOAK_SEED-%') TO STDOUT" |
		pf_psql -q -c "\\copy soak.charges FROM STDIN"
	curl -fsS "http://127.0.0.1:$SOAK_INVOICE_PORT/_invoices" | node -e '
		let s = ""; process.stdin.on("data", (c) => s += c).on("end", () => {
			for (const i of JSON.parse(s).invoices)
				if (String(i.input?.paymentId ?? "").startsWith(process.argv[1]))
					console.log([i.id, i.idempotencyKey, i.input.operationId].join("\t"));
		})' "soak-$SOAK_SEED-" | pf_psql -q -c "\\copy soak.invoices FROM STDIN"

	local name url
	for name in payment-requests payment-completed invoice-requests operation-events; do
		url=$(soak_dlq_url "$name")
		node test/emulator/sqs-read.mjs "$url" --idle 2 --visibility 300 2>>"$SOAK_DIR/collect.log" | node -e '
			const rl = require("readline").createInterface({ input: process.stdin });
			const csv = (v) => "\"" + String(v).replaceAll("\"", "\"\"") + "\"";
			rl.on("line", (l) => console.log(csv(process.argv[1]) + "," + csv(JSON.parse(l).body)));' "$name" |
			pf_psql -q -c "\\copy soak.dlq FROM STDIN WITH (FORMAT csv)"
	done
}

# messages still in the work queues (visible or in flight)
soak_queued() {
	node test/emulator/sqs-count.mjs "$(soak_queue_url payment-requests)" "$(soak_queue_url payment-completed)" \
		"$(soak_queue_url invoice-requests)" 2>/dev/null |
		sed -n 's/.*"visible":\([0-9]*\),"notVisible":\([0-9]*\).*/\1+\2/p' | paste -sd+ | bc
}
