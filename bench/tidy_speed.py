#!/usr/bin/python3
"""How long `kiln tidy` takes on a big PyTorch trace, and how much memory: the file is generated here.

    /usr/bin/python3 bench/tidy_speed.py [--events 1000000] [--rounds 3] [--kiln build/kiln] [--keep FILE]
        [--pythonpath build/python]

One profiled PyTorch run (tests/python/tidy_workloads.py's mixed workload: every TorchTidy pattern,
with Python frames, shapes and memory events) is written as a Kineto trace and copied end to end,
shifted in time, until the file holds at least --events events. `kiln tidy --json` then analyses it
--rounds times, each in its own process; the table gives each round's wall time and peak RSS
(from wait4), and checks that every pattern's count is the copies times its count on one copy, which
TorchTidy's own counts on the live run fix. The target (docs/tidy.md): 1 million events in under
10 s and 2 GB. First, TorchTidy and kiln.tidy.report are timed side by side on the live profile of
one copy (TorchTidy reads only live profiles). Needs Debian's /usr/bin/python3 with torch.

Then user patterns (kiln.tidy.Pattern in Python): TorchTidy's patterns rewritten as user patterns
(examples/tidy/torchtidy_patterns.py) against the built-ins, end to end, the load included: each
pattern alone in a fresh process (the file loaded, its tree built, matched_events()), and
`kiln tidy --patterns` with all eight against `kiln tidy` without. The target (docs/tidy.md): a user
pattern at most 2x the built-in's wall time.
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "python"))
sys.path.insert(0, str(REPO / "bench"))

import tidy_workloads  # noqa: E402
import torch_profiles  # noqa: E402
from machine import machine_lines  # noqa: E402
from torch.profiler import _pattern_matcher as torchtidy  # noqa: E402

TORCHTIDY_PATTERNS = [
    torchtidy.ExtraCUDACopyPattern, torchtidy.ForLoopIndexingPattern, torchtidy.FP32MatMulPattern,
    torchtidy.OptimizerSingleTensorPattern, torchtidy.SynchronizedDataLoaderPattern,
    torchtidy.GradNotSetToNonePattern, torchtidy.Conv2dBiasFollowedByBatchNorm2dPattern,
    torchtidy.MatMulDimInFP16Pattern,
]


def median_seconds(function, rounds=5):
    times = []
    for _ in range(rounds):
        start = time.monotonic()
        function()
        times.append(time.monotonic() - start)
    return sorted(times)[len(times) // 2]


def one_copy(directory, kiln_module):
    """The events of one profiled run, as JSON objects, and TorchTidy's count per pattern on it.
    Prints how long TorchTidy and kiln.tidy take on that live profile, side by side."""
    prof = tidy_workloads.profiled(tidy_workloads.mixed, profile_memory=True)
    counts = {pattern(prof).name: len(pattern(prof).matched_events()) for pattern in TORCHTIDY_PATTERNS}
    torchtidy_seconds = median_seconds(lambda: [pattern(prof).matched_events() for pattern in TORCHTIDY_PATTERNS])
    line = f"the live profile ({len(torch_profiles.preorder(prof))} events), median of 5: TorchTidy's 8 patterns " \
           f"{torchtidy_seconds * 1000:.1f} ms"
    if kiln_module is not None:
        kiln_seconds = median_seconds(lambda: kiln_module.tidy.report(prof))
        trace = kiln_module.profiler.load_trace(prof)
        analysis_seconds = median_seconds(lambda: kiln_module.tidy.report(trace))
        line += (f"; kiln.tidy.report {kiln_seconds * 1000:.1f} ms, of which the analysis (C++) "
                 f"{analysis_seconds * 1000:.1f} ms and reading PyTorch's tree from Python the rest")
    print(line)
    path = directory / "one.json"
    torch_profiles.write_kineto(prof, path)
    events = [event for event in json.loads(path.read_text())["traceEvents"]
              if event.get("ph") in ("X", "i") and event.get("cat") != "Trace"]
    for event in events:
        event.get("args", {}).pop("Ev Idx", None)
    return events, counts


def write_copies(events, target, path):
    """Copies `events` end to end (times shifted past the previous copy, Python ids renumbered) until
    the file holds at least `target` events; returns the number of copies."""
    starts = [float(event["ts"]) for event in events]
    span = max(float(event["ts"]) + float(event.get("dur", 0)) for event in events) - min(starts) + 10.0
    python_ids = max([event["args"].get("Python id", 0) for event in events if "args" in event] + [0]) + 1
    copies = -(-target // len(events))
    with open(path, "w") as out:
        out.write('{"schemaVersion": 1, "deviceProperties": [], "baseTimeNanoseconds": 0, "traceEvents": [\n')
        for copy in range(copies):
            lines = []
            for event in events:
                moved = dict(event, ts=f"{float(event['ts']) + copy * span:.3f}")
                args = event.get("args")
                if args and "Python id" in args:
                    moved["args"] = dict(args, **{"Python id": args["Python id"] + copy * python_ids})
                    if isinstance(args["Python parent id"], int):
                        moved["args"]["Python parent id"] = args["Python parent id"] + copy * python_ids
                text = json.dumps(moved)
                # ts as written by Kineto: a number with three decimals, not a string.
                lines.append(text.replace(f'"ts": "{moved["ts"]}"', f'"ts": {moved["ts"]}'))
            out.write((",\n" if copy else "") + ",\n".join(lines))
        out.write("\n]}\n")
    return copies


EXAMPLE = REPO / "examples" / "tidy" / "torchtidy_patterns.py"
ONE_PATTERN = """
import importlib.util, sys, time
start = time.monotonic()
import kiln
kind, name, path = sys.argv[1:4]
if kind == "user":
    spec = importlib.util.spec_from_file_location("torchtidy_patterns", sys.argv[4])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    pattern = getattr(module, name)(path)
