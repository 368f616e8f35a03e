# test/soak/plan.bash — the fault plan: which fault, when, with which
# parameters, all drawn from the seed before the run starts, so a seed
# names the same plan every time (what the pipeline does in between still
# depends on timing).  Sourced; needs prng.bash.
#
#   soak_plan DURATION_S FILE    writes "at_ms<TAB>kind<TAB>args" lines, by time
#
# Counts grow with the duration (a base plus so many per 10 minutes); the
# moments fall between 10% and 80% of the load phase, so the last fault has
# time to show its effect before the load stops.  The two faults that stop
# everything (PostgreSQL, the emulator) keep 30 s apart when they can, so
# the recovery of each can be seen.

# kind base per-10-minutes
SOAK_FAULT_KINDS="
kill-relay 2 5
kill-payment 2 5
kill-postprocess 2 5
kill-invoice 2 5
pg-restart 1 3
emulator-restart 1 3
legacy-slow 1 5
legacy-timeout 1 4
legacy-transient 1 6
legacy-disconnect 1 3
legacy-permanent 1 3
invoice-429 1 5
invoice-503 1 5
invoice-timeout 1 4
invoice-drop 1 3
duplicates 2 6
poison 2 5
"

# the parameters of one fault, drawn from the sequence, in SOAK_ARGS (no
# subshell: it would lose the sequence's state)
soak_plan_args() {
	case $1 in
		kill-*) soak_rand_between 300 3000; SOAK_ARGS="$SOAK_R" ;;        # ms before the restart
		pg-restart) soak_rand_between 1000 5000; SOAK_ARGS="$SOAK_R" ;;   # ms down
		emulator-restart) soak_rand_between 1000 6000; SOAK_ARGS="$SOAK_R" ;;
		legacy-slow) soak_rand_between 1 3; local s=$SOAK_R; soak_rand_between 3 10; SOAK_ARGS="$s $SOAK_R" ;;
		legacy-timeout | legacy-disconnect | invoice-timeout | invoice-drop)
			soak_rand_between 1 3; local c=$SOAK_R; soak_rand 2; SOAK_ARGS="$c $SOAK_R" ;;  # count, after the side effect?
		legacy-transient) soak_rand_between 2 8; SOAK_ARGS="$SOAK_R" ;;
		legacy-permanent) SOAK_ARGS=1 ;;
		invoice-429) soak_rand_between 2 6; local c=$SOAK_R; soak_rand_between 1 3; SOAK_ARGS="$c $SOAK_R" ;;
		invoice-503) soak_rand_between 2 6; SOAK_ARGS="$SOAK_R" ;;
		duplicates) soak_rand_between 3 10; SOAK_ARGS="$SOAK_R" ;;
		poison) soak_rand_between 1 3; SOAK_ARGS="$SOAK_R" ;;
	esac
}

soak_plan() {
	local duration_s=$1 file=$2
	local lo=$((duration_s * 100)) hi=$((duration_s * 800))   # ms: 10% .. 80%
	local kind base per10 n i at tries ok big_at=() b
	: >"$file.unsorted"
	while read -r kind base per10; do
		[ -n "$kind" ] || continue
		n=$((base + duration_s * per10 / 600))
		for ((i = 0; i < n; i++)); do
			tries=0
			while :; do
				soak_rand $((hi - lo)); at=$((lo + SOAK_R))
				ok=1
				if [ "$kind" = pg-restart ] || [ "$kind" = emulator-restart ]; then
					for b in "${big_at[@]}"; do
						[ $((at > b ? at - b : b - at)) -ge 30000 ] || ok=0
					done
				fi
				tries=$((tries + 1))
				[ $ok = 1 ] || [ $tries -ge 30 ] && break
			done
			case $kind in pg-restart | emulator-restart) big_at+=("$at") ;; esac
			soak_plan_args "$kind"
			printf '%s\t%s\t%s\n' "$at" "$kind" "$SOAK_ARGS" >>"$file.unsorted"
		done
	done <<<"$SOAK_FAULT_KINDS"
	sort -n -k1,1 "$file.unsorted" >"$file"
	rm -f "$file.unsorted"
}
