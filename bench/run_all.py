#!/usr/bin/python3
"""Times kiln, PyTorch and ONNX Runtime side by side on the model-parity set; writes a markdown table and JSON.

    /usr/bin/python3 bench/run_all.py [--models resnet18,transformer|seed|dense|recurrent] [--configs b1t1,b1t2,b16t2]
        [--batches 1,64 --threads 1,2,4] [--warmup W] [--iters N] [--rounds R] [--kiln build/kiln] [--kiln-args "..."]
        [--peak-gflops-per-core G] [--out-md bench/results/latest.md] [--out-json bench/results/latest.json]
        [--bf16] [--int8] [--no-pytorch]

Models are exported (opset 13, dynamic batch) by tests/python/export_models.py into its cache. A
configuration bBtT is batch B at T threads; --batches and --threads ask for every pair of the two lists
instead of --configs (B and T any positive numbers: the seed's batch-64 column is --batches 1,64). For every
model and configuration, each round runs `kiln bench`, bench/torch_bench.py and
bench/ort_bench.js once each, every one in its own process so that no OpenMP state is shared, rotating
the order per round so that no runtime always runs first (or right after another's threads). The
reported figure is the median over rounds of each run's median latency. A runtime that fails is
recorded with its error and shown as n/a. Progress goes to stderr; the table to stdout, after the
machine lines of `kiln info` (cpu, cpu capability, isa in effect), which the JSON keeps as "machine".
--bf16 adds a fourth runtime, kiln with `--precision bf16`, and a column with its speed-up over kiln fp32.
--int8 adds kiln and ONNX Runtime on each model's int8 QDQ file (bench/qdq_models.py: kiln.quantization with
ONNX Runtime's defaults, cached beside the export), with columns int8 / fp32 for kiln and kiln int8 against
ORT int8 (same ratio rules). ORT runs its default int8 kernels on CPUs with VNNI (exact there) and its exact
mode (session.x64quantprecision=1) on CPUs without, whose default saturates u8 x s8 pair sums; --models int8
is the int8 set (resnet50, inception_v3, mobilenet_v1, resnet18, mobilenet_v2, transformer).
Needs Debian's /usr/bin/python3 (torch, torchvision, onnx) and onnxruntime-node in bench/node_modules.
"""
import argparse
import datetime
import json
import math
import os
import pathlib
import re
import shlex
import statistics
import subprocess
import sys

from machine import machine_lines

REPO = pathlib.Path(__file__).resolve().parent.parent
PYTHON = "/usr/bin/python3"  # the one with torch; the first python3 on PATH may not have it
DEFAULT_MODELS = ["resnet18", "resnet50", "mobilenet_v2", "squeezenet1_1", "shufflenet_v2_x1_0", "googlenet",
                  "resnext50_32x4d", "alexnet", "transformer"]
# The seed's model table: DEFAULT_MODELS' CNNs and the deeper or older ones (--models seed).
SEED_MODELS = ["resnet18", "resnet50", "resnet101", "resnet152", "resnext50_32x4d", "resnext101_32x8d", "vgg16",
               "inception_v3", "googlenet", "alexnet", "mobilenet_v1", "mobilenet_v2", "squeezenet1_1",
               "shufflenet_v2_x1_0"]