else:
    pattern = getattr(kiln.tidy, name)(path)
matched = len(pattern.matched_events())
print(matched, time.monotonic() - start)
"""


def timed_process(command, env=None):
    """(wall seconds, peak RSS MiB, stdout) of one process."""
    start = time.monotonic()
    with tempfile.TemporaryFile("w+") as errors:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=errors, text=True, env=env)
        stdout = process.stdout.read()
        process.stdout.close()
        # wait4 gives this child's own peak RSS (getrusage would give the largest child so far).
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
        seconds = time.monotonic() - start
        if process.returncode != 0:
            errors.seek(0)
            sys.exit(f"{' '.join(command[:3])} failed: {errors.read()}")
    return seconds, usage.ru_maxrss / 1024, stdout


def user_pattern_rounds(path, args, counts, copies):
    """User patterns against the built-ins, each end to end in its own process."""
    env = dict(os.environ, PYTHONPATH=args.pythonpath)
    print("\nEach pattern alone, end to end in a fresh process (python3 starts, kiln loads the file, builds "
          "the tree, matched_events()), median of the rounds:\n")
    print("| pattern | matches | built-in s | user s | user / built-in |\n|---|---:|---:|---:|---:|")
    sys.path.insert(0, str(EXAMPLE.parent))
    import torchtidy_patterns  # noqa: E402: the example, for its class names
    worst = 0.0
    for cls in torchtidy_patterns.PATTERNS:
        seconds = {}
        for kind in ("builtin", "user"):
            samples = []
            for _ in range(args.rounds):
                wall, _, out = timed_process(["/usr/bin/python3", "-c", ONE_PATTERN, kind, cls.__name__, str(path),
                                              str(EXAMPLE)], env)
                matched = int(out.split()[0])
                samples.append(wall)
            if matched != copies * counts[cls.name]:
                sys.exit(f"{kind} {cls.__name__}: {matched} matches, expected {copies} x {counts[cls.name]}")
            seconds[kind] = sorted(samples)[len(samples) // 2]
        ratio = seconds["user"] / seconds["builtin"]
        worst = max(worst, ratio)
        print(f"| {cls.__name__} | {matched} | {seconds['builtin']:.2f} | {seconds['user']:.2f} | {ratio:.2f} |")
    print(f"\nworst user / built-in: {worst:.2f}")
    print("\n`kiln tidy --json` with and without `--patterns` (the eight user patterns after every built-in):\n")
    print("| round | without s | with s | with / without | peak RSS MiB with |\n|---:|---:|---:|---:|---:|")
    for round_index in range(args.rounds):
        without, _, _ = timed_process([args.kiln, "tidy", str(path), "--json"])
        with_, rss, stdout = timed_process([args.kiln, "tidy", str(path), "--json", "--patterns", str(EXAMPLE)], env)
        report = json.loads(stdout)
        for pattern, count in counts.items():
            if report["counts"][f"{pattern} (user)"] != report["counts"][pattern]:
                sys.exit(f"{pattern} (user): {report['counts'][f'{pattern} (user)']} matches, "
                         f"the built-in {report['counts'][pattern]}")
        print(f"| {round_index + 1} | {without:.2f} | {with_:.2f} | {with_ / without:.2f} | {rss:.0f} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--kiln", default=str(REPO / "build" / "kiln"))
    parser.add_argument("--keep", help="write the generated trace here (default: a temporary file)")
    parser.add_argument("--pythonpath", default=str(REPO / "build" / "python"),
                        help="where the kiln Python module is, to time kiln.tidy on the live profile too")
    args = parser.parse_args()
    sys.path.insert(0, args.pythonpath)
    try:
        import kiln as kiln_module
    except ImportError:
        kiln_module = None

    with tempfile.TemporaryDirectory() as scratch:
        scratch = pathlib.Path(scratch)
        print("\n".join(machine_lines(args.kiln)))
        events, counts = one_copy(scratch, kiln_module)
        path = pathlib.Path(args.keep) if args.keep else scratch / "big.json"
        copies = write_copies(events, args.events, path)
        total = copies * len(events)
        print(f"trace: {total} events ({copies} copies of {len(events)}), {path.stat().st_size / 2**20:.0f} MiB\n")
        print("| round | wall s | peak RSS MiB |\n|---:|---:|---:|")
        for round_index in range(args.rounds):
            start = time.monotonic()
            process = subprocess.Popen([args.kiln, "tidy", str(path), "--json"], stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=True)
            # wait4 gives this child's own peak RSS (getrusage would give the largest child so far).
            stdout = process.stdout.read()
            _, status, usage = os.wait4(process.pid, 0)
            seconds = time.monotonic() - start
            process.returncode = os.waitstatus_to_exitcode(status)
            if process.returncode != 0:
                sys.exit(f"kiln tidy failed: {process.stderr.read()}")
            report = json.loads(stdout)
            for pattern, count in counts.items():
                if report["counts"][pattern] != copies * count:
                    sys.exit(f"{pattern}: {report['counts'][pattern]} matches, expected {copies} x {count}")
            print(f"| {round_index + 1} | {seconds:.2f} | {usage.ru_maxrss / 1024:.0f} |")
        print(f"\nevery pattern's count is {copies} x TorchTidy's on one copy: "
              + ", ".join(f"{pattern} {count}" for pattern, count in counts.items() if count))
        if kiln_module is not None:
            user_pattern_rounds(path, args, counts, copies)


if __name__ == "__main__":
    main()
