#!/usr/bin/env bash
# Runs the model-loading fuzzer for N seconds (default 600), seeded with ONNX's conformance models.
# Needs the fuzz build: cmake --preset fuzz && cmake --build --preset fuzz
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-600}
fuzzer=build-fuzz/fuzz/load_model_fuzzer
corpus=build-fuzz/corpus
seeds=/usr/share/libonnx-testdata/data/node

mkdir -p "$corpus" build-fuzz/crashes
if [ -z "$(ls -A "$corpus")" ]; then
  for model in "$seeds"/*/model.onnx; do
    cp "$model" "$corpus/$(basename "$(dirname "$model")").onnx"
  done
fi
# Huge allocations a fuzzed shape asks for must fail as kiln errors, not abort the sanitizer.
export ASAN_OPTIONS=allocator_may_return_null=1:detect_leaks=1
"$fuzzer" "$corpus" -max_total_time="$seconds" -rss_limit_mb=4096 -timeout=30 \
  -artifact_prefix=build-fuzz/crashes/ -print_final_stats=1
