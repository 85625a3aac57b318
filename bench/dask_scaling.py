#!/usr/bin/python3
"""Batch inference on Dask (kiln.dask): images per second over 1 and 2 single-threaded worker
processes, against in-process kiln on the same batches at 1 and 2 threads.

    /usr/bin/python3 bench/dask_scaling.py [--model resnet18] [--images 512] [--batch 8] [--block 8]
        [--rounds 3] [--json FILE]

The model is exported by tests/python/export_models.py (opset 13, dynamic batch). The images are a
Dask array of ones made on the workers in blocks of --block rows (one Dask task each, run --batch rows
at a time; making a block is a fill of 600 KB per row, inside the Dask times).

Per round, interleaved so that a slow spell of the machine hits every row: in-process kiln (one
Session with threads=1, then threads=2, running --batch rows at a time, each batch a new array of
ones as Dask's blocks are), then a LocalCluster of 1 and of 2 worker processes, 1 Dask thread each, each loading the
model once (kiln.dask.Model, threads=1) and warming up before the clock starts, timing
kiln.dask.predict(images, batch_size=--batch) and its compute(). Each cell is the median of --rounds
rounds. Dask's time per batch is one worker's wall time beyond the time its runs spent in kiln
(Model.run_stats), over the batches.
Every process runs on 127.0.0.1 on this machine's cores.
"""
import argparse
import json
import os
import pathlib
import resource
import statistics
import sys
import time

from machine import machine_lines
from run_all import REPO, export_models, log

BUILD_PYTHON = REPO / "build" / "python"
KILN = str(REPO / "build" / "kiln")


def in_process_seconds(kiln, model_path, images, batch, threads):
    import numpy as np
    session = kiln.Session(model_path, threads=threads)
    session.run({"input": np.ones((batch, 3, 224, 224), np.float32)})  # plan and warm up
    start = time.perf_counter()
    for first in range(0, images, batch):
        # A new array per batch, as Dask's blocks are (and a pipeline's decoded images would be).
        session.run({"input": np.ones((min(batch, images - first), 3, 224, 224), np.float32)})
    return time.perf_counter() - start


def memory_mb():
    """This process's resident and private memory (MB), from /proc/self/smaps_rollup."""
    fields = {}
    for line in open("/proc/self/smaps_rollup"):
        parts = line.split()
        if len(parts) == 3 and parts[2] == "kB":
            fields[parts[0].rstrip(":")] = int(parts[1]) / 1024
    return {"rss": fields["Rss"], "private": fields["Private_Clean"] + fields["Private_Dirty"]}


