#!/bin/sh
# Usage: canopy_expect_exit.sh CODE COMMAND [ARGS...]: passes when COMMAND exits with CODE.
expected="$1"
shift
"$@"
rc=$?
if [ "$rc" -ne "$expected" ]; then
  echo "exit code $rc, expected $expected: $*" >&2
  exit 1
fi
