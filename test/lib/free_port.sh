# shellcheck shell=bash
# test/lib/free_port.sh — a loopback port for a test's own listener.  Sourced.
#
# pf_free_port   print a port in 20000-32767 that nothing listens on
#
# Why this range: Linux hands out outgoing connections' ports from
# 32768-60999 (ip_local_port_range), and tests run in parallel lanes that
# open thousands of connections; a random port up there can be taken by one
# of them between the pick and the bind ("Address already in use", seen in
# CI). Below it only listeners compete, and the check skips those.
pf_free_port() {
	local p _
	for _ in $(seq 1 50); do
		p=$((20000 + RANDOM % 12768))
		# nothing answers a connect: free (bash's /dev/tcp, no extra tool)
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			echo "$p"
			return 0
		fi
	done
	return 1
}
