# shellcheck shell=bash
# test/lib/released.sh — released versions of the extension, built from
# the commits extension/released-versions names (or, for a version it does
# not list, the git tag vVERSION). Sourced, not run.
#
# The repository keeps the update scripts and the source of the current
# version only (as pgvector and pgmq do); a released version's full install
# script is built from its tag with that tree's own make rule and put in
# the extension directory beside the installed update scripts, so that
# CREATE EXTENSION payflow VERSION 'X' works, until pf_released_cleanup.

pf_released_placed=()

# pf_released_install VERSION WORKDIR: false (and why on stderr) when the
# clone has no tag vVERSION (a shallow clone) or its build fails.
pf_released_install() {
	local v=$1 tree=$2/v$1 extdir rev
	extdir="$("${PG_CONFIG:-pg_config}" --sharedir)/extension"
	rev=$(awk -v v="$v" '$1 == v { print $2 }' "$(git rev-parse --show-toplevel)/extension/released-versions")
	[ -n "$rev" ] || rev=refs/tags/v$v
	if ! git rev-parse -q --verify "$rev^{commit}" >/dev/null 2>&1; then
		echo "no commit $rev for $v in this clone (a shallow clone?)" >&2
		return 1
	fi
	rm -rf "$tree"
	mkdir -p "$tree"
	git archive "$rev" | tar -x -C "$tree"
	if ! make -s -C "$tree" "extension/payflow--$v.sql" >"$tree.build.log" 2>&1; then
		echo "building payflow--$v.sql from $rev failed:" >&2
		cat "$tree.build.log" >&2
		return 1
	fi
	[ -f "$extdir/payflow--$v.sql" ] || pf_released_placed+=("$extdir/payflow--$v.sql")
	cp "$tree/extension/payflow--$v.sql" "$extdir/payflow--$v.sql"
}

# Removes the scripts pf_released_install put in the extension directory.
pf_released_cleanup() {
	local f
	for f in "${pf_released_placed[@]}"; do
		rm -f "$f"
	done
	pf_released_placed=()
}