# Dense prediction: the segmentation models (each upsampling its logits with Resize) and the U-Net
# (ConvTranspose, skip Concats), whose ops ONNX Runtime had and kiln gained later (--models dense).
DENSE_MODELS = ["fcn_resnet50", "deeplabv3_mobilenet_v3_large", "lraspp_mobilenet_v3_large", "unet"]
# Recurrent: an LSTM tagger (token ids in) and a GRU encoder (audio-like frames in), on ops kiln gained
# after the CNNs (--models recurrent). Not lstm_packed: the benchmarks fill int64 inputs with 0-9, which
# as its lengths would be at most 9 of its 64 steps, empty sequences among them.
RECURRENT_MODELS = ["lstm_tagger", "gru_encoder"]
# The models whose int8 rows the docs report (--models int8, with --int8).
INT8_MODELS = ["resnet50", "inception_v3", "mobilenet_v1", "resnet18", "mobilenet_v2", "transformer"]
NAMED_SETS = {"seed": SEED_MODELS, "dense": DENSE_MODELS, "recurrent": RECURRENT_MODELS, "int8": INT8_MODELS}
CONFIG_PATTERN = re.compile(r"b([1-9][0-9]*)t([1-9][0-9]*)")
RUNTIMES = ["kiln", "pytorch", "ort"]
ORT_INSTALL_HINT = "(cd bench && ONNXRUNTIME_NODE_INSTALL=skip npm install)"
TIMEOUT_S = 1800  # per process: a hung runtime must not stall the whole set


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(DEFAULT_MODELS),
                        help="comma-separated model names, 'seed' for the seed's model table, 'dense' for the "
                             "segmentation models and the U-Net, or 'recurrent' for the LSTM tagger and the GRU "
                             "encoder")
    parser.add_argument("--configs", default="b1t1,b1t2,b16t2",
                        help="comma-separated bBtT: batch B at T threads (default b1t1,b1t2,b16t2)")
    parser.add_argument("--batches", help="comma-separated batch sizes; with --threads, replaces --configs")
    parser.add_argument("--threads", help="comma-separated thread counts; with --batches, replaces --configs")
    parser.add_argument("--warmup", type=int,
                        help="untimed runs per process (default: 5 at batch 1, 2 above, 1 from batch 64)")
    parser.add_argument("--iters", type=int,
                        help="timed runs per process (default: 20 at batch 1, 6 above, 3 from batch 64)")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds per model and config (default 2)")
    parser.add_argument("--kiln", default=str(REPO / "build" / "kiln"), help="kiln binary (default build/kiln)")
    parser.add_argument("--kiln-args", default="",
                        help='extra options for `kiln bench`, e.g. "--disable onednn"; a lone option without '
                             'a value needs the = form (--kiln-args=--deterministic)')
    parser.add_argument("--bf16", action="store_true", help="also time kiln with --precision bf16")
    parser.add_argument("--no-pytorch", action="store_true",
                        help="do not time PyTorch (its column reads n/a): the int8 rows compare kiln with ORT")
    parser.add_argument("--int8", action="store_true",
                        help="also time kiln and ONNX Runtime on each model's int8 QDQ file")
    parser.add_argument("--peak-gflops-per-core", type=float, default=None,
                        help="f32 FMA peak per core, for kiln's %% of peak (default: this machine's, measured by "
                             "`kiln info --roofline` for each thread count)")
    parser.add_argument("--out-md", default=str(REPO / "bench" / "results" / "latest.md"))
    parser.add_argument("--out-json", default=str(REPO / "bench" / "results" / "latest.json"))
    args = parser.parse_args()
    args.models = NAMED_SETS.get(args.models) or args.models.split(",")
    if (args.batches is None) != (args.threads is None):
        parser.error("--batches and --threads go together (every batch at every thread count)")
    if args.batches is not None:
        try:
            pairs = [(int(b), int(t)) for b in args.batches.split(",") for t in args.threads.split(",")]
        except ValueError:
            parser.error(f"--batches and --threads take comma-separated numbers, got '{args.batches}' and "
                         f"'{args.threads}'")
        args.configs = [f"b{batch}t{threads}" for batch, threads in pairs]
    else:
        args.configs = args.configs.split(",")
    for config in args.configs:
        if not CONFIG_PATTERN.fullmatch(config):
            parser.error(f"config '{config}' is not bBtT with B and T positive numbers (e.g. b1t2, b64t2)")
    return args


def config_sizes(config):
    """(batch, threads, default warm-up runs, default timed runs) of a bBtT config; big batches run fewer times."""
    batch, threads = map(int, CONFIG_PATTERN.fullmatch(config).groups())
    if batch == 1:
        return batch, threads, 5, 20
    return (batch, threads, 2, 6) if batch < 64 else (batch, threads, 1, 3)


def log(message):
    print(message, file=sys.stderr, flush=True)


