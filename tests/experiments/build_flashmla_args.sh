#!/usr/bin/env bash
# scripts/build-flashmla refuses, with exit 2 and a message naming the problem, what it cannot build
# from: no source tree given, a missing folder, a tree that is not FlashMLA or not CUTLASS. Needs no
# nvcc and no FlashMLA (every case is refused before anything compiles).
set -u
root="$1"
script="$root/scripts/build-flashmla"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
fail=0
expect() {  # $1 = exit code, $2 = text the message must hold, rest = arguments
  local code="$1" text="$2"; shift 2
  local out rc
  out="$("$script" "$@" 2>&1)"; rc=$?
  if [[ "$rc" != "$code" || "$out" != *"$text"* ]]; then
    echo "FAIL: build-flashmla $* -> exit $rc (want $code), output: $out"; fail=1
  else
    echo "ok: build-flashmla $* -> $rc"
  fi
}
expect 0 "--flashmla-src DIR" --help
expect 2 "--flashmla-src DIR is required" --prefix "$tmp/p"
expect 2 "no such folder" --flashmla-src "$tmp/none" --cutlass-src "$tmp/none" --prefix "$tmp/p"
mkdir -p "$tmp/notflash"
expect 2 "not a FlashMLA source tree" --flashmla-src "$tmp/notflash" --cutlass-src "$tmp/none" --prefix "$tmp/p"
# A tree with FlashMLA's layout (empty files) and no CUTLASS.
f="$tmp/flashmla/csrc"
mkdir -p "$f/sm90/decode/dense/instantiations" "$f/smxx/decode/combine" "$f/smxx/decode/get_decoding_sched_meta"
echo "struct DenseAttnDecodeParams {};" >"$f/params.h"
touch "$f/sm90/decode/dense/splitkv_mla.h" "$f/sm90/decode/dense/instantiations/bf16.cu" \
      "$f/smxx/decode/combine/combine.h" "$f/smxx/decode/combine/combine.cu" \
      "$f/smxx/decode/get_decoding_sched_meta/get_decoding_sched_meta.h" \
      "$f/smxx/decode/get_decoding_sched_meta/get_decoding_sched_meta.cu"
expect 2 "--cutlass-src DIR is required" --flashmla-src "$tmp/flashmla" --prefix "$tmp/p"
expect 2 "no such folder" --flashmla-src "$tmp/flashmla" --cutlass-src "$tmp/none" --prefix "$tmp/p"
mkdir -p "$tmp/notcutlass"
expect 2 "not a CUTLASS source tree" --flashmla-src "$tmp/flashmla" --cutlass-src "$tmp/notcutlass" --prefix "$tmp/p"
expect 2 "--jobs" --flashmla-src "$tmp/flashmla" --cutlass-src "$tmp/notcutlass" --prefix "$tmp/p" --jobs 0
expect 2 "unknown argument" --flashmla-src "$tmp/flashmla" --bogus
exit $fail
