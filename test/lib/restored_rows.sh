# shellcheck shell=bash
# test/lib/restored_rows.sh — the check every backup test ends with: a
# restored database holds what the dumped one held. Sourced, not run.
#
#   pf_same_restored_rows LABEL SOURCE TARGET   SOURCE/TARGET: functions that
#                                               run psql -Atq ARGS on each side
#
# Every table of schema payflow, row for row (count and md5 of the rows),
# but those that hold no data (the sweep's and the outbox cursor's
# positions, the C-free flavour's binding key and last-NOTIFY mark); of
# the tables the install seeds, the rows added since (the seeded ones carry
# the install's time). Then history() and status() of every operation.
pf_same_restored_rows() {
	local label=$1 src=$2 dst=$3 t sql
	for t in $("$src" -c "SELECT relname FROM pg_class WHERE relnamespace = 'payflow'::regnamespace AND relkind = 'r'
						  AND relname NOT IN ('scheduler_sweep', '_outbox_cursor', '_tenant_key', '_wakeup_marks')
						ORDER BY 1"); do
		sql="SELECT count(*) || ' ' || coalesce(md5(string_agg(x::text, '|' ORDER BY x::text)), '-') FROM payflow.$t x"
		case $t in
			destinations) sql="$sql WHERE name NOT IN ('payment-requests', 'payment-completed', 'invoice-requests', 'operation-events')" ;;
			pipelines) sql="$sql WHERE version > 1" ;;
		esac
		pf_eq "${label}payflow.$t: every row restored" "$("$src" -c "$sql")" "$("$dst" -c "$sql")"
	done
	sql="SELECT string_agg(h::text, '|' ORDER BY o.id, n) FROM payflow.operations o, payflow.history(o.id) WITH ORDINALITY h(e, n)"
	pf_eq "${label}history() of every operation equal" "$("$src" -c "$sql")" "$("$dst" -c "$sql")"
	sql="SELECT string_agg(payflow.status(id)::text, '|' ORDER BY id) FROM payflow.operations"
	pf_eq "${label}status() of every operation equal" "$("$src" -c "$sql")" "$("$dst" -c "$sql")"
}