def export_models(names):
    """{name: path of the opset-13 dynamic-batch ONNX file}; the script reuses its cache."""
    script = REPO / "tests" / "python" / "export_models.py"
    output = subprocess.run([PYTHON, str(script), *names, "--opset", "13"], check=True, text=True,
                            stdout=subprocess.PIPE).stdout
    # One line per model, in order: "PATH (SIZE MB, SECONDS s)".
    paths = [line.rsplit(" (", 1)[0] for line in output.splitlines() if line.strip()]
    return dict(zip(names, paths))


MEASURED_PEAKS = {}  # threads -> GFLOP/s, from `kiln info --roofline --json`


def peak_gflops(args, threads):
    """The fp32 peak on `threads` threads: --peak-gflops-per-core x threads, else this machine's roofline
    for kiln's ISA in effect (None when kiln cannot say)."""
    if args.peak_gflops_per_core:
        return args.peak_gflops_per_core * threads
    if threads not in MEASURED_PEAKS:
        command = [args.kiln, "info", "--roofline", "--json", "--threads", str(threads)]
        # --kiln-args' settings (an ISA cap, say) change the peak; options only bench takes fail here.
        roofline = run_json(command + shlex.split(args.kiln_args))
        if "error" in roofline:
            roofline = run_json(command)
        MEASURED_PEAKS[threads] = roofline.get("peak_gflops_per_s_all")
        if MEASURED_PEAKS[threads]:
            log(f"fp32 peak on {threads} thread(s): {MEASURED_PEAKS[threads]:.1f} GFLOP/s ({roofline['source']})")
    return MEASURED_PEAKS[threads]


