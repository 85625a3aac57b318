"""kiln against ONNX Runtime on torchvision's detectors (tests/python/detection_models.py): Faster
R-CNN (NMS in If) and Mask R-CNN (NMS in If, masks pasted in a Loop), batch 1, on the same
calibrated image, at 1 and 2 threads, each runtime in its own process. Also how much of kiln's run
is the part it plans when it runs (the DeferredRegion steps: everything after the first
data-dependent size, i.e. the detection head after the RPN's score filter) and how many boxes come out.

    /usr/bin/python3 bench/detection.py [--opset 11] [--warmup 3] [--iters 10] [--kiln build/kiln]
"""
import argparse
import json
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "python"))
sys.path.insert(0, str(REPO / "bench"))
import detection_models  # noqa: E402
from machine import machine_lines  # noqa: E402

KILN_TIMER = """
import json, sys, time
import numpy as np
sys.path.insert(0, sys.argv[1])
import kiln
model, image, threads, warmup, iters = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
x = np.fromfile(image, dtype=np.float32).reshape(3, %d, %d)
with kiln.backends.settings(threads=threads):
    session = kiln.Session(model)
    for _ in range(warmup):
        outputs = session.run({"image": x})
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        session.run({"image": x})
        times.append((time.perf_counter() - start) * 1e3)
    with kiln.profiler.profile(record_shapes=False, profile_memory=False) as prof:
        session.run({"image": x})
    events = prof.events()
    run = max((e for e in events if e["kind"] == "run"), key=lambda e: e["end_ns"] - e["start_ns"])
    head = sum(e["end_ns"] - e["start_ns"] for e in events
               if e["kind"] == "step" and e["name"] == "DeferredRegion" and e["parent_id"] == run["id"])
print(json.dumps({"median_ms": sorted(times)[len(times) // 2], "head_share": head / (run["end_ns"] - run["start_ns"]),
                  "boxes": int(outputs["scores"].shape[0])}))
""" % (detection_models.SIZE, detection_models.SIZE)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--opset", type=int, default=11)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--kiln", default=str(REPO / "build" / "kiln"))
    args = parser.parse_args()
    print("\n".join(machine_lines(args.kiln)))
    with tempfile.TemporaryDirectory() as folder:
        image = pathlib.Path(folder) / "image.bin"
        detection_models.image().numpy().tofile(image)
        print("| model | threads | boxes | kiln ms | ORT ms | kiln/ORT | head share of kiln's run |")
        print("|---|---|---|---|---|---|---|")
        for name in detection_models.DETECTORS:
            path = detection_models.cached_export(name, args.opset)
            for threads in (1, 2):
                kiln = json.loads(subprocess.run(
                    [sys.executable, "-c", KILN_TIMER, str(pathlib.Path(args.kiln).parent / "python"), str(path), str(image),
                     str(threads), str(args.warmup), str(args.iters)],
                    check=True, capture_output=True, text=True).stdout)
                ort = json.loads(subprocess.run(
                    ["node", str(REPO / "bench" / "ort_bench.js"), str(path), "--threads", str(threads),
                     "--warmup", str(args.warmup), "--iters", str(args.iters), "--input", f"image={image}",
                     "--kiln", args.kiln], check=True, capture_output=True, text=True).stdout)
                print(f"| {name} (opset {args.opset}) | {threads} | {kiln['boxes']} | {kiln['median_ms']:.1f} | "
                      f"{ort['median_ms']:.1f} | {kiln['median_ms'] / ort['median_ms']:.2f} | "
                      f"{100 * kiln['head_share']:.0f}% |", flush=True)


if __name__ == "__main__":
    main()
