#!/bin/bash
# Every setting the edge programs read (workers/src/lib/config_table.c, and
# any other environment variable their code names), every GUC the extension
# defines (extension/src/*.c) and every payflow SQLSTATE it raises
# (extension/sql) is documented: named in README.md, docs/ or
# deploy/README.md. A name documented in a row of its family may be
# shortened to its tail there ("`PAYFLOW_LEGACY_TIMEOUT`, `_CONNECT_TIMEOUT`").
set -euo pipefail
cd "$(dirname "$0")/../.."
source test/lib/assert.sh

docs=(README.md docs/*.md deploy/README.md)

# documented NAME: the whole name, or `_TAIL` on a line with its head
documented() {
	local name=$1 head tail
	grep -qF -- "$name" "${docs[@]}" && return 0
	IFS=_ read -r -a words <<<"$name"
	for ((k = 2; k < ${#words[@]}; k++)); do
		head=$(IFS=_; echo "${words[*]:0:k}")
		tail=_$(IFS=_; echo "${words[*]:k}")
		grep -F -- "\`$tail\`" "${docs[@]}" | grep -qF -- "$head" && return 0
	done
	return 1
}

check_all() {	# check_all WHAT NAME...
	local what=$1 missing=()
	shift
	for name in "$@"; do
		documented "$name" || missing+=("$name")
	done
	pf_ok "$# ${what} found in the code" test "$#" -gt 0
	pf_eq "every one of them is documented (missing: ${missing[*]:-none})" 0 "${#missing[@]}"
}

mapfile -t settings < <(grep -oE '^\s*\{"[A-Z][A-Z0-9_]+"' workers/src/lib/config_table.c | grep -oE '[A-Z][A-Z0-9_]+' | sort -u)
# the environment the programs read besides their settings (ECS, AWS, the config file)
mapfile -t environment < <(grep -rhoE '"(ECS|AWS|PAYFLOW)_[A-Z0-9_]+"' workers/src --include=*.c --include=*.h |
	tr -d '"' | sort -u | grep -vxF -f <(printf '%s\n' "${settings[@]}") || true)
mapfile -t gucs < <(grep -rhoE 'Define[A-Za-z]+Variable\("payflow\.[a-z_]+"' extension/src | grep -oE 'payflow\.[a-z_]+' | sort -u)
mapfile -t sqlstates < <(grep -rhoE "ERRCODE = 'PF[0-9]+'" extension/sql --include=*.sql | grep -oE 'PF[0-9]+' | sort -u)

check_all "settings of the edge programs" "${settings[@]}"
check_all "other environment variables the programs read" "${environment[@]}"
check_all "GUCs of the extension" "${gucs[@]}"
check_all "payflow SQLSTATEs" "${sqlstates[@]}"

# the check can fail: a name nobody documented is caught
if documented PAYFLOW_NO_SUCH_SETTING_ANYWHERE; then
	pf_ok "an undocumented name is found missing" false
else
	pf_ok "an undocumented name is found missing" true
fi
pf_done