def run_json(command):
    """Runs `command` and returns the JSON object on its last stdout line, or {"error": ...}."""
    try:
        done = subprocess.run(command, cwd=REPO, text=True, capture_output=True, timeout=TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as error:
        return {"error": str(error)}
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        message = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        return {"error": message}
    try:
        return json.loads(lines[-1])
    except json.JSONDecodeError:
        return {"error": f"no JSON on the last line: {lines[-1]!r}", "stdout": done.stdout}


def parse_kiln_text(stdout):
    """Reads the text output of a `kiln bench` that predates --json (no FLOP counts there)."""
    latency = re.search(r"latency ms: median ([\d.]+)\s+p10 ([\d.]+)\s+p90 ([\d.]+)", stdout)
    if not latency:
        return {"error": "no 'latency ms:' line in kiln output"}
    load = re.search(r"load \+ first run: ([\d.]+) ms", stdout)
    result = dict(zip(["median_ms", "p10_ms", "p90_ms"], map(float, latency.groups())))
    return {"runtime": "kiln", **result, "load_ms": float(load.group(1)) if load else None}


def kiln_has_json(kiln):
    try:
        help_text = subprocess.run([kiln, "bench", "--help"], text=True, capture_output=True, timeout=60).stdout
    except OSError:
        return False
    return "--json" in help_text


def run_once(runtime, name, path, batch, threads, warmup, iters, args):
    ort_config = []
    if runtime.endswith("_int8"):  # the same runtime on the quantized file
        runtime, path = runtime[:-len("_int8")], str(args.quantized[name])
        if not args.vnni:  # ORT's default int8 products saturate without VNNI: time its exact mode
            ort_config = ["--config", "session.x64quantprecision=1"]
    thread_args = ["--threads", str(threads)]
    if runtime == "kiln_default":  # kiln at its own count (the cores, adapting to load) for any count above 1
        runtime, thread_args = "kiln", (thread_args if threads == 1 else [])
    sizes = ["--batch", str(batch), *thread_args, "--warmup", str(warmup), "--iters", str(iters)]
    if runtime == "pytorch":
        if args.no_pytorch:
            return {"error": "not run (--no-pytorch)"}
        return run_json([PYTHON, str(REPO / "bench" / "torch_bench.py"), name, *sizes, "--kiln", args.kiln])
    if runtime == "ort":
        if not (REPO / "bench" / "node_modules" / "onnxruntime-node").is_dir():
            return {"error": f"onnxruntime-node is not installed: {ORT_INSTALL_HINT}"}
        return run_json(["node", str(REPO / "bench" / "ort_bench.js"), path, *sizes, *ort_config, "--kiln", args.kiln])
    command = [args.kiln, "bench", path, *sizes, *shlex.split(args.kiln_args)]
    if runtime == "kiln_bf16":
        command += ["--precision", "bf16"]
    if args.kiln_json:
        return run_json(command + ["--json"])
    result = run_json(command)  # the text form never parses as JSON: read it from the raw stdout
    return parse_kiln_text(result["stdout"]) if "stdout" in result else result


def measure(name, path, config, args):
    batch, threads, default_warmup, default_iters = config_sizes(config)
    warmup = default_warmup if args.warmup is None else args.warmup
    iters = default_iters if args.iters is None else args.iters
    runtimes = args.runtimes
    rounds = {runtime: [] for runtime in runtimes}
    for round_index in range(args.rounds):
        shift = round_index % len(runtimes)
        for runtime in runtimes[shift:] + runtimes[:shift]:
            result = run_once(runtime, name, path, batch, threads, warmup, iters, args)
            rounds[runtime].append(result)
            shown = f"{result['median_ms']:.2f} ms" if "median_ms" in result else f"error: {result['error']}"
            log(f"  {name} {config} round {round_index + 1}/{args.rounds} {runtime}: {shown}")
    summary = {"model": name, "config": config, "batch": batch, "threads": threads, "warmup": warmup,
               "iters": iters, "path": path, "runtimes": {}}
    for runtime, results in rounds.items():
        medians = [result["median_ms"] for result in results if "median_ms" in result]
        errors = [result["error"] for result in results if "error" in result]
        summary["runtimes"][runtime] = {"median_ms": statistics.median(medians) if medians else None,
                                        "error": errors[0] if errors else None, "rounds": results}
    # FLOPs are counted by kiln (conv/matmul), so the same count rates ONNX Runtime on the same model.
    flops = next((r["flops_per_run"] for r in rounds["kiln"] if r.get("flops_per_run")), None)
    for runtime in runtimes:
        median_ms = summary["runtimes"][runtime]["median_ms"]
        summary["runtimes"][runtime]["gflops"] = flops / (median_ms * 1e6) if flops and median_ms else None
    kiln_gflops = summary["runtimes"]["kiln"]["gflops"]
    peak = peak_gflops(args, threads)
    summary["kiln_peak_fraction"] = kiln_gflops / peak if kiln_gflops and peak else None
    return summary


def ratio(row, peer):
    """kiln/peer: latency ratio at batch 1 (<1: kiln faster), throughput ratio at batch > 1 (>1: kiln faster)."""
    kiln_ms, peer_ms = row["runtimes"]["kiln"]["median_ms"], row["runtimes"][peer]["median_ms"]
    if not kiln_ms or not peer_ms:
        return None
    return kiln_ms / peer_ms if row["batch"] == 1 else peer_ms / kiln_ms


def int8_ratios(row):
    """(kiln int8 / kiln fp32, kiln int8 / ORT int8) by the table's ratio rules, each or None."""
    def ms(runtime):
        return row["runtimes"].get(runtime, {}).get("median_ms")

    def compare(ours, theirs):
        if not ours or not theirs:
            return None
        return ours / theirs if row["batch"] == 1 else theirs / ours

    return compare(ms("kiln_int8"), ms("kiln")), compare(ms("kiln_int8"), ms("ort_int8"))


def bf16_speedup(row):
    """kiln bf16 over kiln fp32 (> 1: bf16 faster), or None."""
    fp32 = row["runtimes"]["kiln"]["median_ms"]
    bf16 = row["runtimes"].get("kiln_bf16", {}).get("median_ms")
    return fp32 / bf16 if fp32 and bf16 else None


def geomean(values):
    values = [value for value in values if value]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def markdown(rows, header, args):
    def number(value, digits=2, suffix=""):
        return "n/a" if value is None else f"{value:.{digits}f}{suffix}"

    def speed(row, runtime):  # ms at batch 1, images (samples) per second at batch > 1
        median_ms = row["runtimes"][runtime]["median_ms"]
        if median_ms is None or row["batch"] == 1:
            return number(median_ms)
        return number(1000.0 * row["batch"] / median_ms, 1, " /s")

    if args.peak_gflops_per_core:
        peak_text = f"{args.peak_gflops_per_core:g} GFLOP/s per core x threads"
    else:
        measured = ", ".join(f"{peak:.1f} GFLOP/s on {threads} thread{'s' if threads > 1 else ''}"
                             for threads, peak in sorted(MEASURED_PEAKS.items()) if peak)
        peak_text = f"this machine's fp32 peak (`kiln info --roofline`): {measured or 'not measured'}"

    lines = [f"# kiln vs PyTorch vs ONNX Runtime ({header['date']})", "",
             "```", *header["machine"], "```", "",
             f"- command: `{header['command']}`",
             f"- CPU: {header['cpu']}; load average at start {header['loadavg_start']}, end {header['loadavg_end']}",
             f"- versions: {header['versions']}",
             f"- % peak: kiln GFLOP/s / ({peak_text}); FLOPs counted "
             "by kiln (conv/matmul), also used for ORT GFLOP/s",
             "- batch 1 rows: median latency in ms, ratio = kiln ms / peer ms (**< 1: kiln faster**); larger batches' "
             "rows: throughput in samples/s, ratio = kiln /s / peer /s (**> 1: kiln faster**)", "",
             "| model | config | kiln | PyTorch | ORT | kiln/PyTorch | kiln/ORT | kiln GFLOP/s | % peak | ORT GFLOP/s |"
             + (" kiln bf16 | bf16 speed-up |" if args.bf16 else "")
             + (" kiln int8 | ORT int8 | kiln int8/fp32 | kiln int8/ORT int8 |" if args.int8 else ""),
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|" + ("---:|---:|" if args.bf16 else "")
             + ("---:|---:|---:|---:|" if args.int8 else "")]
    for row in rows:
        kind = "latency" if row["batch"] == 1 else "throughput"
        peak = row["kiln_peak_fraction"]
        lines.append(f"| {row['model']} | {row['config']} ({kind}) | {speed(row, 'kiln')} | {speed(row, 'pytorch')} | "
                     f"{speed(row, 'ort')} | {number(ratio(row, 'pytorch'))} | {number(ratio(row, 'ort'))} | "
                     f"{number(row['runtimes']['kiln']['gflops'], 1)} | {number(peak and 100 * peak, 0, '%')} | "
                     f"{number(row['runtimes']['ort']['gflops'], 1)} |"
                     + (f" {speed(row, 'kiln_bf16')} | {number(bf16_speedup(row), 2, 'x')} |" if args.bf16 else "")
                     + (f" {speed(row, 'kiln_int8')} | {speed(row, 'ort_int8')} | {number(int8_ratios(row)[0])} | "
                        f"{number(int8_ratios(row)[1])} |" if args.int8 else ""))
    if any(row["batch"] == 1 for row in rows):
        lines.append(f"| **geomean, batch 1** | latency | | | | {number(header['geomean_b1']['pytorch'])} | "
                     f"{number(header['geomean_b1']['ort'])} | | | |")
    if any(row["batch"] > 1 for row in rows):
        lines.append(f"| **geomean, batch > 1** | throughput | | | | {number(header['geomean_batched']['pytorch'])} | "
                     f"{number(header['geomean_batched']['ort'])} | | | |")
    if len(header["geomean_by_config"]) > 1:
        for config, by_peer in header["geomean_by_config"].items():
            lines.append(f"| geomean, {config} | {'latency' if config.startswith('b1t') else 'throughput'} | | | | "
                         f"{number(by_peer['pytorch'])} | {number(by_peer['ort'])} | | | |")
    if any(row["batch"] > 1 for row in rows):
        latency = header["latency_ratios"]
        lines.append(f"| **geomean, every row** | latency | | | | {number(latency['pytorch']['geomean'])} | "
                     f"{number(latency['ort']['geomean'])} | | | |")
        lines.append(f"| **largest, every row** | latency | | | | {number(latency['pytorch']['max'])} | "
                     f"{number(latency['ort']['max'])} | | | |")
    notes = [f"- {row['model']} {row['config']} {runtime}: error: {result['error']}"
             for row in rows for runtime, result in row["runtimes"].items() if result["error"]]
    # PyTorch timed eagerly, or with OpenBLAS threads unpinned, is not the peer the table claims: say so.
    notes += sorted({f"- {row['model']} pytorch: {run['mode']}; OpenBLAS {run['openblas']}"
                     for row in rows for run in row["runtimes"]["pytorch"]["rounds"]
                     if "mode" in run and (run["mode"].startswith("eager") or run["openblas"].startswith("not"))})
    return "\n".join(lines + (["", "Notes:", *notes] if notes else [])) + "\n"


def main():
    args = parse_args()
    args.runtimes = RUNTIMES + (["kiln_bf16"] if args.bf16 else []) + (["kiln_int8", "ort_int8"] if args.int8 else [])
    args.kiln_json = kiln_has_json(args.kiln)
    if not args.kiln_json:
        log(f"note: {args.kiln} bench has no --json; reading its text output (no GFLOP/s)")
    if not (REPO / "bench" / "node_modules" / "onnxruntime-node").is_dir():
        log(f"note: onnxruntime-node is missing, ORT will be n/a; install it with {ORT_INSTALL_HINT}")
    lscpu = subprocess.run(["lscpu"], text=True, capture_output=True).stdout
    header = {"command": shlex.join([PYTHON, *sys.argv]), "date": datetime.datetime.now().isoformat(timespec="seconds"),
              "cpu": next((line.split(":", 1)[1].strip() for line in lscpu.splitlines() if line.startswith("Model name")),
                          "unknown"),
              "machine": machine_lines(args.kiln),
              "loadavg_start": " ".join(f"{load:.2f}" for load in os.getloadavg())}
    log(f"exporting {', '.join(args.models)} ...")
    paths = export_models(args.models)
    if args.int8:
        sys.path.insert(0, str(REPO / "bench"))
        import qdq_models
        log("quantizing (cached) ...")
        args.quantized = {name: qdq_models.quantized_model(name, paths[name]) for name in args.models}
        args.vnni = any("VNNI" in line or "AMX" in line for line in header["machine"] if line.startswith("cpu capability"))
    rows = []
    for name in args.models:
        for config in args.configs:
            log(f"[{len(rows) + 1}/{len(args.models) * len(args.configs)}] {name} {config}")
            rows.append(measure(name, paths[name], config, args))
    header["loadavg_end"] = " ".join(f"{load:.2f}" for load in os.getloadavg())
    header["geomean_b1"] = {peer: geomean([ratio(row, peer) for row in rows if row["batch"] == 1])
                            for peer in ("pytorch", "ort")}
    header["geomean_batched"] = {peer: geomean([ratio(row, peer) for row in rows if row["batch"] > 1])
                                 for peer in ("pytorch", "ort")}
    header["geomean_by_config"] = {config: {peer: geomean([ratio(row, peer) for row in rows if row["config"] == config])
                                            for peer in ("pytorch", "ort")} for config in args.configs}
    # Every row as a latency ratio (kiln ms / peer ms, < 1: kiln faster), batches above 1 included.
    header["latency_ratios"] = {}
    for peer in ("pytorch", "ort"):
        ratios = [row["runtimes"]["kiln"]["median_ms"] / row["runtimes"][peer]["median_ms"] for row in rows
                  if row["runtimes"]["kiln"]["median_ms"] and row["runtimes"][peer]["median_ms"]]
        header["latency_ratios"][peer] = {"geomean": geomean(ratios), "max": max(ratios) if ratios else None}
    versions = {}  # each runtime's version, from any of its successful runs
    for row in rows:
        for runtime, result in row["runtimes"].items():
            versions.update({runtime: r["version"] for r in result["rounds"] if r.get("version")})
    header["versions"] = ", ".join(f"{runtime} {version}" for runtime, version in sorted(versions.items())) or "n/a"
    table = markdown(rows, header, args)
    print(table, end="")
    for path, text in ((args.out_md, table), (args.out_json, json.dumps({**header, "results": rows}, indent=1))):
        pathlib.Path(path).parent.mkdir(parents=True, exist_ok=True)
        pathlib.Path(path).write_text(text)
    log(f"wrote {args.out_md} and {args.out_json}")


if __name__ == "__main__":
    main()
