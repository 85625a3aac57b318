#!/bin/bash
# What runtime verbose costs when it is off: times `kiln bench` from this build (verbose compiled in,
# level 0) against a build configured with -DKILN_RUNTIME_VERBOSE=OFF, interleaved round by round.
#
#   bench/verbose_overhead.sh [ROUNDS] [MODEL...]      (default: 5 rounds; demo, resnet18, mobilenet_v2)
#
# Builds the second tree in build-noverbose (ccache makes that mostly cache hits). Prints the machine
# lines of `kiln info`, then each round's medians and the median ratio with/without (1.00 = no cost).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
shift || true
models=("$@")
[ ${#models[@]} -eq 0 ] && models=(models/demo.onnx resnet18 mobilenet_v2)

cmake -S . -B build-noverbose -G Ninja -DKILN_RUNTIME_VERBOSE=OFF -DKILN_BUILD_TESTS=OFF -DKILN_PYTHON_MODULE=OFF >/dev/null
ninja -C build-noverbose kiln >/dev/null
ninja -C build kiln >/dev/null
build/kiln info | grep -E '^(cpu|isa)'

for model in "${models[@]}"; do
  path=$model
  if [[ $model != *.onnx ]]; then
    path=$(/usr/bin/python3 tests/python/export_models.py "$model" | tail -1 | cut -d" " -f1)
  fi
  /usr/bin/python3 - "$path" "$rounds" <<'PY'
import json, statistics, subprocess, sys
path, rounds = sys.argv[1], int(sys.argv[2])
def median_ms(binary):
    out = subprocess.run([binary, "bench", path, "--threads", "1", "--warmup", "10", "--iters", "50", "--json"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)["median_ms"]
ratios = []
for r in range(rounds):
    on, off = (median_ms("build/kiln"), median_ms("build-noverbose/kiln")) if r % 2 == 0 else \
              tuple(reversed((median_ms("build-noverbose/kiln"), median_ms("build/kiln"))))
    ratios.append(on / off)
    print(f"{path} round {r + 1}: verbose compiled in {on:.3f} ms, compiled out {off:.3f} ms, ratio {on / off:.3f}")
print(f"{path}: median ratio {statistics.median(ratios):.3f} over {rounds} rounds (1 thread)")
PY
done
