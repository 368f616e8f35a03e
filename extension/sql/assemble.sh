#!/bin/bash
# extension/sql/assemble.sh — builds payflow's install scripts from the one
# shared source (payflow.sql) and a flavour's helpers:
#
#   assemble.sh c VERSION     the C extension's payflow--VERSION.sql
#   assemble.sh c-file FILE   an update script for the C extension
#   assemble.sh dist VERSION  dist/payflow--VERSION.sql: the C-free flavour
#                             as a plain SQL file for psql -f (RDS, Aurora)
#   assemble.sh tle VERSION   dist/payflow-tle--VERSION.sql: the same
#                             registered with pg_tle, then CREATE EXTENSION
#
# The shared source names two places, "--@@ flavour helpers @@" and
# "--@@ flavour grants @@", where the flavour's helpers.sql and grants.sql
# go.  Nothing else differs: a business rule is never written twice.
# "--@@ include FILE @@" puts extension/sql/FILE in its place: a concern
# kept in a file of its own (admin.sql), shared by the full script and,
# until its version is released, the update script that brings it; "--@@
# flavour include FILE @@" the flavour's own FILE (the transition check: C,
# or its PL/pgSQL twin).  A released update script includes only frozen
# copies, released/VERSION/... (released/README.md).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
mode=${1:?usage: assemble.sh c|dist|tle VERSION}
version=${2:?usage: assemble.sh c|dist|tle VERSION}

# The first version with a C-free flavour: the update scripts from it on
# are also assembled for that flavour.
first_sql_version=0.3.0

# The update script of a version extension/released-versions lists may
# include only frozen copies (released/...): a live file goes on changing,
# and the update to that version would change with it.
frozen_only() {
	local script=$1 to
	to=${script##*--}
	to=${to%.sql}
	if awk -v v="$to" '$1 == v { found = 1 } END { exit !found }' "$here/../released-versions" 2>/dev/null &&
		awk '$1 == "--@@" && ($2 == "include" && $3 !~ /^released\// || $3 == "include" && $4 !~ /^released\//) { live = 1 }
			END { exit !live }' "$script"; then
		echo "assemble.sh: $script updates to released $to but includes a live file; include its copy under released/ (released/README.md)" >&2
		exit 1
	fi
}

# A shared source with one flavour's files in place.
flavoured() {
	local flavour=$1 source=$2
	case $source in *payflow--*--*.sql) frozen_only "$source" ;; esac
	# An included file may include others (outbox_write_ctes.sql, a part of
	# the statements that write events): lines are expanded wherever they
	# come from, an include of a file already being included is an error.
	awk -v here="$here" -v flavour="$flavour" -v helpers="$here/flavour-$flavour/helpers.sql" -v grants="$here/flavour-$flavour/grants.sql" '
		function include(file,   line) {
			if (file in open_now) {
				print "assemble.sh: " file " includes itself" > "/dev/stderr"
				exit 1
			}
			open_now[file] = 1
			while ((getline line < file) > 0) expand(line)
			close(file)
			delete open_now[file]
		}
		function expand(line,   f, n) {
			n = split(line, f)	# (as fields: blanks around are no field)
			if (line == "--@@ flavour helpers @@") include(helpers)
			else if (line == "--@@ flavour grants @@") include(grants)
			else if (f[1] == "--@@" && f[2] == "include" && f[4] == "@@" && n == 4) include(here "/" f[3])
			else if (f[1] == "--@@" && f[2] == "flavour" && f[3] == "include" && f[5] == "@@" && n == 5) include(here "/flavour-" flavour "/" f[4])
			else print line
		}
		{ expand($0) }
	' "$source"
}

body() {
	flavoured "$1" "$here/payflow.sql"
}

# "FILE FROM TO" for each payflow--FROM--TO.sql with FROM at or after
# first_sql_version, in version order.
update_steps() {
	local f from to
	for f in $(cd "$here" && ls payflow--*--*.sql 2>/dev/null | sort -V); do
		from=${f#payflow--}
		to=${from#*--}
		from=${from%%--*}
		if [ "$(printf '%s\n%s\n' "$first_sql_version" "$from" | sort -V | head -n1)" = "$first_sql_version" ]; then
			echo "$f $from ${to%.sql}"
		fi
	done
}


# Without the guard of the scripts PostgreSQL reads itself ("\echo Use
# CREATE EXTENSION / ALTER EXTENSION ... \quit"): psql would quit there.
without_guard() {
	grep -v '^\\echo Use ".*" to load this file\. \\quit$'
}

case "$mode" in
c)
	body c
	;;
c-file)
	# an update script: the C flavour's files in place of its markers
	flavoured c "$version"
	;;
dist)
	sed "s/@VERSION@/$version/g" "$here/flavour-sql/dist_prologue.sql"
	body sql | without_guard
	sed "s/@VERSION@/$version/g" "$here/flavour-sql/dist_epilogue.sql"
	# Updates of an older install: each step runs when the installed
	# version is its start, and moves the version on.
	update_steps | while read -r update from to; do
		echo "SELECT :'payflow_installed' = '$from' AS payflow_step \\gset"
		echo "\\if :payflow_step"
		flavoured sql "$here/$update" | without_guard
		echo "CREATE OR REPLACE FUNCTION payflow._dist_version() RETURNS text LANGUAGE sql IMMUTABLE AS \$\$ SELECT '$to'::text \$\$;"
		echo "SELECT '$to' AS payflow_installed \\gset"
		echo "\\endif"
	done
	sed "s/@VERSION@/$version/g" "$here/flavour-sql/dist_final.sql"
	;;
tle)
	script=$(body sql | without_guard)
	# pg_tle refuses a script holding its own delimiters (injection guard)
	if grep -q '\$_pgtle_' <<<"$script"; then
		echo "assemble.sh: the script contains a pg_tle delimiter" >&2
		exit 1
	fi
	# The full script, as a first registration or as one more version.
	sed "s/@VERSION@/$version/g" "$here/flavour-sql/tle_prologue.sql"
	printf '%s\n' "$script"
	sed "s/@VERSION@/$version/g" "$here/flavour-sql/tle_epilogue.sql"
	printf '%s\n' "$script"
	echo '$_pgtle_$);'
	echo '\endif'
	# ... and each update path not yet registered.
	update_steps | while read -r update from to; do
		echo "SELECT NOT EXISTS (SELECT FROM pgtle.extension_update_paths('payflow') WHERE source = '$from' AND target = '$to' AND path IS NOT NULL) AS payflow_path_new \\gset"
		echo "\\if :payflow_path_new"
		echo "SELECT pgtle.install_update_path('payflow', '$from', '$to',"
		echo '$_pgtle_$'
		flavoured sql "$here/$update" | without_guard
		echo '$_pgtle_$);'
		echo "\\endif"
	done
	sed "s/@VERSION@/$version/g" "$here/flavour-sql/tle_final.sql"
	;;
*)
	echo "assemble.sh: unknown mode $mode (c, dist or tle)" >&2
	exit 2
	;;
esac
