#!/usr/bin/env python3
"""kiln serve under load: throughput and tail latency against in-process kiln, from wrk.

    /usr/bin/python3 bench/serve.py [--models resnet50,mobilenet_v2] [--clients 16] [--duration 20]
        [--max-batch 16] [--delays 0,500,2000,5000] [--delay 2000] [--instances 1] [--json FILE]

Per model (exported by tests/python/export_models.py, dynamic batch):
- in-process: `kiln bench --batch B --json` for B in 1, 2, 4, ... --max-batch; the best throughput
  (B / median) is the reference, batch 1's median the latency reference.
- closed loop: `kiln serve` with dynamic batching (max_batch_size --max-batch, max_queue_delay from
  --delays), wrk with --clients connections each sending one binary-tensor request of batch 1 as
  soon as its previous answer arrives; throughput, mean, p99, and the average batch the server
  formed (nv_inference_count / nv_inference_exec_count, from /metrics before and after).
- open loop at 70% of the closed-loop throughput at --delay: wrk paces 64 connections with
  exponential gaps (serve_wrk.lua); p99 against in-process batch-1 latency.
wrk (Debian's `wrk`) generates the load so the client does not compete with Python for the cores;
it still runs on the same 2 cores as the server, which the results include. The server listens on
127.0.0.1 only; every wrk run is bounded by --duration.
"""
import argparse
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

import numpy as np

from machine import machine_lines
from run_all import REPO, export_models, log

KILN = REPO / "build" / "kiln"
WRK_SCRIPT = REPO / "bench" / "serve_wrk.lua"


def in_process(model, batch, threads, iters):
    output = subprocess.run([str(KILN), "bench", str(model), "--batch", str(batch), "--threads", str(threads),
                             "--warmup", "5", "--iters", str(iters), "--json"],
                            check=True, capture_output=True, text=True, timeout=900).stdout
    result = json.loads(output)
    return {"batch": batch, "median_ms": result["median_ms"], "throughput_per_s": batch * 1000 / result["median_ms"]}


def batch1_input(model_path):
    """The model's one input: its name and seeded random FP32 data of batch 1."""
    import onnx
    graph = onnx.load(str(model_path), load_external_data=False).graph
    initializers = {init.name for init in graph.initializer}
    (tensor,) = [value for value in graph.input if value.name not in initializers]
    dims = [1] + [dim.dim_value for dim in tensor.type.tensor_type.shape.dim[1:]]
    return tensor.name, np.random.default_rng(0).random(dims, dtype=np.float32)


def request_body(model_path, directory):
    """A batch-1 binary request for the model's one input, and its JSON header's length."""
    name, data = batch1_input(model_path)
    dims = list(data.shape)
    header = json.dumps({"inputs": [{"name": name, "shape": dims, "datatype": "FP32",
                                     "parameters": {"binary_data_size": data.nbytes}}],
                         "parameters": {"binary_data_output": True}}).encode()
    path = directory / "body.bin"
    path.write_bytes(header + data.tobytes())
    return path, len(header)


class Server:
    """`kiln serve` on 127.0.0.1 over a one-model repository, stopped with SIGTERM."""

    def __init__(self, repository, threads, *options):
        self.log = open(repository / "serve.log", "w+")
        self.process = subprocess.Popen([str(KILN), "serve", "--model-repository", str(repository), "--host",
                                         "127.0.0.1", "--http-port", "0", "--threads", str(threads), *options],
                                        stdout=subprocess.DEVNULL, stderr=self.log)
        deadline = time.time() + 600
        while time.time() < deadline:
            self.log.seek(0)
            found = re.search(r"listening on http://127\.0\.0\.1:(\d+)", self.log.read())
            if found:
                self.port = int(found.group(1))
                return
            if self.process.poll() is not None:
                break
            time.sleep(0.2)
        self.stop()
        self.log.seek(0)
        raise RuntimeError("kiln serve did not start:\n" + self.log.read())

    def counters(self, model):
        text = urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=10).read().decode()
        values = {}
        for name in ("nv_inference_count", "nv_inference_exec_count", "nv_inference_request_success",
                     "nv_inference_request_failure"):
            found = re.search(rf'^{name}{{model="{model}",version="1"}} (\d+)$', text, re.M)
            values[name] = int(found.group(1))
        return values

    def stop(self):
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()


def write_repository(directory, model_path, max_batch, delay_us, instances):
    shutil.rmtree(directory, ignore_errors=True)
    (directory / "m" / "1").mkdir(parents=True)
    os.symlink(model_path, directory / "m" / "1" / "model.onnx")
    (directory / "m" / "config.pbtxt").write_text(
        f"max_batch_size: {max_batch}\n"
        f"dynamic_batching {{ max_queue_delay_microseconds: {delay_us} }}\n"
        f"instance_group [ {{ count: {instances} kind: KIND_CPU }} ]\n")


def wrk(port, body, header_length, connections, seconds, rate=0):
    env = dict(os.environ, KILN_WRK_BODY=str(body), KILN_WRK_HEADER_LENGTH=str(header_length),
               KILN_WRK_RATE=str(rate), KILN_WRK_CONNECTIONS=str(connections))
    output = subprocess.run(["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--timeout", "10s", "-s",
                             str(WRK_SCRIPT), f"http://127.0.0.1:{port}/v2/models/m/infer"],
                            check=True, capture_output=True, text=True, env=env, timeout=seconds + 60).stdout
    result = json.loads(output.strip().splitlines()[-1])
    result["throughput_per_s"] = result["requests"] / (result["duration_us"] / 1e6)
    result["errors"] = sum(result[key] for key in ("connect_errors", "read_errors", "write_errors",
                                                   "status_errors", "timeouts"))
    return result


