# Sourced by the command-line tests (cli_refusals.sh, no_gpu_exit_codes.sh): one way to state what a
# command must do, and a count of what did not.
# expect CODE NEEDLE COMMAND...: the command exits CODE and, unless NEEDLE is empty, says NEEDLE on
# stderr; its output stays in out.log and err.log for further checks. A miss is printed and counted.
# fail WHAT: a check of the script's own that missed, printed and counted the same way.
failures=0
expect() {
  code="$1"; needle="$2"; shift 2
  "$@" > out.log 2> err.log
  rc=$?
  if [ "$rc" -ne "$code" ] || { [ -n "$needle" ] && ! grep -qF -- "$needle" err.log; }; then
    echo "FAILED: exit $rc (expected $code${needle:+, stderr with '$needle'}): $*" >&2
    cat err.log >&2
    failures=$((failures + 1))
  fi
}
fail() {
  echo "FAILED: $*" >&2
  failures=$((failures + 1))
}
