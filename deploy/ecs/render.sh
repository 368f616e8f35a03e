#!/usr/bin/env bash
# deploy/ecs/render.sh TASK-DEFINITION.json > rendered.json
#
# Replaces every ${Name} placeholder with the environment variable Name,
# escaped for a JSON string, and refuses (exit 2, naming them) when a
# placeholder has no variable: a task definition registered with a literal
# "${AccountId}" in it fails only when a task starts. An empty value is
# allowed (an empty setting counts as unset for payflow's programs).
# The placeholders are listed in deploy/README.md.
#
#   export AccountId=... Region=... (see deploy/README.md, "Task definitions")
#   deploy/ecs/render.sh deploy/ecs/payflow-relay.json > /tmp/relay.json
#   aws ecs register-task-definition --cli-input-json file:///tmp/relay.json
set -euo pipefail

if [ $# -ne 1 ] || [ ! -f "$1" ]; then
	echo "usage: $0 TASK-DEFINITION.json" >&2
	exit 2
fi
text=$(<"$1")
missing=()
# placeholder names are [A-Za-z][A-Za-z0-9]*: word splitting is safe here
for name in $({ grep -o '\${[A-Za-z][A-Za-z0-9]*}' "$1" || true; } | sort -u | sed 's/^\${\(.*\)}$/\1/'); do
	if [ -z "${!name+set}" ]; then
		missing+=("$name")
		continue
	fi
	value=${!name}
	if [[ $value == *[[:cntrl:]]* ]]; then
		echo "$0: the value of $name holds a control character" >&2
		exit 2
	fi
	if [[ $value == *'${'* ]]; then	# a later placeholder would be replaced inside it
		echo "$0: the value of $name holds \"\${\"" >&2
		exit 2
	fi
	value=${value//\\/\\\\}
	value=${value//\"/\\\"}
	# quoted pattern and replacement: no globbing, and '&' stays literal (bash 5.2)
	text=${text//"\${$name}"/"$value"}
done
if [ ${#missing[@]} -gt 0 ]; then
	echo "$0: no value for ${missing[*]} (export them; see deploy/README.md)" >&2
	exit 2
fi
printf '%s\n' "$text"
