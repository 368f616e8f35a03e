# test/soak/load.bash — the steady stream of submissions.  Sourced; run
# soak_load in the background and create $SOAK_DIR/stop-load to end it.
#
#   soak_load RATE     RATE operations a second, in small batches every 200 ms
#
# Payment n is "soak-<seed>-<n>" with details derived from n alone, so a
# batch that failed (the database restarting) is simply sent again: the
# idempotency key (the payment id) gives back the operations a lost answer
# hid, and soak.submitted records each once, in submit's own transaction.
# Submits run as payflow_app, the role an application has.

soak_submit_batch() {
	local from=$1 to=$2
	pf_psql -Atq -c "SET ROLE payflow_app" -c "
		WITH s AS (
			SELECT n, 'soak-$SOAK_SEED-' || n AS payment_id,
				   payflow.submit('soak-$SOAK_SEED-' || n,
						jsonb_build_object('amount', (100 + n % 900) || '.' || lpad((n % 100)::text, 2, '0'),
										   'currency', 'EUR', 'customer', 'C-' || (n % 17),
										   'description', 'soak order ' || n),
						correlation_id => 'soak-corr-' || n) AS operation_id
			  FROM generate_series($from, $to) n)
		INSERT INTO soak.submitted (n, payment_id, operation_id)
		SELECT n, payment_id, operation_id FROM s
		ON CONFLICT (n) DO NOTHING" >/dev/null
}

soak_load() {
	local rate=$1 n=0 due start now
	start=${EPOCHREALTIME/./}
	while [ ! -e "$SOAK_DIR/stop-load" ]; do
		now=${EPOCHREALTIME/./}
		due=$(((now - start) * rate / 1000000))
		# after an outage, catch up in bounded batches
		[ $((due - n)) -le 100 ] || due=$((n + 100))
		if [ "$due" -gt "$n" ]; then
			if soak_submit_batch $((n + 1)) "$due" 2>>"$SOAK_DIR/load.log"; then
				n=$due
			else
				printf '%s batch %s..%s failed, sent again next round\n' "$(date -u +%T.%3N)" $((n + 1)) "$due" \
					>>"$SOAK_DIR/load.log"
			fi
		fi
		sleep 0.2
	done
	echo "$n" >"$SOAK_DIR/submitted.count"
}
