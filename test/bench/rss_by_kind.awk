# Resident memory of a process by kind, from /proc/PID/smaps:
#   awk -v stack_kib=512 -f rss_by_kind.awk /proc/PID/smaps
# thread stacks (anonymous mappings of about stack_kib), malloc's heap and
# arenas (other anonymous memory), files (the program, libraries, locale).
/^[0-9a-f]+-[0-9a-f]+ / {
	split($1, a, "-")
	size = (strtonum("0x" a[2]) - strtonum("0x" a[1])) / 1024
	path = $6
	if (path == "" && size >= stack_kib - 8 && size <= stack_kib + 8)
		kind = "thread stacks"
	else if (path == "" || path == "[heap]")
		kind = "heap and arenas"
	else if (path ~ /^\[/)
		kind = "other"
	else
		kind = "files"
	next
}
/^Rss:/ { rss[kind] += $2 }
END {
	for (k in rss)
		printf "%s %d MiB, ", k, rss[k] / 1024
}
