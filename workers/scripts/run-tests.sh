#!/bin/sh
# Run each unit-test binary; print one summary line and fail if any failed.
passed=0
failed=0
for t in "$@"; do
	if "$t"; then
		passed=$((passed + 1))
	else
		echo "FAILED: $t" >&2
		failed=$((failed + 1))
	fi
done
echo "workers: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
