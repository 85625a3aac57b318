#!/usr/bin/env bash
# Times kiln (its default backends) and ONNX Runtime side by side, interleaved, on the same models, batch
# and thread counts, and prints each median latency and the ratio kiln / ONNX Runtime, after the
# machine lines of `kiln info` (results differ by CPU).
#
#   bench/native_vs_ort.sh [MODEL ...]     (default: resnet50 exported with random weights)
#
# Needs the default build (build/kiln) and onnxruntime-node in bench/node_modules:
#   (cd bench && ONNXRUNTIME_NODE_INSTALL=skip npm install)
# Environment: THREADS (default "1 2"), BATCH (default 1), ROUNDS (default 3), ITERS (default 20).
set -euo pipefail
cd "$(dirname "$0")/.."

threads_list=${THREADS:-"1 2"}
batch=${BATCH:-1}
rounds=${ROUNDS:-3}
iters=${ITERS:-20}
models=("$@")
if [ ${#models[@]} -eq 0 ]; then
  models=("$(/usr/bin/python3 tests/python/export_models.py resnet50 --out "${KILN_MODEL_CACHE:-/tmp/kiln-models}" | tail -1)")
fi

build/kiln info | grep -E '^(cpu|isa)'
printf "%-28s %7s %5s %12s %12s %8s\n" model threads round kiln_ms ort_ms ratio
for model in "${models[@]}"; do
  for threads in $threads_list; do
    for round in $(seq 1 "$rounds"); do
      kiln_ms=$(build/kiln bench "$model" --batch "$batch" --threads "$threads" --warmup 3 --iters "$iters" |
        awk '/^latency/ {print $4}')
      ort_ms=$(node bench/ort_bench.js "$model" --batch "$batch" --threads "$threads" --warmup 3 --iters "$iters" |
        /usr/bin/python3 -c 'import json,sys; print("%.3f" % json.load(sys.stdin)["median_ms"])')
      ratio=$(/usr/bin/python3 -c "print('%.2f' % ($kiln_ms / $ort_ms))")
      printf "%-28s %7s %5s %12s %12s %8s\n" "$(basename "$model")" "$threads" "$round" "$kiln_ms" "$ort_ms" "$ratio"
    done
  done
done
