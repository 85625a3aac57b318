#!/usr/bin/python3
"""What profiling costs: kiln with and without its profiler, and ONNX Runtime with and without its own.

    /usr/bin/python3 bench/profiler_overhead.py [--models resnet50,mobilenet_v2] [--threads 1]
        [--rounds 5] [--warmup 10] [--iters 50] [--kiln build/kiln] [--kiln-off OTHER_KILN]

Per round, model and thread count, each configuration runs in its own process, in an order rotated
per round (batch 1, seeded random inputs):
  kiln        `kiln bench --json`
  kiln_again  the same command again: the A/A pair, whose ratio is the noise of this machine
  kiln_prof   `kiln bench --json --profile`: every timed run recorded (shapes and memory)
  kiln_off    (with --kiln-off) another kiln binary, e.g. one built from the commit before the
              profiler: what the recording hooks cost while no profile records
  ort, ort_prof  bench/ort_bench.js without and with `--profile 1` (ONNX Runtime's enableProfiling)
A configuration's time is the median over rounds of each process's median run. Prints the machine
lines of `kiln info` and a markdown table of medians and ratios, the A/A spread beside them.
"""
import argparse
import statistics
import sys

from machine import machine_lines
from run_all import ORT_INSTALL_HINT, REPO, export_models, log, run_json

CONFIGS = ["kiln", "kiln_again", "kiln_prof", "kiln_off", "ort", "ort_prof"]


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet50,mobilenet_v2")
    parser.add_argument("--threads", default="1")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--kiln", default=str(REPO / "build" / "kiln"))
    parser.add_argument("--kiln-off", help="a kiln binary without the profiler, for the cost of the hooks when off")
    return parser.parse_args()


def run_config(config, path, threads, args):
    sizes = ["--threads", str(threads), "--warmup", str(args.warmup), "--iters", str(args.iters)]
    if config.startswith("ort"):
        if not (REPO / "bench" / "node_modules" / "onnxruntime-node").is_dir():
            return {"error": f"onnxruntime-node is not installed: {ORT_INSTALL_HINT}"}
        profile = ["--profile", "1"] if config == "ort_prof" else []
        return run_json(["node", str(REPO / "bench" / "ort_bench.js"), path, *sizes, *profile, "--kiln", args.kiln])
    kiln = args.kiln_off if config == "kiln_off" else args.kiln
    profile = ["--profile"] if config == "kiln_prof" else []
    return run_json([kiln, "bench", path, "--json", *sizes, *profile])


def ratio(results, numerator, denominator):
    a, b = results.get(numerator), results.get(denominator)
    return f"{a / b:.3f}" if a and b else "n/a"


def main():
    args = parse_args()
    configs = [c for c in CONFIGS if c != "kiln_off" or args.kiln_off]
    models = args.models.split(",")
    paths = export_models(models)
    table = []
    for name in models:
        for threads in [int(t) for t in args.threads.split(",")]:
            medians = {config: [] for config in configs}
            for round_index in range(args.rounds):
                shift = round_index % len(configs)
                for config in configs[shift:] + configs[:shift]:
                    result = run_config(config, paths[name], threads, args)
                    if "median_ms" in result:
                        medians[config].append(result["median_ms"])
                        log(f"  {name} {threads}t round {round_index + 1}/{args.rounds} {config}: "
                            f"{result['median_ms']:.3f} ms")
                    else:
                        log(f"  {name} {threads}t round {round_index + 1} {config}: error: {result.get('error')}")
            results = {config: statistics.median(values) for config, values in medians.items() if values}
            table.append((name, threads, results))

    print("\n".join(machine_lines(args.kiln)))
    print(f"\nbatch 1, median of {args.rounds} interleaved rounds of each process's median of {args.iters} runs, ms\n")
    off = " | kiln no hooks | off/no hooks" if args.kiln_off else ""
    print(f"| model | threads | kiln | kiln again | A/A | kiln --profile | profiled/off{off} "
          "| ORT | ORT profiling | ORT profiled/off |")
    print("|---|---:|---:|---:|---:|---:|---:|" + ("---:|---:|" if args.kiln_off else "") + "---:|---:|---:|")
    for name, threads, r in table:
        cells = [name, str(threads)]
        cells += [f"{r[c]:.3f}" if c in r else "n/a" for c in ("kiln", "kiln_again")]
        cells += [ratio(r, "kiln_again", "kiln"), f"{r['kiln_prof']:.3f}" if "kiln_prof" in r else "n/a",
                  ratio(r, "kiln_prof", "kiln")]
        if args.kiln_off:
            cells += [f"{r['kiln_off']:.3f}" if "kiln_off" in r else "n/a", ratio(r, "kiln", "kiln_off")]
        cells += [f"{r[c]:.3f}" if c in r else "n/a" for c in ("ort", "ort_prof")]
        cells += [ratio(r, "ort_prof", "ort")]
        print("| " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