def measured_run(server, body, header_length, connections, seconds, rate=0):
    before = server.counters("m")
    result = wrk(server.port, body, header_length, connections, seconds, rate)
    after = server.counters("m")
    inferences = after["nv_inference_count"] - before["nv_inference_count"]
    executions = after["nv_inference_exec_count"] - before["nv_inference_exec_count"]
    result["average_batch"] = inferences / executions if executions else 0
    result["server_failures"] = after["nv_inference_request_failure"] - before["nv_inference_request_failure"]
    return result


def bench_model(name, model_path, args, work):
    log(f"{name}: in-process kiln bench")
    batches = [b for b in (1, 2, 4, 8, 16, 32, 64) if b <= args.max_batch]
    in_proc = [in_process(model_path, b, args.threads, args.iters) for b in batches]
    best = max(in_proc, key=lambda row: row["throughput_per_s"])
    body, header_length = request_body(model_path, work)
    rows = []
    for delay in args.delays:
        write_repository(work / "repo", model_path, args.max_batch, delay, args.instances)
        server = Server(work / "repo", args.threads)
        try:
            wrk(server.port, body, header_length, args.clients, 3)  # warm the connections and caches
            log(f"{name}: closed loop, {args.clients} clients, delay {delay} us")
            row = measured_run(server, body, header_length, args.clients, args.duration)
            row["delay_us"] = delay
            rows.append(row)
        finally:
            server.stop()
    reference = next((row for row in rows if row["delay_us"] == args.delay), rows[-1])
    write_repository(work / "repo", model_path, args.max_batch, reference["delay_us"], args.instances)
    server = Server(work / "repo", args.threads)
    try:
        rate = 0.7 * reference["throughput_per_s"]
        log(f"{name}: open loop at {rate:.1f} requests/s")
        wrk(server.port, body, header_length, 64, 3, rate)
        open_loop = measured_run(server, body, header_length, 64, args.duration, rate)
        open_loop["target_rate_per_s"] = rate
    finally:
        server.stop()
    batch1_ms = in_proc[0]["median_ms"]
    return {
        "model": name, "in_process": in_proc, "best_in_process": best, "closed_loop": rows,
        "reference_delay_us": reference["delay_us"],
        "throughput_vs_in_process": reference["throughput_per_s"] / best["throughput_per_s"],
        "p99_over_mean": reference["p99_us"] / reference["mean_us"],
        "open_loop": open_loop, "open_loop_p99_over_batch1": open_loop["p99_us"] / 1000 / batch1_ms,
    }


def print_tables(results, machine):
    print("\n".join(machine))
    for result in results:
        print(f"\n{result['model']}: best in-process batch {result['best_in_process']['batch']}, "
              f"{result['best_in_process']['throughput_per_s']:.1f}/s; batch 1 "
              f"{result['in_process'][0]['median_ms']:.2f} ms")
        print("| delay (us) | throughput (/s) | vs in-process | avg batch | mean (ms) | p99 (ms) | p99/mean | errors |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|")
        best = result["best_in_process"]["throughput_per_s"]
        for row in result["closed_loop"]:
            print(f"| {row['delay_us']} | {row['throughput_per_s']:.1f} | {row['throughput_per_s'] / best:.2f} | "
                  f"{row['average_batch']:.2f} | {row['mean_us'] / 1000:.2f} | {row['p99_us'] / 1000:.2f} | "
                  f"{row['p99_us'] / row['mean_us']:.2f} | {row['errors']} |")
        row = result["open_loop"]
        print(f"open loop at {row['target_rate_per_s']:.1f}/s (sent {row['throughput_per_s']:.1f}/s): mean "
              f"{row['mean_us'] / 1000:.2f} ms, p99 {row['p99_us'] / 1000:.2f} ms = "
              f"{result['open_loop_p99_over_batch1']:.2f}x batch-1 latency, avg batch {row['average_batch']:.2f}, "
              f"errors {row['errors']}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet50,mobilenet_v2")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--duration", type=int, default=20)
    parser.add_argument("--max-batch", type=int, default=16)
    parser.add_argument("--delays", default="0,500,2000,5000")
    parser.add_argument("--delay", type=int, default=2000, help="the delay the ratios and the open loop use")
    parser.add_argument("--instances", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--json")
    args = parser.parse_args()
    args.delays = [int(delay) for delay in args.delays.split(",")]
    if shutil.which("wrk") is None:
        sys.exit("bench/serve.py needs wrk (apt install wrk; scripts/install_deps.sh installs it)")
    names = args.models.split(",")
    paths = export_models(names)
    machine = machine_lines(str(KILN))
    results = []
    with tempfile.TemporaryDirectory(prefix="kiln-serve-bench-") as work:
        for name in names:
            results.append(bench_model(name, paths[name], args, pathlib.Path(work)))
    print_tables(results, machine)
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps({"machine": machine, "args": vars(args), "results": results},
                                                      indent=1) + "\n")


if __name__ == "__main__":
    main()
