#!/usr/bin/python3
"""Where each model's time goes against this machine's roofline: per model and configuration, the steps'
time, their time at the bound (`kiln explain --profile`, docs/profiler.md#the-roofline), what the compute-
and memory-bound steps could still save and the kernels with the most to save; for the --detail models,
their ten most expensive steps with the bound and the fraction of it reached.

    /usr/bin/python3 bench/roofline.py [--models resnet18,resnet50,...] [--configs b1t1,b1t2,b16t2] [--runs 20]
        [--detail resnet50,mobilenet_v2] [--kiln build/kiln] [--kiln-args "..."]
        [--out-md bench/results/roofline.md] [--out-json bench/results/roofline.json]

Models come from tests/python/export_models.py's cache, as for bench/run_all.py. Each configuration bBtT is one
`kiln explain MODEL --json --profile N --batch B --threads T` process; its step times are medians over N runs.
"""
import argparse
import collections
import datetime
import json
import pathlib
import shlex
import subprocess
import sys

from machine import machine_lines
from run_all import CONFIG_PATTERN, DEFAULT_MODELS, REPO, export_models, log

DETAIL_STEPS = 10


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(m for m in DEFAULT_MODELS if m != "transformer"),
                        help="comma-separated models (default: bench/run_all.py's CNNs)")
    parser.add_argument("--configs", default="b1t1,b1t2,b16t2", help="comma-separated bBtT (default b1t1,b1t2,b16t2)")
    parser.add_argument("--runs", type=int, default=20, help="profiled runs per configuration (default 20)")
    parser.add_argument("--detail", default="resnet50,mobilenet_v2",
                        help="models whose ten most expensive steps are listed (default resnet50,mobilenet_v2)")
    parser.add_argument("--kiln", default=str(REPO / "build" / "kiln"), help="kiln binary (default build/kiln)")
    parser.add_argument("--kiln-args", default="", help="further `kiln explain` options, e.g. \"--disable winograd\"")
    parser.add_argument("--out-md", default=str(REPO / "bench" / "results" / "roofline.md"))
    parser.add_argument("--out-json", default=str(REPO / "bench" / "results" / "roofline.json"))
    args = parser.parse_args()
    args.models = [m for m in args.models.split(",") if m]
    args.detail = [m for m in args.detail.split(",") if m]
    args.configs = [c for c in args.configs.split(",") if c]
    for config in args.configs:
        if not CONFIG_PATTERN.fullmatch(config):
            parser.error(f"--configs: '{config}' is not bBtT (e.g. b1t2)")
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    return args


def explain(args, path, batch, threads):
    command = [args.kiln, "explain", path, "--json", "--profile", str(args.runs), "--batch", str(batch),
               "--threads", str(threads), *shlex.split(args.kiln_args)]
    done = subprocess.run(command, text=True, capture_output=True, timeout=3600)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed: {done.stderr.strip()}")
    return json.loads(done.stdout)


def kernel_family(kernel):
    """"onednn:brgconv_1x1:avx512_core+relu" -> "onednn:brgconv_1x1": the kernel without ISA and post-ops."""
    return ":".join(kernel.split("+")[0].split(":")[:2])


def summarize(plan):
    totals = plan["roofline"]
    savings = collections.Counter()
    for step in plan["steps"]:
        savings[f"{step['op']} {kernel_family(step['kernel'])}"] += max(0.0, step["ms"] - step["bound_ms"])
    top = [{"kernel": name, "saving_ms": ms} for name, ms in savings.most_common(2) if ms > 0]
    expensive = sorted(plan["steps"], key=lambda step: step["ms"], reverse=True)[:DETAIL_STEPS]
    return {"measured_ms": totals["measured_ms"], "bound_ms": totals["bound_ms"],
            "compute_saving_ms": totals["compute_saving_ms"], "memory_saving_ms": totals["memory_saving_ms"],
            "peak_gflops_per_s": totals["peak_gflops_per_s"], "memory_gb_per_s": totals["memory_gb_per_s"],
            "source": totals["source"], "top_savings": top,
            "expensive": [{key: step[key] for key in ("step", "op", "node", "kernel", "ms", "bound", "flops_per_byte",
                                                      "bound_ms", "fraction_of_bound")} for step in expensive]}


def markdown(rows, header, args):
    lines = [f"# kiln against this machine's roofline ({header['date']})", "", "```", *header["machine"], "```", "",
             f"- command: `{header['command']}`",
             "- ms: the steps' medians summed; at bound: their time at the roofline; saving: measured minus bound "
             "over the steps slower than their bound, by the bound that applies", "",
             "| model | config | ms | at bound | of bound | compute-bound saving | memory-bound saving | "
             "most to save |", "|---|---|---:|---:|---:|---:|---:|---|"]
    for row in rows:
        r = row["summary"]
        top = "; ".join(f"{t['kernel']} {t['saving_ms']:.2f} ms" for t in r["top_savings"])
        lines.append(f"| {row['model']} | {row['config']} | {r['measured_ms']:.2f} | {r['bound_ms']:.2f} | "
                     f"{100 * r['bound_ms'] / r['measured_ms']:.0f}% | {r['compute_saving_ms']:.2f} | "
                     f"{r['memory_saving_ms']:.2f} | {top} |")
    for row in rows:
        if row["model"] not in args.detail:
            continue
        r = row["summary"]
        lines += ["", f"## {row['model']} {row['config']}: the {DETAIL_STEPS} most expensive steps", "",
                  f"Bounds: fp32 peak {r['peak_gflops_per_s']:.1f} GFLOP/s, memory {r['memory_gb_per_s']:.1f} GB/s.",
                  "", "| step | node | kernel | ms | bound | FLOP/B | of bound |", "|---:|---|---|---:|---|---:|---:|"]
        for step in r["expensive"]:
            lines.append(f"| {step['step']} | {step['node']} | {step['kernel']} | {step['ms']:.3f} | {step['bound']} | "
                         f"{step['flops_per_byte']:.1f} | {100 * step['fraction_of_bound']:.0f}% |")
    return "\n".join(lines) + "\n"


def main():
    args = parse_args()
    paths = export_models(sorted(set(args.models)))
    header = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "machine": machine_lines(args.kiln),
              "command": " ".join(["/usr/bin/python3", "bench/roofline.py", *map(shlex.quote, sys.argv[1:])])}
    rows = []
    for model in args.models:
        for config in args.configs:
            batch, threads = map(int, CONFIG_PATTERN.fullmatch(config).groups())
            plan = explain(args, paths[model], batch, threads)
            rows.append({"model": model, "config": config, "summary": summarize(plan)})
            r = rows[-1]["summary"]
            log(f"{model} {config}: {r['measured_ms']:.2f} ms, {r['bound_ms']:.2f} at the bounds")
    pathlib.Path(args.out_json).write_text(json.dumps({"header": header, "rows": rows}, indent=1) + "\n")
    text = markdown(rows, header, args)
    pathlib.Path(args.out_md).write_text(text)
    print(text, end="")
    log(f"wrote {args.out_md} and {args.out_json}")


if __name__ == "__main__":
    main()
