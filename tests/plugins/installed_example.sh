#!/usr/bin/env bash
# Usage: installed_example.sh BUILD_DIR SOURCE_DIR WORK GENERATOR CXX [CUDA_COMPILER [PYTHON]]
# The installed package end to end: `cmake --install` to WORK/prefix; examples/out-of-tree-design
# copied from the prefix (not the source tree) and built against the prefix alone; its design listed
# with its library, checked (passes), run beside kokkos-team through CANOPY_PLUGINS, checked on a
# trace, and run from the installed Python package; the same example built with its deliberate bug
# fails the check.
set -euo pipefail
build="$1" src="$2" work="$3" generator="$4" cxx="$5" cuda="${6:-}" python="${7:-}"
rm -rf "$work"
mkdir -p "$work"
prefix="$work/prefix"
step() { echo "== $*"; }

step "install to $prefix"
cmake --install "$build" --prefix "$prefix" >"$work/install.log"
canopy="$prefix/bin/canopy"
for f in include/canopy/canopy_Design.hpp include/canopy/canopy_Plugin.hpp lib/cmake/Canopy/CanopyConfig.cmake \
         lib/cmake/Canopy/CanopyConfigVersion.cmake share/canopy/examples/out-of-tree-design/CMakeLists.txt; do
  [ -f "$prefix/$f" ] || { echo "not installed: $f" >&2; exit 1; }
done
# Internal headers stay out.
if [ -e "$prefix/include/canopy/canopy_CostModel.hpp" ] || [ -e "$prefix/include/canopy/canopy_VerifyAttention_spec.hpp" ]; then
  echo "an internal header was installed" >&2
  exit 1
fi

# build NAME [CMAKE ARGS...]: the installed example, configured from the prefix only.
build_example() {
  local name="$1"
  shift
  cp -r "$prefix/share/canopy/examples/out-of-tree-design" "$work/$name"
  local args=(-S "$work/$name" -B "$work/$name/build" -G "$generator" -DCMAKE_BUILD_TYPE=Release
              -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_FIND_PACKAGE_NO_PACKAGE_REGISTRY=ON)
  [ -n "$cuda" ] && args+=(-DCMAKE_CUDA_COMPILER="$cuda")
  cmake "${args[@]}" "$@" >"$work/$name.configure.log"
  cmake --build "$work/$name/build" >"$work/$name.build.log"
  grep -q "^Canopy_DIR:PATH=$prefix/" "$work/$name/build/CMakeCache.txt" || { echo "Canopy not found in the prefix" >&2; exit 1; }
  # Nothing of the source or build tree: the prefix's headers and libraries alone.
  if grep -qE "$src/(core|backends)|$build/(core|backends)" "$work/$name/build/build.ninja" 2>/dev/null ||
     grep -rqE "$src/(core|backends)|$build/(core|backends)" "$work/$name/build/CMakeFiles" 2>/dev/null; then
    echo "the example reached into the source or build tree" >&2
    exit 1
  fi
}

step "example from the prefix"
build_example example
lib="$work/example/build/libexample_designs.so"
lib=$(realpath "$lib")

step "canopy designs lists it with its library"
"$canopy" --load "$lib" designs | tee "$work/designs.txt"
grep -qE "^\| example-host \| host \| yes \| .* \| $lib \|$" "$work/designs.txt"

step "canopy check passes"
"$canopy" --load "$lib" check --designs example-host,kokkos-team --batch 2 --tree 9 --prefix 64 --mask tree
"$canopy" --load "$lib" check --designs example-host --batch 2 --tree 9 --prefix 64 --mask parents

if grep -qE "^\| example-cuda \| CUDA device \| yes " "$work/designs.txt"; then
  step "the CUDA example design passes on this GPU"
  "$canopy" --load "$lib" check --designs example-cuda --batch 2 --tree 9 --prefix 64 --mask tree
fi

step "canopy check on a trace"
"$canopy" --load "$lib" check --trace "$src/data/ddtree_values_h8.h5" --designs example-host --steps 1

step "canopy run beside kokkos-team, the plugin from CANOPY_PLUGINS"
CANOPY_PLUGINS="$lib" "$canopy" run "$work/example/compare.toml" --out "$work/run" --quiet | tee "$work/run.txt"
grep -qE "^\| example-host " "$work/run.txt" && grep -qE "^\| kokkos-team " "$work/run.txt"

step "the deliberately wrong design fails the check"
build_example wrong -DEXAMPLE_DELIBERATE_BUG=ON
set +e
"$canopy" --load "$work/wrong/build/libexample_designs.so" check --designs example-host --batch 2 --tree 9 --prefix 64 --mask tree
rc=$?
set -e
[ "$rc" -eq 1 ] || { echo "the wrong design's check exited $rc, expected 1" >&2; exit 1; }

step "two libraries with one design name: the second is refused"
set +e
err=$("$canopy" --load "$lib" --load "$work/wrong/build/libexample_designs.so" designs 2>&1 >/dev/null)
rc=$?
set -e
[ "$rc" -eq 2 ] && grep -q "design 'example-host' exists already (from $lib)" <<<"$err" || { echo "duplicate: $rc $err" >&2; exit 1; }

if [ -n "$python" ]; then
  step "the installed Python package runs it"
  PYTHONPATH="$(echo "$prefix"/lib*/python3/site-packages)" "$python" - "$lib" <<'PY'
import sys
import numpy as np
import canopy
import canopy.problems as problems

lib = sys.argv[1]
canopy.load(lib)
[entry] = [d for d in canopy.designs() if d["name"] == "example-host"]
assert entry["origin"] == lib and entry["runnable"], entry
p = problems.random_problem(seed=3, batch=3, heads=2, max_prefix=40, max_tree=9, mask="tree", dominant=True)
outs = {}
for design in ("reference", "example-host"):
    outs[design] = problems.empty_out(p)
    canopy.verify_attention(p["q"], p["kv_pool"], outs[design], **problems.metadata(p), mask="tree",
                            sm_scale=p["sm_scale"], design=design)
ref, got = (problems.from_bf16_bits(outs[d]) for d in ("reference", "example-host"))
rel = np.linalg.norm(got - ref) / np.linalg.norm(ref)
assert rel < 1e-2, rel
print(f"python: example-host within rel-L2 {rel:.1e} of reference")
PY
fi
echo "installed example ok"
