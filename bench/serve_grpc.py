#!/usr/bin/python3
"""kiln serve over gRPC under load: throughput against in-process kiln, from a Python-async client.

    /usr/bin/python3 bench/serve_grpc.py [--models resnet50] [--clients 16] [--duration 20]
        [--max-batch 16] [--delays 0,20000] [--threads 2] [--json FILE]

Per model (exported by tests/python/export_models.py, dynamic batch):
- in-process: `kiln bench --batch B --json` for B in 1, 2, 4, ... --max-batch; the best throughput
  (B / median) is the reference, measured again right before and after each server run (the
  machine is shared: the ratio uses the mean of the three).
- closed loop: `kiln serve --grpc-port` with dynamic batching (max_batch_size: the best in-process
  batch, max_queue_delay from --delays); --clients coroutines of
  one grpc.aio client process, each on its own HTTP/2 connection, each sending a batch-1 ModelInfer
  with raw_input_contents as soon as its previous answer arrived, for --duration seconds after a 3 s
  warm-up; throughput, mean and p99 latency, and the batches the server formed (from /metrics).
The client is Python (asyncio over grpcio's C core: serializing 600 KB of raw bytes is one copy) and
runs on the same cores as the server, which the results include. Everything is on 127.0.0.1.
"""
import argparse
import asyncio
import json
import pathlib
import re
import sys
import tempfile
import time

import serve as http_bench
from machine import machine_lines
from run_all import REPO, export_models, log

sys.path.insert(0, str(REPO / "examples"))
import grpc_client  # noqa: E402


class GrpcServer(http_bench.Server):
    """kiln serve with --grpc-port 0: the HTTP port for /metrics, the gRPC one for the load."""

    def __init__(self, repository, threads):
        super().__init__(repository, threads, "--grpc-port", "0")
        deadline = time.time() + 60
        while time.time() < deadline:
            self.log.seek(0)
            found = re.search(r"listening on grpc://127\.0\.0\.1:(\d+)", self.log.read())
            if found:
                self.grpc_port = int(found.group(1))
                return
            time.sleep(0.1)
        self.stop()
        raise RuntimeError("kiln serve printed no gRPC listening line")


async def closed_loop(pb, target, request, clients, seconds):
    import grpc
    latencies = []
    errors = []

    async def client(stub, until):
        while time.monotonic() < until:
            start = time.monotonic()
            try:
                await stub.ModelInfer(request, timeout=30)
            except grpc.aio.AioRpcError as error:
                errors.append(error.code().name)
                continue
            latencies.append(time.monotonic() - start)

    options = [("grpc.use_local_subchannel_pool", 1), ("grpc.max_receive_message_length", -1)]
    channels = [grpc.aio.insecure_channel(target, options=options) for _ in range(clients)]
    try:
        stubs = [pb[1].GRPCInferenceServiceStub(channel) for channel in channels]
        await asyncio.gather(*(client(stub, time.monotonic() + 3) for stub in stubs))  # warm-up
        latencies.clear()
        start = time.monotonic()
        await asyncio.gather(*(client(stub, start + seconds) for stub in stubs))
        elapsed = time.monotonic() - start
    finally:
        for channel in channels:
            await channel.close()
    latencies.sort()
    return {"requests": len(latencies), "throughput_per_s": len(latencies) / elapsed,
            "mean_ms": 1000 * sum(latencies) / max(1, len(latencies)),
            "p99_ms": 1000 * latencies[int(0.99 * (len(latencies) - 1))] if latencies else 0,
            "errors": len(errors)}


def bench_model(name, model_path, args, work, pb):
    log(f"{name}: in-process kiln bench")
    batches = [b for b in (1, 2, 4, 8, 16, 32, 64) if b <= args.max_batch]
    in_proc = [http_bench.in_process(model_path, b, args.threads, args.iters) for b in batches]
    best = max(in_proc, key=lambda row: row["throughput_per_s"])
    input_name, data = http_bench.batch1_input(model_path)
    request = grpc_client.request_for(pb[0], "m", {input_name: ("FP32", data)})
    rows = []
    for delay in args.delays:
        http_bench.write_repository(work / "repo", model_path, best["batch"], delay, 1)
        before_run = http_bench.in_process(model_path, best["batch"], args.threads, args.iters)
        server = GrpcServer(work / "repo", args.threads)
        try:
            log(f"{name}: gRPC closed loop, {args.clients} clients, delay {delay} us")
            before = server.counters("m")
            row = asyncio.run(closed_loop(pb, f"127.0.0.1:{server.grpc_port}", request, args.clients,
                                          args.duration))
            after = server.counters("m")
        finally:
            server.stop()
        after_run = http_bench.in_process(model_path, best["batch"], args.threads, args.iters)
        executions = after["nv_inference_exec_count"] - before["nv_inference_exec_count"]
        row["average_batch"] = (after["nv_inference_count"] - before["nv_inference_count"]) / max(1, executions)
        row["delay_us"] = delay
        row["in_process_around_per_s"] = [before_run["throughput_per_s"], after_run["throughput_per_s"]]
        reference = (best["throughput_per_s"] + before_run["throughput_per_s"] + after_run["throughput_per_s"]) / 3
        row["in_process_reference_per_s"] = reference
        row["vs_in_process"] = row["throughput_per_s"] / reference
        rows.append(row)
    return {"model": name, "in_process": in_proc, "best_in_process": best, "closed_loop": rows}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet50")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--duration", type=int, default=20)
    parser.add_argument("--max-batch", type=int, default=16)
    parser.add_argument("--delays", default="0,20000")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--json")
    args = parser.parse_args()
    args.delays = [int(delay) for delay in args.delays.split(",")]
    names = args.models.split(",")
    paths = export_models(names)
    machine = machine_lines(str(http_bench.KILN))
    results = []
    with tempfile.TemporaryDirectory(prefix="kiln-serve-grpc-bench-") as work:
        pb = grpc_client.generate_stubs(pathlib.Path(work) / "stubs")
        for name in names:
            results.append(bench_model(name, paths[name], args, pathlib.Path(work), pb))
    print("\n".join(machine))
    for result in results:
        best = result["best_in_process"]
        print(f"\n{result['model']} over gRPC, {args.clients} clients: best in-process batch {best['batch']}, "
              f"{best['throughput_per_s']:.1f}/s")
        print("| delay (us) | throughput (/s) | in-process around (/s) | vs in-process | avg batch | mean (ms) | "
              "p99 (ms) | errors |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|")
        for row in result["closed_loop"]:
            print(f"| {row['delay_us']} | {row['throughput_per_s']:.1f} | {row['in_process_reference_per_s']:.1f} | "
                  f"{row['vs_in_process']:.2f} | {row['average_batch']:.2f} | {row['mean_ms']:.2f} | "
                  f"{row['p99_ms']:.2f} | {row['errors']} |")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps({"machine": machine, "args": vars(args), "results": results},
                                                      indent=1) + "\n")


if __name__ == "__main__":
    main()
