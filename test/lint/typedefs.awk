# The names a typedef declares, one per line (for pg_bsd_indent's -U):
# "typedef struct x { ... } name;", "typedef int name;",
# "typedef void (*name) (...);".
/^typedef/ { collecting = 1; text = ""; depth = 0 }
collecting {
	text = text " " $0
	line = $0
	depth += gsub(/\{/, "{", line) - gsub(/\}/, "}", line)
	if (depth > 0 || $0 !~ /;[ \t]*(\/\*.*)?$/)
		next
	collecting = 0
	if (index(text, "}"))
		sub(/.*\}/, "", text)
	else if (match(text, /\(\*[ \t]*[A-Za-z_][A-Za-z0-9_]*[ \t]*\)/))
		text = substr(text, RSTART + 2, RLENGTH - 3)
	else
		sub(/[ \t]*(\[[^]]*\])?[ \t]*;.*$/, "", text)
	n = split(text, word, /[^A-Za-z0-9_]+/)
	for (i = n; i > 0; i--)
		if (word[i] != "")
		{
			print word[i]
			break
		}
}