def process_cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def dask_round(kiln_dask, model_path, images, batch, block, workers):
    """(seconds for predict + compute, seconds the workers spent in kiln, each worker's memory, CPU
    seconds of this process: the client and LocalCluster's scheduler) on a new LocalCluster."""
    import dask.array as da
    import numpy as np
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=None) as cluster, Client(cluster) as client:
        model = kiln_dask.Model(model_path, threads=1).register(client)
        # Plan and warm up on every worker: two batches each.
        warm = da.ones((2 * workers * batch, 3, 224, 224), dtype=np.float32, chunks=(batch, 3, 224, 224))
        kiln_dask.predict(warm, model, batch_size=batch).compute()
        before = model.run_stats(client)
        data = da.ones((images, 3, 224, 224), dtype=np.float32, chunks=(block, 3, 224, 224))
        cpu_before = process_cpu_seconds()
        start = time.perf_counter()
        result = kiln_dask.predict(data, model, batch_size=batch).compute()
        seconds = time.perf_counter() - start
        scheduler_cpu = process_cpu_seconds() - cpu_before
        after = model.run_stats(client)
        assert result.shape[0] == images
        assert set(client.run(kiln_dask.sessions_loaded).values()) == {1}
        memory = list(client.run(memory_mb).values())
    in_kiln = sum(after[worker]["run_seconds"] - before[worker]["run_seconds"] for worker in after)
    return seconds, in_kiln, memory, scheduler_cpu


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--images", type=int, default=512)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--block", type=int, default=8, help="rows per Dask block (task)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json")
    args = parser.parse_args()
    if not 1 <= args.batch <= args.block <= args.images or args.rounds < 1:
        parser.error("need 1 <= --batch <= --block <= --images and a positive --rounds")

    sys.path.insert(0, str(BUILD_PYTHON))
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(BUILD_PYTHON), os.environ.get("PYTHONPATH")]))
    import kiln
    import kiln.dask

    model_path = export_models([args.model])[args.model]
    machine = machine_lines(KILN)
    batches = -(-args.images // args.batch)
    rows = {}
    in_kiln = []
    worker_memory = []
    scheduler_cpu = {1: [], 2: []}
    names = ["in-process kiln, 1 thread", "in-process kiln, 2 threads", "kiln.dask, 1 worker x 1 thread",
             "kiln.dask, 2 workers x 1 thread"]
    for index in range(args.rounds):  # interleaved, so that a slow spell of the machine hits every row
        times = [in_process_seconds(kiln, model_path, args.images, args.batch, threads) for threads in (1, 2)]
        one = dask_round(kiln.dask, model_path, args.images, args.batch, args.block, 1)
        two = dask_round(kiln.dask, model_path, args.images, args.batch, args.block, 2)
        in_kiln.append(one[1])
        worker_memory.append(two[2])
        scheduler_cpu[1].append(one[3])
        scheduler_cpu[2].append(two[3])
        for name, seconds in zip(names, times + [one[0], two[0]]):
            rows.setdefault(name, []).append(seconds)
        log(f"round {index + 1}: " + ", ".join(f"{name}: {seconds[-1]:.3f} s" for name, seconds in rows.items()))

    medians = {name: statistics.median(seconds) for name, seconds in rows.items()}
    throughput = {name: args.images / seconds for name, seconds in medians.items()}
    scaling = throughput[names[3]] / throughput[names[2]]
    # One worker's wall time beyond the time its runs spent in kiln, per batch.
    overhead_ms = statistics.median(wall - kiln_seconds for wall, kiln_seconds in zip(rows[names[2]], in_kiln)) \
        / batches * 1000

    print("\n".join(machine))
    print(f"\n{args.model}, {args.images} images, batch {args.batch}, blocks of {args.block} rows, "
          f"median of {args.rounds} rounds\n")
    print("| runs | seconds | images/s | vs in-process, 2 threads |")
    print("|---|---|---|---|")
    reference = throughput["in-process kiln, 2 threads"]
    for name in rows:
        print(f"| {name} | {medians[name]:.3f} | {throughput[name]:.1f} | {throughput[name] / reference:.2f}x |")
    last = worker_memory[-1]
    print("\nEach of 2 workers after its job: " + ", ".join(f"RSS {m['rss']:.0f} MB (private {m['private']:.0f} MB)"
                                                           for m in last))
    cpu = {workers: statistics.median(seconds) for workers, seconds in scheduler_cpu.items()}
    print(f"The client and scheduler (one process, on the same cores) used {cpu[1]:.2f} CPU-s with 1 worker and "
          f"{cpu[2]:.2f} with 2")
    print(f"2 workers / 1 worker: {scaling:.2f}x; Dask's time per batch (1 worker's wall time beyond its "
          f"time in kiln): {overhead_ms:.1f} ms")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps({
            "machine": machine, "args": vars(args), "seconds": rows, "median_seconds": medians,
            "images_per_second": throughput, "scaling_2_over_1_workers": scaling,
            "dask_overhead_ms_per_batch": overhead_ms, "worker_memory_mb": worker_memory,
            "client_and_scheduler_cpu_seconds": scheduler_cpu}, indent=1) + "\n")


if __name__ == "__main__":
    main()
