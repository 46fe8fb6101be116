#!/usr/bin/env bash
# Usage: plugin_refusals.sh CANOPY PLUGIN_DIR SOURCE_DIR [PYTHON PYTHONPATH]
# Every bad plugin is refused with exit 2 and a message naming its file, by `canopy --load`, by
# CANOPY_PLUGINS and by Python's canopy.load (ValueError); nothing crashes, nothing is registered.
set -uo pipefail
canopy="$1" dir="$(realpath "$2")" src="$3" python="${4:-}" pythonpath="${5:-}"
lib() { echo "$dir/libcanopy_TestPlugin_$1.so"; }
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

# expect CODE PATTERN COMMAND...: COMMAND exits CODE and its stderr matches PATTERN (grep -E).
expect() {
  local code="$1" pattern="$2"
  shift 2
  local err rc
  err=$("$@" 2>&1 >/dev/null)
  rc=$?
  [ "$rc" -eq "$code" ] || fail "exit $rc, expected $code: $* ($err)"
  grep -qE -- "$pattern" <<<"$err" || fail "message '$err' does not match '$pattern': $*"
}

missing="$dir/no_such_plugin.so"
expect 2 "plugin $missing: no such file" "$canopy" --load "$missing" designs
expect 2 "plugin $src/README.md: cannot load it" "$canopy" --load "$src/README.md" designs
expect 2 "plugin $(lib no-entry-points): not a Canopy plugin" "$canopy" --load "$(lib no-entry-points)" designs
expect 2 "plugin $(lib abi): built against Canopy plugin ABI version [0-9]+, this Canopy has version [0-9]+" \
  "$canopy" --load "$(lib abi)" designs
expect 2 "plugin $(lib duplicate): design 'reference' exists already \(built in\)" \
  "$canopy" --load "$(lib duplicate)" designs
expect 2 "plugin $(lib nothing): registers no design" "$canopy" --load "$(lib nothing)" designs
# The same refusal through the environment, for any subcommand.
expect 2 "plugin $(lib abi): built against" env CANOPY_PLUGINS="$(lib abi)" "$canopy" check --designs reference
# A plugin that loads, whose design's plan throws: bad input naming the design and its library.
expect 2 "design 'test-plan-throws' \(from .*libcanopy_TestPlugin_plan-throws.so\): plan: this plan always throws" \
  "$canopy" --load "$(lib plan-throws)" check --designs test-plan-throws --batch 1 --tree 3 --prefix 8
# A refused library registers nothing: the duplicate's first, valid name is unknown after it.
out=$("$canopy" --load "$(lib plan-throws)" designs) || fail "designs with a good plugin: exit $?"
grep -qE "^\| test-plan-throws \(experimental\) \|.*\| $(lib plan-throws | sed 's/[.]/[.]/g') \|$" <<<"$out" ||
  fail "canopy designs does not list test-plan-throws with its library: $out"

if [ -n "$python" ]; then
  PYTHONPATH="$pythonpath" "$python" - "$dir" <<'PY' || fail "Python refusals"
import sys
import canopy

d = sys.argv[1]
lib = lambda fault: f"{d}/libcanopy_TestPlugin_{fault}.so"
for path, message in ((f"{d}/no_such_plugin.so", "no such file"), (lib("no-entry-points"), "not a Canopy plugin"),
                      (lib("abi"), "built against Canopy plugin ABI version"),
                      (lib("duplicate"), "design 'reference' exists already")):
    try:
        canopy.load(path)
    except ValueError as e:
        assert str(e).startswith(f"plugin {path}: ") and message in str(e), e
    else:
        raise AssertionError(f"{path} loaded")
assert "test-not-registered" not in [x["name"] for x in canopy.designs()]
canopy.load(lib("plan-throws"))
canopy.load(lib("plan-throws"))  # again: a no-op
[entry] = [x for x in canopy.designs() if x["name"] == "test-plan-throws"]
assert entry["origin"] == lib("plan-throws") and entry["experimental"], entry
try:
    canopy.Plan("test-plan-throws", heads=2, max_batch=1, max_nodes=4, max_prefix=8, mask="tree")
except ValueError as e:
    assert "plan: this plan always throws" in str(e), e
else:
    raise AssertionError("the throwing plan was accepted")
print("python refusals ok")
PY
fi
[ "$failures" -eq 0 ] && echo "plugin refusals ok"
exit $((failures > 0))
