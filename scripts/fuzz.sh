#!/usr/bin/env bash
# Runs the libFuzzer targets: model loading and planning for MODEL_SECONDS (default 600), seeded with
# ONNX's conformance models and fuzz/model_seeds (attention as PyTorch exports it, Einsum chains, a Concat read by a Conv,
# and one small model per op with its own kernel, from fuzz/make_op_seeds.py: Resize, ConvTranspose, TopK, NonZero, Unique,
# NonMaxSuppression, ScatterND, GatherND, CumSum, Trilu, GroupNormalization-18, Gelu-20, Pad-19 wrap, RoiAlign,
# GridSample), then trace loading for TRACE_SECONDS (default 300), seeded with
# fuzz/trace_seeds and guided by fuzz/trace.dict.
# Then `kiln serve`'s HTTP request, config and repository-body decoders for SERVE_SECONDS (default 120),
# seeded with fuzz/serve_seeds, and its gRPC ModelInferRequest decoder for GRPC_SECONDS (default 120),
# seeded with fuzz/grpc_seeds.
#   scripts/fuzz.sh [MODEL_SECONDS [TRACE_SECONDS [SERVE_SECONDS [GRPC_SECONDS]]]]
# Needs the fuzz build: cmake --preset fuzz && cmake --build --preset fuzz
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-600}
trace_seconds=${2:-300}
serve_seconds=${3:-120}
grpc_seconds=${4:-120}
fuzzer=build-fuzz/fuzz/load_model_fuzzer
corpus=build-fuzz/corpus
seeds=/usr/share/libonnx-testdata/data/node

mkdir -p "$corpus" build-fuzz/crashes
if [ -z "$(ls -A "$corpus")" ]; then
  for model in "$seeds"/*/model.onnx; do
    cp "$model" "$corpus/$(basename "$(dirname "$model")").onnx"
  done
fi
cp -n fuzz/model_seeds/*.onnx "$corpus/"
# Huge allocations a fuzzed shape asks for must fail as kiln errors, not abort the sanitizer.
export ASAN_OPTIONS=allocator_may_return_null=1:detect_leaks=1
"$fuzzer" "$corpus" -max_total_time="$seconds" -rss_limit_mb=4096 -timeout=30 \
  -artifact_prefix=build-fuzz/crashes/ -print_final_stats=1

trace_corpus=build-fuzz/trace_corpus
mkdir -p "$trace_corpus"
cp -n fuzz/trace_seeds/*.json "$trace_corpus/"
build-fuzz/fuzz/load_trace_fuzzer "$trace_corpus" -dict=fuzz/trace.dict -max_total_time="$trace_seconds" \
  -rss_limit_mb=4096 -timeout=30 -max_len=65536 -artifact_prefix=build-fuzz/crashes/trace- -print_final_stats=1

serve_corpus=build-fuzz/serve_corpus
mkdir -p "$serve_corpus"
cp -n fuzz/serve_seeds/*.bin "$serve_corpus/"
build-fuzz/fuzz/serve_request_fuzzer "$serve_corpus" -max_total_time="$serve_seconds" -rss_limit_mb=4096 \
  -timeout=30 -max_len=65536 -artifact_prefix=build-fuzz/crashes/serve- -print_final_stats=1

grpc_corpus=build-fuzz/grpc_corpus
mkdir -p "$grpc_corpus"
cp -n fuzz/grpc_seeds/*.bin "$grpc_corpus/"
build-fuzz/fuzz/serve_grpc_fuzzer "$grpc_corpus" -max_total_time="$grpc_seconds" -rss_limit_mb=4096 \
  -timeout=30 -max_len=65536 -artifact_prefix=build-fuzz/crashes/grpc- -print_final_stats=1
