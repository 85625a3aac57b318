"""Live traces of a running `kiln serve`: POST /v2/trace (or SIGUSR1) traces the next N requests,
whichever protocol carries them, into a kiln Chrome trace where each request is an event with its
queue time and batch, each batch the parent of its run and steps; `kiln profile --load` and
`kiln tidy` read it like any kiln trace.

Everything talks to 127.0.0.1 only, and every wait and request loop is bounded in count and time."""
import concurrent.futures
import json
import pathlib
import re
import signal
import subprocess
import sys
import time

import grpc
import numpy as np
import pytest

from serve_client import Server, matmul_model, write_model

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "examples"))
import grpc_client  # noqa: E402

WEIGHTS = (np.random.default_rng(5).uniform(-1, 1, (16, 8)) / 4).astype(np.float32)


def wait_for_state(server, state, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        answer = server.get("/v2/trace").json()
        if answer["state"] == state:
            return answer
        time.sleep(0.05)
    raise AssertionError(f"the trace did not reach '{state}' within {timeout} s: {answer}")


def events_of(path):
    document = json.loads(pathlib.Path(path).read_text())
    return [event for event in document["traceEvents"] if event.get("ph") == "X"]


@pytest.fixture
def traced_server(kiln_bin, tmp_path):
    repository = tmp_path / "repository"
    write_model(repository, "matmul", {1: matmul_model(WEIGHTS)}, config="""
        max_batch_size: 8
        dynamic_batching { max_queue_delay_microseconds: 20000 preferred_batch_size: [4] }
    """)
    traces = tmp_path / "traces"
    traces.mkdir()
    server = Server(kiln_bin, repository, "--grpc-port", "0", "--trace-dir", traces, "--trace-count", "3")
    yield server, traces
    server.kill()


def test_a_trace_of_50_live_requests_shows_each_ones_queue_time_batch_and_steps(traced_server, kiln_bin, pb):
    server, traces = traced_server
    answer = server.post("/v2/trace", json.dumps({"count": 50}))
    assert answer.status_code == 200, answer.text
    assert answer.json()["state"] == "recording" and answer.json()["count"] == 50
    busy = server.post("/v2/trace", "")
    assert busy.status_code == 409 and "a trace is already recording" in busy.json()["error"]

    stub = pb[1].GRPCInferenceServiceStub(grpc.insecure_channel(server.grpc_target()))
    rng = np.random.default_rng(0)

    def send(index):  # half over HTTP, half over gRPC, from 8 clients at once: batches form
        x = rng.standard_normal((1, 16)).astype(np.float32)
        if index % 2:
            response = server.infer("matmul", [("x", "FP32", x)], request_id=f"r{index}")
            assert response.status_code == 200, response.text
        else:
            request = grpc_client.request_for(pb[0], "matmul", {"x": ("FP32", x)})
            request.id = f"r{index}"
            stub.ModelInfer(request, timeout=30)

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(send, range(50)))
    state = wait_for_state(server, "written")
    assert state["traced"] == 50
    path = pathlib.Path(state["file"])
    assert path.parent == traces and path.exists()

    events = events_of(path)
    by_id = {event["args"]["id"]: event for event in events}
    requests = [event for event in events if event["name"] == "request" and event["args"]["kind"] == "annotation"]
    assert sorted(event["args"]["attributes"]["id"] for event in requests) == sorted(f"r{i}" for i in range(50))
    batches_seen = set()
    for event in requests:
        attributes = event["args"]["attributes"]
        assert (attributes["model"], attributes["version"], attributes["status"]) == ("matmul", "1", "200")
        assert float(attributes["queue_ms"]) >= 0
        assert 1 <= int(attributes["batch_rows"]) <= 8
        batch = by_id[int(attributes["batch"])]
        assert batch["name"] == "batch"
        assert attributes["id"] in batch["args"]["attributes"]["traced_requests"].split(",")
        batches_seen.add(batch["args"]["id"])
    assert len(batches_seen) < 50, "no two requests shared a batch"
    # Each batch holds its run, and the run its steps: the model's MatMul.
    for batch_id in batches_seen:
        runs = [event for event in events if event["args"]["parent_id"] == batch_id and event["args"]["kind"] == "run"]
        assert len(runs) == 1, by_id[batch_id]
        steps = [event for event in events if event["args"]["parent_id"] == runs[0]["args"]["id"]]
        assert [step["name"] for step in steps if step["args"]["kind"] == "step"] == ["MatMul"]
        # ... and sits under its first traced request, whose thread waited for it.
        assert by_id[by_id[batch_id]["args"]["parent_id"]]["name"] == "request"

    profile = subprocess.run([str(kiln_bin), "profile", "--load", str(path), "--group-by", "op"],
                             capture_output=True, text=True, timeout=120)
    assert profile.returncode == 0, profile.stderr
    assert "MatMul" in profile.stdout
    tidy = subprocess.run([str(kiln_bin), "tidy", str(path), "--json"], capture_output=True, text=True, timeout=120)
    assert tidy.returncode == 0, tidy.stderr
    json.loads(tidy.stdout)


def test_sigusr1_traces_the_next_trace_count_requests(traced_server):
    server, traces = traced_server
    server.process.send_signal(signal.SIGUSR1)
    assert server.wait_for_line(re.compile(r"^kiln serve: tracing the next 3 requests into "), 30), server.stderr
    for index in range(3):
        response = server.infer("matmul", [("x", "FP32", np.ones((1, 16), np.float32))])
        assert response.status_code == 200
    state = wait_for_state(server, "written")
    assert state["traced"] == 3
    assert len([e for e in events_of(state["file"]) if e["name"] == "request"]) == 3


def test_without_a_trace_dir_traces_are_refused_saying_how_to_turn_them_on(kiln_bin, tmp_path):
    write_model(tmp_path, "matmul", {1: matmul_model(WEIGHTS)})
    server = Server(kiln_bin, tmp_path)
    try:
        answer = server.post("/v2/trace", json.dumps({"count": 5}))
        assert answer.status_code == 400 and "start kiln serve with --trace-dir DIR" in answer.json()["error"]
        assert server.get("/v2/trace").json()["state"] == "idle"
        bad = server.post("/v2/trace", json.dumps({"count": "many"}))
        assert bad.status_code == 400 and "must be an integer" in bad.json()["error"]
    finally:
        server.kill()


@pytest.fixture(scope="module")
def pb(tmp_path_factory):
    return grpc_client.generate_stubs(tmp_path_factory.mktemp("stubs"))
