#!/usr/bin/python3
"""What loading a model costs in memory and time, for kiln (mapped and read) and ONNX Runtime.

    /usr/bin/python3 bench/load_memory.py [--models resnet50,vgg16] [--threads 1] [--cycles 200]
        [--cycle-model resnet18] [--transformer transformer] [--skip-ort] [--json FILE]

Every measurement runs in a fresh process (Debian's python3 with kiln's module from build/python,
or node with onnxruntime-node), batch 1, so no page of one lingers in another. Memory is read from
/proc/self/status (VmRSS now, VmHWM the peak) and /proc/self/smaps_rollup (private pages), minus the
same process's RSS after importing the runtime and before loading a model ("baseline").

Per model:
- load: Session(path) (kiln: import; ORT: InferenceSession.create), then plan + first run, peak RSS
  over the process's baseline during both, and that peak over the initializer bytes on disk.
- second session: a second Session of the same file in the same process, planned and run; what it
  adds to RSS and to private memory, over the initializer bytes.
- second process: another process loading the same file while the first holds it; its private
  memory (smaps_rollup Private_*) over the initializer bytes.
- use_mmap on and off: outputs bitwise equal, and the steady median latency of each.

And: --cycles load/unload cycles of --cycle-model in one process (RSS after the 10th and the last),
and --transformer run at batch sizes 1-16 twice in one session (RSS after each pass).
Prints a markdown table after the machine lines of `kiln info`.
"""
import argparse
import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path

from machine import machine_lines
from run_all import PYTHON, REPO, export_models, log

BUILD_PYTHON = REPO / "build" / "python"


