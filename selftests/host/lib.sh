# shellcheck shell=bash
# KTAP for the host tests (selftests/host/): plan N, result STATUS DESCRIPTION, finish NAME.
failed=0 n=0

plan() {
	echo "TAP version 13"
	echo "1..$1"
}

# One result: STATUS is a command's exit status (0: ok).
result() {
	n=$((n + 1))
	if [[ $1 == 0 ]]; then echo "ok $n $2"; else echo "not ok $n $2"; failed=1; fi
}

# The tally, and the script's exit status: non-zero if any result failed.
finish() {
	echo "# $1: $((n - failed)) of $n"
	exit "$failed"
}
