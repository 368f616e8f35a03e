#!/bin/bash
# The C code's layout: PostgreSQL's, as pgindent makes it, by Debian's
# pg_bsd_indent (the indenter pgindent drives) with pgindent's options,
# except for two: lines are not broken before 140 columns (-l140 -lc140:
# the edge programs' lines run past pgindent's 79), and block comments are
# left as written (-nfcb: rewrapping every comment would hide the change
# in each diff).
#
#   test/lint/c_format.sh           prints the diff of each file whose layout
#                                   differs; exits 1 if any
#   test/lint/c_format.sh --write   lays them out
#
# pg_bsd_indent must know every type name, or it reads "name *x" as a
# product: each tree's own typedefs are read from its code (typedefs.awk),
# the others are listed in typedefs-extension.list and
# typedefs-workers.list.  extension/ and the edge programs are separate
# programs: a name that is a type in one may be a variable in the other
# ("worker"), so each has its list.  What pg_bsd_indent gets wrong the
# code does without, as PostgreSQL's does: compound literals
# ("(type) {...}"), designated initializers ("{.a = 1}") and non-ASCII
# bytes in string literals (it garbles them; "\u2026" is the same UTF-8).
set -euo pipefail
cd "$(dirname "$0")/../.."
write=false
[ "${1:-}" = --write ] && write=true

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

indent_opts=(-bad -bap -bbb -bc -bl -cli1 -cp33 -cdb -nce -d0 -di12 -nfc1 -i4 -lp -lpl -nip -npro -sac -tpg -ts4
	-l140 -lc140 -nfcb)

# typedefs OUT LIST FILES...: the type names of one program
typedefs() {
	local out=$1 list=$2
	shift 2
	{ grep -v '^#' "$list"; awk -f test/lint/typedefs.awk "$@"; } | sort -u >"$out"
}

# layout TYPEDEFS FILE OUT: FILE laid out in OUT.  pg_bsd_indent separates
# a definition's return type from its "*" by tabs ("char\t   *"), which
# pgindent puts back as "char *": so does the sed.
layout() {
	local rc=0
	pg_bsd_indent "${indent_opts[@]}" "-U$1" "$2" "$3.tmp" 2>"$3.err" || rc=$?
	if [ "$rc" != 0 ] || [ -s "$3.err" ]; then	# a parse error: the output is not to be trusted
		sed "s|^|$2: |" "$3.err" >&2
		return 1
	fi
	sed -E 's/^([A-Za-z_][A-Za-z0-9_ ]*[A-Za-z0-9_])[ \t]+(\*+)$/\1 \2/' "$3.tmp" >"$3"
}

mapfile -t ext_files < <(git ls-files 'extension/*.c' 'extension/*.h')
mapfile -t other_files < <(git ls-files '*.c' '*.h' | grep -v '^extension/')
typedefs "$scratch/extension.list" test/lint/typedefs-extension.list "${ext_files[@]}"
typedefs "$scratch/workers.list" test/lint/typedefs-workers.list "${other_files[@]}"

differ=0
check() {	# check TYPEDEFS FILE...
	local list=$1 f out=$scratch/out
	shift
	for f in "$@"; do
		if ! layout "$list" "$f" "$out"; then
			differ=1
		elif ! cmp -s "$f" "$out"; then
			if $write; then
				cat "$out" >"$f"
				echo "laid out: $f"
			else
				diff -u --label "$f" --label "$f (laid out)" "$f" "$out" || true
				differ=1
			fi
		fi
	done
}
check "$scratch/extension.list" "${ext_files[@]}"
check "$scratch/workers.list" "${other_files[@]}"
if [ "$differ" = 1 ] && ! $write; then
	echo "c_format: the files above differ from their layout (test/lint/c_format.sh --write lays them out)" >&2
fi
exit "$differ"