def status_mb(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return -1.0


def private_mb():
    total = 0
    for line in open("/proc/self/smaps_rollup"):
        if line.startswith(("Private_Clean:", "Private_Dirty:")):
            total += int(line.split()[1])
    return total / 1024


def initializer_mb(path):
    import onnx  # Debian's python3-onnx
    from onnx import numpy_helper

    model = onnx.load(path)
    return sum(numpy_helper.to_array(t).nbytes for t in model.graph.initializer) / 2**20


def random_input(session, batch, seed=1):
    import numpy as np

    feeds = {}
    rng = np.random.default_rng(seed)
    for spec in session.inputs:
        shape = [batch if not isinstance(d, int) else d for d in spec["shape"]]
        if spec["dtype"].startswith("int"):
            feeds[spec["name"]] = rng.integers(0, 100, size=shape).astype(spec["dtype"])
        else:
            feeds[spec["name"]] = rng.standard_normal(shape).astype(spec["dtype"])
    return feeds


def child(kind, path, threads, extra):
    """One measurement in this process; prints a JSON object."""
    sys.path.insert(0, str(BUILD_PYTHON))
    import kiln

    result = {"baseline_rss_mb": status_mb("VmRSS"), "baseline_private_mb": private_mb()}
    settings = {"threads": threads}
    if kind == "load":
        settings["use_mmap"] = extra != "read"
        start = time.perf_counter()
        session = kiln.Session(path, **settings)
        result["import_ms"] = (time.perf_counter() - start) * 1e3
        feeds = random_input(session, 1)
        start = time.perf_counter()
        outputs = session.run(feeds)
        result["plan_and_first_run_ms"] = (time.perf_counter() - start) * 1e3
        result["peak_rss_mb"] = status_mb("VmHWM")
        result["steady_rss_mb"] = status_mb("VmRSS")
        result["private_mb"] = private_mb()
        times = []
        for _ in range(30):
            start = time.perf_counter()
            session.run(feeds)
            times.append((time.perf_counter() - start) * 1e3)
        result["median_ms"] = sorted(times)[len(times) // 2]
        # Outputs are compared bitwise by the parent: pass the bytes' digest.
        result["digest"] = hashlib.sha256(b"".join(outputs[k].tobytes() for k in sorted(outputs))).hexdigest()
        if extra == "second":
            before_rss, before_private = status_mb("VmRSS"), private_mb()
            second = kiln.Session(path, **settings)
            second.run(feeds)
            result["second_adds_rss_mb"] = status_mb("VmRSS") - before_rss
            result["second_adds_private_mb"] = private_mb() - before_private
            del second
        if extra == "hold":  # the first process of the two-process measurement: hold the model
            print(json.dumps(result), flush=True)
            sys.stdin.read()
            return
    elif kind == "cycles":
        rss = []
        for cycle in range(int(extra)):
            session = kiln.Session(path, **settings)
            session.run(random_input(session, 1))
            del session
            rss.append(status_mb("VmRSS"))
        result["rss_after_10th_mb"] = rss[min(9, len(rss) - 1)]
        result["rss_after_last_mb"] = rss[-1]
    elif kind == "batches":
        session = kiln.Session(path, **settings)
        passes = []
        for _ in range(2):
            for batch in range(1, 17):
                session.run(random_input(session, batch))
            passes.append(status_mb("VmRSS"))
        result["rss_after_first_pass_mb"], result["rss_after_second_pass_mb"] = passes
        result["peak_rss_mb"] = status_mb("VmHWM")
    print(json.dumps(result), flush=True)


def run_child(*args):
    output = subprocess.run([PYTHON, __file__, "--child", *args], check=True, text=True,
                            stdout=subprocess.PIPE, cwd=REPO / "bench").stdout
    return json.loads(output.strip().splitlines()[-1])


def second_process(path, threads):
    """Private memory of a second process loading `path` while a first one holds it."""
    holder = subprocess.Popen([PYTHON, __file__, "--child", "load", path, str(threads), "hold"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO / "bench")
    try:
        json.loads(holder.stdout.readline())
        return run_child("load", path, str(threads), "mapped")
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)


def ort_load(path, threads, kiln_binary):
    output = subprocess.run(["node", str(REPO / "bench" / "ort_bench.js"), path, "--threads", str(threads),
                             "--warmup", "2", "--iters", "10", "--kiln", kiln_binary],
                            text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=600)
    lines = [line for line in output.stdout.splitlines() if line.startswith("{")]
    return json.loads(lines[-1]) if lines else {"error": output.stderr.strip()[-300:]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet50,vgg16")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--cycles", type=int, default=200)
    parser.add_argument("--cycle-model", default="resnet18")
    parser.add_argument("--transformer", default="transformer")
    parser.add_argument("--skip-ort", action="store_true")
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--kiln", default=str(REPO / "build" / "kiln"))
    parser.add_argument("--child", nargs=4, metavar=("KIND", "PATH", "THREADS", "EXTRA"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, path, threads, extra = args.child
        child(kind, path, int(threads), extra)
        return

    names = args.models.split(",")
    paths = export_models(sorted(set(names + [args.cycle_model, args.transformer])))
    results = {"machine": machine_lines(args.kiln), "models": {}}
    print("\n".join(results["machine"]) + "\n")
    print("| model | weights MB | runtime | import ms | plan + first run ms | peak over baseline | "
          "second session adds | second process private | median ms |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in names:
        path = paths[name]
        weights = initializer_mb(path)
        log(f"{name}: {weights:.1f} MB of initializers")
        mapped = run_child("load", path, str(args.threads), "second")
        read = run_child("load", path, str(args.threads), "read")
        other = second_process(path, args.threads)
        row = {"weights_mb": weights, "mapped": mapped, "read": read, "second_process": other,
               "outputs_equal": mapped["digest"] == read["digest"] == other["digest"]}
        if not args.skip_ort:
            row["ort"] = ort_load(path, args.threads, args.kiln)
        results["models"][name] = row

        def ratio(peak, baseline):
            return f"{(peak - baseline) / weights:.2f}x ({peak - baseline:.0f} MB)"

        for label, r in (("kiln (mapped)", mapped), ("kiln (read)", read)):
            second = (f"{r['second_adds_rss_mb'] / weights:.1%} RSS, {r['second_adds_private_mb'] / weights:.1%} "
                      "private" if "second_adds_rss_mb" in r else "")
            private = (f"{(other['private_mb'] - other['baseline_private_mb']) / weights:.1%}"
                       if r is mapped else "")
            print(f"| {name} | {weights:.1f} | {label} | {r['import_ms']:.0f} | {r['plan_and_first_run_ms']:.0f} | "
                  f"{ratio(r['peak_rss_mb'], r['baseline_rss_mb'])} | {second} | {private} | {r['median_ms']:.2f} |")
        ort = row.get("ort", {})
        if "create_ms" in ort:
            print(f"| {name} | {weights:.1f} | onnxruntime {ort['version']} | {ort['create_ms']:.0f} | "
                  f"{ort['first_run_ms']:.0f} | {ratio(ort['peak_rss_after_first_run_mb'], ort['baseline_rss_mb'])} "
                  f"| | | {ort['median_ms']:.2f} |")
        print(f"\n{name}: outputs bitwise equal mapped / read / second process: {row['outputs_equal']}\n")

    cycles = run_child("cycles", paths[args.cycle_model], str(args.threads), str(args.cycles))
    results["cycles"] = cycles
    growth = cycles["rss_after_last_mb"] / cycles["rss_after_10th_mb"] - 1
    print(f"{args.cycles} load/unload cycles of {args.cycle_model}: RSS after the 10th "
          f"{cycles['rss_after_10th_mb']:.1f} MB, after the last {cycles['rss_after_last_mb']:.1f} MB "
          f"({growth:+.1%})")
    batches = run_child("batches", paths[args.transformer], str(args.threads), "")
    results["batches"] = batches
    print(f"{args.transformer} at batch sizes 1-16, twice, one session: RSS over baseline after the first pass "
          f"{batches['rss_after_first_pass_mb'] - batches['baseline_rss_mb']:.1f} MB, after the second "
          f"{batches['rss_after_second_pass_mb'] - batches['baseline_rss_mb']:.1f} MB, weights "
          f"{initializer_mb(paths[args.transformer]):.1f} MB")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
