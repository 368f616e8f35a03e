# test/soak/prng.bash — a tiny deterministic PRNG, so a seed names one run.
# Sourced.  bash's own $RANDOM would do, but its sequence changes between
# bash versions and is re-seeded in every subshell; this one is the same
# everywhere.  Results come back in SOAK_R (no subshell, which would lose
# the state).
#
#   soak_seed N        start the sequence of seed N
#   soak_rand N        SOAK_R = 0 .. N-1
#   soak_rand_between LO HI   SOAK_R = LO .. HI

soak_rand_state=1

soak_seed() {
	# splitmix-like scramble, so nearby seeds give unrelated sequences
	local s=$(( ($1 + 0x9E3779B9) & 0x7fffffff ))
	s=$(( ((s ^ (s >> 15)) * 0x2C1B3C6D) & 0x7fffffff ))
	soak_rand_state=$(( (s ^ (s >> 12)) & 0x7fffffff ))
	[ "$soak_rand_state" -ne 0 ] || soak_rand_state=1
}

soak_rand() {
	# the C standard's LCG; the low bits are poor, so the high ones are used
	soak_rand_state=$(( (soak_rand_state * 1103515245 + 12345) & 0x7fffffff ))
	SOAK_R=$(( (soak_rand_state >> 8) % $1 ))
}

soak_rand_between() {
	soak_rand $(( $2 - $1 + 1 ))
	SOAK_R=$(( SOAK_R + $1 ))
}
