"""bench/threads.py on the bundled demo model: one CSV row per point of the sweep, with sane values,
and a PNG plot."""
import csv
import os
import subprocess
import sys

import kiln_cli


def test_sweep_writes_its_csv_and_plot(kiln_bin, tmp_path):
    result = subprocess.run(
        [sys.executable, str(kiln_cli.REPO / "bench" / "threads.py"), str(kiln_cli.REPO / "models" / "demo.onnx"),
         "--warmup", "0", "--iters", "2", "--max-threads", "3", "--out-dir", str(tmp_path), "--kiln", str(kiln_bin)],
        capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("cpu: ") and "wrote" in result.stdout
    with open(tmp_path / "threads.csv") as file:
        rows = list(csv.DictReader(file))
    points = [(row["kind"], int(row["callers"]), int(row["threads"])) for row in rows]
    # 1..3 intra-op threads, then every callers x threads <= 3 with at least 2 callers.
    assert points == [("intra-op", 1, 1), ("intra-op", 1, 2), ("intra-op", 1, 3), ("split", 2, 1), ("split", 3, 1)]
    for row in rows:
        assert int(row["total_threads"]) == int(row["callers"]) * int(row["threads"])
        assert 0 < float(row["median_ms"]) <= float(row["p90_ms"])
        assert float(row["throughput_per_s"]) > 0
    with open(tmp_path / "threads.png", "rb") as file:
        assert file.read(8) == b"\x89PNG\r\n\x1a\n"
    assert os.path.getsize(tmp_path / "threads.png") > 10_000
