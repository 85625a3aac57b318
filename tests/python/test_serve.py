"""`kiln serve` against the KServe v2 (Open Inference Protocol) HTTP contract as Triton implements it:
the startup lines and the port it picked, health and metadata, model configuration from config.pbtxt
(and without one), version policies, every datatype through JSON and the binary tensor extension
bit for bit, error statuses with a JSON body (the server healthy after each), dynamic batching that
gives each client exactly its own rows, queue limits and timeouts, the Prometheus metrics, request
size limits, clients that hang up, and graceful shutdown on SIGTERM.

One server per module serves most tests (its repository is built here with onnx.helper); tests that
need other options or must stop the server start their own. Real clients: requests and curl."""
import json
import signal
import socket
import struct
import subprocess
import threading
import time

import numpy as np
import onnx
import pytest
import requests

import kiln_cli
from serve_client import (DATATYPES, INTEGER_EDGE_VALUES, LISTENING, METRICS_ON, MODEL_FAILED, MODEL_READY, Server,
                          add_model, build_request, error_message, http_request_bytes, identity_model, infer_path,
                          matmul_model, metric, new_session, parse_metrics, parse_response, plus_constant_model,
                          raw_http, response_arrays, write_model)

RNG = np.random.default_rng(20240611)
WEIGHTS = (RNG.uniform(-1, 1, (16, 8)) / 4).astype(np.float32)  # the matmul model's constant
TOLERANCE = dict(rtol=1e-5, atol=1e-5)  # batched MatMul against numpy and against the request alone

# Six values per datatype (a [2, 3] tensor) at the edges of each type and exactly representable in it:
# JSON has to carry them through unchanged (a 64-bit integer through a double would not).
JSON_VALUES = {
    **INTEGER_EDGE_VALUES,
    "FP16": np.array([0.5, -2.25, 65504.0, 6.103515625e-05, 0.1, -3.14159], np.float16),
    "FP32": np.array([0.1, -1.5, 3.4028234663852886e38, 1.1754943508222875e-38, 1 / 3, -123456.789], np.float32),
    "FP64": np.array([0.1, -1e308, 2.2250738585072014e-308, 1 / 3, -2.5, 123456789.123456789], np.float64),
    # bfloat16 bits: 1.5, -3.0, the largest finite, the smallest normal, 256, 0.1 truncated
    "BF16": np.array([0x3FC0, 0xC040, 0x7F7F, 0x0080, 0x4380, 0x3DCC], np.uint16),
}
# Values only raw bytes can carry (NaN, infinities, -0, subnormals): Identity must pass their bits.
BINARY_ONLY_VALUES = {
    "FP16": np.array([np.nan, np.inf, -np.inf, -0.0, 6e-08, 1.0], np.float16),
    "FP32": np.array([np.nan, np.inf, -np.inf, -0.0, 1.4e-45, 1.0], np.float32),
    "FP64": np.array([np.nan, np.inf, -np.inf, -0.0, 5e-324, 1.0], np.float64),
    "BF16": np.array([0x7FC0, 0x7F80, 0xFF80, 0x8000, 0x0001, 0x3F80], np.uint16),
}


def matmul_reference(x):
    """x @ WEIGHTS in float64: kiln's float32 result is within TOLERANCE of it for |x| <= 1."""
    return x.astype(np.float64) @ WEIGHTS.astype(np.float64)


def identity_name(datatype):
    return f"identity_{datatype.lower()}"


def queued_config(name, delay_us, queue_policy="", max_batch_size=8):
    """Identity on float32 [batch, 3] that waits up to DELAY_US for a batch of 8."""
    return f"""name: "{name}"
max_batch_size: {max_batch_size}
input [ {{ name: "x" data_type: TYPE_FP32 dims: [ 3 ] }} ]
output [ {{ name: "y" data_type: TYPE_FP32 dims: [ 3 ] }} ]
dynamic_batching {{
  max_queue_delay_microseconds: {delay_us}
  preferred_batch_size: [ 8 ]
  {queue_policy}
}}
"""


def versioned_config(name, policy):
    return f"""name: "{name}"
platform: "onnxruntime_onnx"
max_batch_size: 4
input [ {{ name: "x" data_type: TYPE_FP32 dims: [ 3 ] }} ]
output [ {{ name: "y" data_type: TYPE_FP32 dims: [ 3 ] }} ]
version_policy: {policy}
"""


MATMUL_CONFIG = """# y = x @ W, batched: the form Triton's documentation gives
name: "matmul"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "x" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ 8 ] } ]
dynamic_batching {
  max_queue_delay_microseconds: 20000
  preferred_batch_size: [ 4, 8 ]
  default_queue_policy { max_queue_size: 64 default_timeout_microseconds: 0 }
}
instance_group [ { count: 2 kind: KIND_CPU } ]
parameters { key: "threads" value: { string_value: "1" } }
"""

VERSION_POLICIES = {"policy_default": (None, [3]), "policy_all": ("{ all { } }", [1, 2, 3]),
                    "policy_latest2": ("{ latest { num_versions: 2 } }", [2, 3]),
                    "policy_specific": ("{ specific { versions: [1, 3] } }", [1, 3])}
SLOW_QUEUE_DELAY = 0.5  # seconds a lone request waits in slow_queue
TINY_QUEUE_DELAY = 2.0


def main_models(repository):
    """The module server's repository; returns {model: [versions expected ready]}."""
    expected = {}
    for datatype in DATATYPES:
        write_model(repository, identity_name(datatype), {1: identity_model(datatype)})
        expected[identity_name(datatype)] = [1]
    write_model(repository, "add", {1: add_model()})
    write_model(repository, "fixed", {1: identity_model("FP32", shape=(2, 3))})
    write_model(repository, "matmul", {1: matmul_model(WEIGHTS)}, MATMUL_CONFIG)
    write_model(repository, "slow_queue", {1: identity_model("FP32")},
                queued_config("slow_queue", int(SLOW_QUEUE_DELAY * 1e6)))
    write_model(repository, "tiny_queue", {1: identity_model("FP32")},
                queued_config("tiny_queue", int(TINY_QUEUE_DELAY * 1e6), "default_queue_policy { max_queue_size: 2 }"))
    write_model(repository, "timeout_queue", {1: identity_model("FP32")},
                queued_config("timeout_queue", 300000, "default_queue_policy { default_timeout_microseconds: 1000 }"))
    expected.update({name: [1] for name in ("add", "fixed", "matmul", "slow_queue", "tiny_queue", "timeout_queue")})
    for name, (policy, served) in VERSION_POLICIES.items():
        write_model(repository, name, {v: plus_constant_model(float(v)) for v in (1, 2, 3)},
                    versioned_config(name, policy) if policy else None)
        expected[name] = served
    return expected


@pytest.fixture(scope="module")
def repository(tmp_path_factory):
    path = tmp_path_factory.mktemp("repository")
    return path, main_models(path)


@pytest.fixture(scope="module")
def server(kiln_bin, repository):
    """The module's server: one intra-op thread per run, a budget of 2 threads, metrics also on a
    port of their own."""
    started = Server(kiln_bin, repository[0], "--threads", 1, "--thread-budget", 2, "--metrics-port", 0,
                     "--shutdown-timeout", 5)
    try:
        started.ready_at_start = started.get("/v2/health/ready").status_code
        yield started
    finally:
        started.kill()


@pytest.fixture
def start_server(kiln_bin):
    """Starts servers of a test's own (--threads 1 and the options given); all killed at its end."""
    servers = []

    def start(repository, *options):
        servers.append(Server(kiln_bin, repository, "--threads", 1, *options))
        return servers[-1]
    yield start
    for started in servers:
        started.kill()


def add_inputs(rows=2, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.uniform(-100, 100, (rows, 4)).astype(np.float32)
    b = rng.uniform(-100, 100, (rows, 4)).astype(np.float32)
    return a, b


def assert_healthy(server):
    """The server is up, ready, and adds correctly."""
    assert server.process.poll() is None, f"server exited with {server.process.returncode}:\n{server.stderr}"
    assert server.get("/v2/health/ready").status_code == 200
    a, b = add_inputs(3, seed=99)
    arrays = response_arrays(server.infer("add", [("a", "FP32", a), ("b", "FP32", b)]))
    assert np.array_equal(arrays["sum"], a + b) and np.array_equal(arrays["diff"], a - b)


def curl(*args):
    """curl ARGS (never through a proxy, bounded); returns (status, body bytes)."""
    command = ["curl", "-sS", "--noproxy", "*", "--max-time", "20", "-o", "-", "-w", "\n%{http_code}", *map(str, args)]
    result = subprocess.run(command, capture_output=True, timeout=60)
    assert result.returncode == 0, result.stderr.decode()
    body, _, status = result.stdout.rpartition(b"\n")
    return int(status), body


def bits(datatype, array):
    """Bitwise view of an array of DATATYPE's numpy type (floats compare as their bits, NaN included)."""
    array = np.asarray(array)
    if datatype in ("FP16", "BF16"):
        return array.view(np.uint16)
    if datatype == "FP32":
        return array.view(np.uint32)
    if datatype == "FP64":
        return array.view(np.uint64)
    return array


# --- startup, health, metadata -------------------------------------------------------------------

def test_startup_names_every_model_version_before_listening_on_the_port_it_picked(server, repository):
    """Each loaded version has its line, none failed, and the listening line comes after them all
    with the real port: clients wait for it and then find every model ready."""
    expected = {(name, version) for name, versions in repository[1].items() for version in versions}
    ready = server.matching(MODEL_READY)
    assert {(m["name"], int(m["version"])) for m in ready} == expected, server.stderr
    assert len(ready) == len(expected), f"a version announced twice:\n{server.stderr}"
    assert not server.matching(MODEL_FAILED), server.stderr
    lines = server.lines
    listening = next(i for i, line in enumerate(lines) if LISTENING.match(line))
    assert all(lines.index(m.string) < listening for m in ready), server.stderr
    assert server.host == "127.0.0.1" and 0 < server.port < 65536
    assert server.ready_at_start == 200


def test_health_endpoints(server):
    assert server.get("/v2/health/live").status_code == 200
    assert server.get("/v2/health/ready").status_code == 200


def test_server_metadata_through_curl(server, kiln_bin):
    status, body = curl(server.url + "/v2")
    assert status == 200, body
    metadata = json.loads(body)
    version = kiln_cli.run(kiln_bin, "--version").stdout.split()[-1]
    assert metadata["name"] == "kiln" and metadata["version"] == version
    assert {"binary_tensor_data", "model_configuration"} <= set(metadata["extensions"])


@pytest.mark.parametrize("datatype", DATATYPES)
def test_model_metadata_and_config_of_a_model_without_config(server, datatype):
    """No config.pbtxt: names, types and shapes come from the model, and a symbolic first dimension
    everywhere makes max_batch_size 4 (so the metadata shapes start with -1)."""
    name = identity_name(datatype)
    for path in (f"/v2/models/{name}", f"/v2/models/{name}/versions/1"):
        response = server.get(path)
        assert response.status_code == 200, response.text
        metadata = response.json()
        assert metadata["name"] == name and metadata["versions"] == ["1"] and metadata["platform"] == "kiln_onnx"
        assert metadata["inputs"] == [{"name": "x", "datatype": datatype, "shape": [-1, 3]}]
        assert metadata["outputs"] == [{"name": "y", "datatype": datatype, "shape": [-1, 3]}]
    config = server.get(f"/v2/models/{name}/config").json()
    assert config["name"] == name and int(config["max_batch_size"]) == 4
    assert [(e["name"], e["data_type"], [int(d) for d in e["dims"]]) for e in config["input"]] == \
        [("x", f"TYPE_{datatype}", [3])]
    assert [(e["name"], e["data_type"], [int(d) for d in e["dims"]]) for e in config["output"]] == \
        [("y", f"TYPE_{datatype}", [3])]


def test_model_with_a_fixed_first_dimension_does_not_batch(server):
    """A model whose first dimension is a number gets max_batch_size 0: shapes are the model's, and
    only that shape is accepted."""
    metadata = server.get("/v2/models/fixed").json()
    assert metadata["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [2, 3]}]
    assert int(server.get("/v2/models/fixed/config").json()["max_batch_size"]) == 0
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert np.array_equal(response_arrays(server.infer("fixed", [("x", "FP32", x)]))["y"], x)
    response = server.infer("fixed", [("x", "FP32", x[:1])])
    assert response.status_code == 400
    error_message(response)
    assert_healthy(server)


def test_config_pbtxt_is_the_effective_config(server):
    """Every field of the config file comes back under Triton's names, and the metadata shapes gain the
    batch dimension (-1) the config's dims leave out."""
    config = server.get("/v2/models/matmul/config").json()
    assert config["name"] == "matmul" and int(config["max_batch_size"]) == 8
    assert [(e["name"], e["data_type"], [int(d) for d in e["dims"]]) for e in config["input"]] == [("x", "TYPE_FP32", [16])]
    assert [(e["name"], e["data_type"], [int(d) for d in e["dims"]]) for e in config["output"]] == [("y", "TYPE_FP32", [8])]
    batching = config["dynamic_batching"]
    assert int(batching["max_queue_delay_microseconds"]) == 20000
    assert [int(size) for size in batching["preferred_batch_size"]] == [4, 8]
    assert int(batching["default_queue_policy"]["max_queue_size"]) == 64
    assert [(int(group["count"]), group["kind"]) for group in config["instance_group"]] == [(2, "KIND_CPU")]
    assert config["parameters"] == {"threads": {"string_value": "1"}}
    metadata = server.get("/v2/models/matmul").json()
    assert metadata["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [-1, 16]}]
    assert metadata["outputs"] == [{"name": "y", "datatype": "FP32", "shape": [-1, 8]}]


def test_model_ready_endpoints(server):
    assert server.get("/v2/models/add/ready").status_code == 200
    assert server.get("/v2/models/add/versions/1/ready").status_code == 200
    assert server.get("/v2/models/add/versions/2/ready").status_code == 404
    assert server.get("/v2/models/no_such_model/ready").status_code == 404
    assert server.get("/v2/models/no_such_model/versions/1/ready").status_code == 404


@pytest.mark.parametrize("model", VERSION_POLICIES)
def test_version_policy_decides_which_versions_serve(server, model):
    """Version v of these models adds v: each served version answers as itself, an unversioned request
    goes to the newest served one, and versions the policy leaves out are unknown (404)."""
    served = VERSION_POLICIES[model][1]
    metadata = server.get(f"/v2/models/{model}").json()
    assert sorted(metadata["versions"], key=int) == [str(v) for v in served]
    x = np.array([[1.25, -2.5, 100.0]], np.float32)
    for version in (1, 2, 3):
        ready = server.get(f"/v2/models/{model}/versions/{version}/ready").status_code
        response = server.infer(model, [("x", "FP32", x)], version=version)
        if version in served:
            assert ready == 200
            assert response.status_code == 200, response.text
            header, arrays = parse_response(response.headers, response.content)
            assert header["model_version"] == str(version)
            assert np.array_equal(arrays["y"], x + np.float32(version))
            assert server.get(f"/v2/models/{model}/versions/{version}").status_code == 200
        else:
            assert ready == 404
            assert response.status_code == 404, response.text
            error_message(response)
            assert server.get(f"/v2/models/{model}/versions/{version}").status_code == 404
    response = server.infer(model, [("x", "FP32", x)])
    assert response.status_code == 200, response.text
    header, arrays = parse_response(response.headers, response.content)
    assert header["model_name"] == model and header["model_version"] == str(max(served))
    assert np.array_equal(arrays["y"], x + np.float32(max(served)))


# --- inference ----------------------------------------------------------------------------------------

MODES = {"json": (False, False), "binary": (True, True), "json_in_binary_out": (False, True),
         "binary_in_json_out": (True, False)}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("datatype", DATATYPES)
def test_identity_returns_every_datatype_bit_for_bit(server, datatype, mode):
    """Identity of each datatype returns its input unchanged whichever way the tensors travel: JSON
    numbers (FP16/BF16 converted), raw little-endian bytes, or one each way. Raw bytes both ways also
    carry NaN, infinities, -0 and subnormals."""
    binary_in, binary_out = MODES[mode]
    values = JSON_VALUES[datatype]
    if binary_in and binary_out and datatype in BINARY_ONLY_VALUES:
        values = np.concatenate([values, BINARY_ONLY_VALUES[datatype]])
    values = values.reshape(-1, 3)
    model = identity_name(datatype)
    response = server.infer(model, [("x", datatype, values)], outputs=["y"], binary_inputs=binary_in,
                            binary_outputs=binary_out, request_id=f"{datatype}-{mode}")
    assert response.status_code == 200, response.text[:500]
    header, arrays = parse_response(response.headers, response.content)
    assert header["model_name"] == model and header["model_version"] == "1" and header["id"] == f"{datatype}-{mode}"
    (output,) = header["outputs"]
    assert output["name"] == "y" and output["datatype"] == datatype and output["shape"] == list(values.shape)
    assert ("binary_data_size" in (output.get("parameters") or {})) == binary_out
    assert bits(datatype, arrays["y"]).tolist() == bits(datatype, values).tolist()


def test_binary_data_output_parameter_makes_every_output_binary(server):
    a, b = add_inputs(2, seed=1)
    response = server.infer("add", [("a", "FP32", a), ("b", "FP32", b)], parameters={"binary_data_output": True})
    header, arrays = parse_response(response.headers, response.content)
    assert int(response.headers["Inference-Header-Content-Length"]) < len(response.content)
    assert {o["name"]: o["parameters"]["binary_data_size"] for o in header["outputs"]} == {"sum": 32, "diff": 32}
    assert np.array_equal(arrays["sum"], a + b) and np.array_equal(arrays["diff"], a - b)


def test_inputs_mixed_binary_and_json_and_outputs_chosen_per_output(server):
    """One binary input beside a JSON one; one binary output beside a JSON one."""
    a, b = add_inputs(3, seed=2)
    response = server.infer("add", [("a", "FP32", a), ("b", "FP32", b)], binary_inputs={"b"},
                            outputs=["sum", "diff"], binary_outputs={"diff"})
    header, arrays = parse_response(response.headers, response.content)
    outputs = {o["name"]: o for o in header["outputs"]}
    assert "data" in outputs["sum"] and outputs["diff"]["parameters"]["binary_data_size"] == 48
    assert np.array_equal(arrays["sum"], a + b) and np.array_equal(arrays["diff"], a - b)


def test_only_the_requested_outputs_come_back(server):
    a, b = add_inputs(2, seed=3)
    response = server.infer("add", [("a", "FP32", a), ("b", "FP32", b)], outputs=["diff"])
    header, arrays = parse_response(response.headers, response.content)
    assert [o["name"] for o in header["outputs"]] == ["diff"]
    assert np.array_equal(arrays["diff"], a - b)


def test_nested_json_data_is_read_row_major(server):
    a, b = add_inputs(4, seed=4)
    response = server.infer("add", [("a", "FP32", a), ("b", "FP32", b)], nested=True)
    arrays = response_arrays(response)
    assert np.array_equal(arrays["sum"], a + b) and np.array_equal(arrays["diff"], a - b)
    assert json.loads(response.content)["outputs"][0]["shape"] == [4, 4]


def test_json_inference_through_curl(server, tmp_path):
    a, b = add_inputs(2, seed=5)
    body, _ = build_request([("a", "FP32", a), ("b", "FP32", b)], request_id="curl-1")
    (tmp_path / "body.json").write_bytes(body)
    status, answer = curl("-X", "POST", "-H", "Content-Type: application/json", "-H", "Expect:",
                          "--data-binary", f"@{tmp_path / 'body.json'}", server.url + infer_path("add"))
    assert status == 200, answer
    header, arrays = parse_response({}, answer)
    assert header["id"] == "curl-1"
    assert np.array_equal(arrays["sum"], a + b) and np.array_equal(arrays["diff"], a - b)


def test_binary_inference_through_curl(server, tmp_path):
    """curl sends the binary extension's body and reads the Inference-Header-Content-Length header."""
    values = JSON_VALUES["INT64"].reshape(2, 3)
    body, headers = build_request([("x", "INT64", values)], outputs=["y"], binary_inputs=True, binary_outputs=True)
    (tmp_path / "body.bin").write_bytes(body)
    status, answer = curl("-X", "POST", "-H", "Expect:", "-D", tmp_path / "headers.txt",
                          *[arg for name, value in headers.items() for arg in ("-H", f"{name}: {value}")],
                          "--data-binary", f"@{tmp_path / 'body.bin'}", server.url + infer_path("identity_int64"))
    assert status == 200, answer
    response_headers = {line.split(":", 1)[0].strip().lower(): line.split(":", 1)[1].strip()
                        for line in (tmp_path / "headers.txt").read_text().splitlines() if ":" in line}
    header, arrays = parse_response(response_headers, answer)
    assert header["outputs"][0]["parameters"]["binary_data_size"] == 48
    assert arrays["y"].tolist() == values.tolist()


def test_a_client_keeps_its_connection_across_requests(server):
    """curl reuses its connection for several URLs: the server keeps it alive (cpp-httplib would close
    it after 5 requests by default). How fast reused connections answer belongs to bench/serve.py."""
    url = server.url + "/v2/models/identity_fp32"
    command = ["curl", "-sS", "--noproxy", "*", "--max-time", "20", "-w", "%{num_connects} %{http_code}\n"]
    for _ in range(8):
        command += ["-o", "/dev/null", url]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    transfers = [line.split() for line in result.stdout.splitlines()]
    assert transfers == [["1", "200"]] + [["0", "200"]] * 7


def test_a_generous_request_timeout_does_not_get_in_the_way(server):
    x = np.array([[1.0, 2.0, 3.0]], np.float32)
    response = server.infer("slow_queue", [("x", "FP32", x)], parameters={"timeout": 10_000_000})
    assert np.array_equal(response_arrays(response)["y"], x)


# --- errors ---------------------------------------------------------------------------------------

def add_request(a=None, b=None, **changes):
    """The JSON header of a valid `add` request on two rows, with CHANGES to input a."""
    a_default, b_default = add_inputs(2, seed=6)
    a = a_default if a is None else a
    b = b_default if b is None else b
    header = {"inputs": [{"name": "a", "shape": [2, 4], "datatype": "FP32", "data": a.reshape(-1).tolist()},
                         {"name": "b", "shape": [2, 4], "datatype": "FP32", "data": b.reshape(-1).tolist()}]}
    header["inputs"][0].update(changes)
    return header


def as_json(header):
    return json.dumps(header).encode(), {"Content-Type": "application/json"}


def binary_add(declared=32, sent=32, header_length_extra=0, header_length=None):
    """An `add` request with input a binary: DECLARED binary_data_size, SENT bytes after the JSON."""
    header = add_request(parameters={"binary_data_size": declared})
    del header["inputs"][0]["data"]
    text = json.dumps(header).encode()
    raw = np.arange(8, dtype=np.float32).tobytes() + b"\0" * 16
    length = str(len(text) + header_length_extra) if header_length is None else header_length
    return text + raw[:sent], {"Content-Type": "application/octet-stream", "Inference-Header-Content-Length": length}


def drop_b():
    header = add_request()
    del header["inputs"][1]
    return as_json(header)


def extra_input():
    header = add_request()
    header["inputs"].append(dict(header["inputs"][1], name="nonexistent_input"))
    return as_json(header)


def matmul_rows(rows):
    return as_json({"inputs": [{"name": "x", "shape": [rows, 16], "datatype": "FP32", "data": [0.5] * (rows * 16)}]})


ADD = infer_path("add")
ERROR_CASES = {
    # name: (method, path, body and headers (or None), status, text the message must contain)
    "malformed_json": ("POST", ADD, lambda: (b'{"inputs": [{"name": "a", ', {}), 400, None),
    "empty_body": ("POST", ADD, lambda: (b"", {}), 400, None),
    "trailing_garbage_after_json": ("POST", ADD, lambda: (as_json(add_request())[0] + b" trailing", {}), 400, None),
    "json_not_an_object": ("POST", ADD, lambda: (b"[1, 2, 3]", {}), 400, None),
    "no_inputs": ("POST", ADD, lambda: as_json({}), 400, None),
    "missing_input": ("POST", ADD, drop_b, 400, None),
    "unknown_input": ("POST", ADD, extra_input, 400, "nonexistent_input"),
    "wrong_datatype": ("POST", ADD, lambda: as_json(add_request(datatype="FP64")), 400, None),
    "wrong_width": ("POST", ADD, lambda: as_json(add_request(shape=[2, 5], data=[1.0] * 10)), 400, None),
    "wrong_rank": ("POST", ADD, lambda: as_json(add_request(shape=[8])), 400, None),
    "negative_dimension": ("POST", ADD, lambda: as_json(add_request(shape=[-1, 4], data=[1.0] * 4)), 400, None),
    "too_few_values": ("POST", ADD, lambda: as_json(add_request(data=[1.0] * 7)), 400, None),
    "too_many_values": ("POST", ADD, lambda: as_json(add_request(data=[1.0] * 9)), 400, None),
    "ragged_nested_data": ("POST", ADD, lambda: as_json(add_request(data=[[1.0] * 4, [1.0] * 3])), 400, None),
    "strings_for_floats": ("POST", ADD, lambda: as_json(add_request(data=["x"] * 8)), 400, None),
    "bytes_datatype": ("POST", ADD, lambda: as_json(add_request(datatype="BYTES", data=["x"] * 8)), 400, "not supported"),
    "batch_over_default_max": ("POST", ADD, lambda: as_json(add_request(shape=[5, 4], data=[1.0] * 20)), 400, None),
    "batch_over_config_max": ("POST", infer_path("matmul"), lambda: matmul_rows(9), 400, None),
    "binary_shorter_than_declared": ("POST", ADD, lambda: binary_add(sent=28), 400, None),
    "binary_longer_than_declared": ("POST", ADD, lambda: binary_add(sent=36), 400, None),
    "binary_size_not_the_shape": ("POST", ADD, lambda: binary_add(declared=28, sent=28), 400, None),
    "header_length_past_the_body": ("POST", ADD, lambda: binary_add(header_length_extra=1000), 400, None),
    "header_length_not_a_number": ("POST", ADD, lambda: binary_add(header_length="many"), 400, None),
    "unknown_model_infer": ("POST", infer_path("no_such_model"), lambda: as_json(add_request()), 404, None),
    "unknown_version_infer": ("POST", infer_path("add", 9), lambda: as_json(add_request()), 404, None),
    "version_zero_infer": ("POST", infer_path("add", 0), lambda: as_json(add_request()), 404, None),
    "unknown_model_metadata": ("GET", "/v2/models/no_such_model", None, 404, None),
    "unknown_version_metadata": ("GET", "/v2/models/add/versions/9", None, 404, None),
    "unknown_model_config": ("GET", "/v2/models/no_such_model/config", None, 404, None),
    "unknown_path": ("GET", "/v2/no/such/path", None, 404, None),
    "unknown_model_action": ("POST", "/v2/models/add/predict", lambda: as_json(add_request()), 404, None),
}


@pytest.mark.parametrize("case", ERROR_CASES)
def test_bad_requests_get_their_status_and_a_json_error(server, case):
    method, path, make_body, status, mentions = ERROR_CASES[case]
    if method == "GET":
        response = server.get(path)
    else:
        body, headers = make_body()
        response = server.post(path, body, headers)
    assert response.status_code == status, response.text[:500]
    message = error_message(response)
    if mentions:
        assert mentions in message, message
    assert_healthy(server)


def test_batch_sizes_up_to_the_maximum_are_accepted(server):
    x = RNG.uniform(-1, 1, (8, 16)).astype(np.float32)
    assert np.allclose(response_arrays(server.infer("matmul", [("x", "FP32", x)]))["y"], matmul_reference(x), **TOLERANCE)
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    assert np.array_equal(response_arrays(server.infer("identity_fp32", [("x", "FP32", x)]))["y"], x)


def test_a_request_whose_timeout_expires_in_the_queue_gets_504(server):
    """slow_queue holds a lone request for half a second: a 1 ms timeout expires first. The failure is
    counted as one."""
    labels = dict(model="slow_queue", version="1")
    before = server.metrics()
    response = server.infer("slow_queue", [("x", "FP32", np.ones((1, 3), np.float32))], parameters={"timeout": 1000})
    assert response.status_code == 504, response.text
    error_message(response)
    after = server.metrics()
    assert metric(after, "nv_inference_request_failure", **labels) - \
        (metric(before, "nv_inference_request_failure", **labels) or 0) == 1
    assert metric(after, "nv_inference_request_success", **labels) == metric(before, "nv_inference_request_success", **labels)
    assert_healthy(server)


def test_the_queue_policy_default_timeout_gives_504(server):
    response = server.infer("timeout_queue", [("x", "FP32", np.ones((1, 3), np.float32))])
    assert response.status_code == 504, response.text
    error_message(response)
    assert_healthy(server)


def test_a_full_queue_answers_503_and_the_queued_requests_still_succeed(server):
    """tiny_queue holds at most 2 requests, each waiting up to 2 s for a batch of 8: a third while
    those wait is refused with 503 and says the queue is full."""
    results = {}

    def send(index):
        x = np.full((1, 3), index, np.float32)
        session = new_session()
        body, headers = build_request([("x", "FP32", x)])
        try:
            results[index] = (x, session.post(server.url + infer_path("tiny_queue"), data=body, headers=headers,
                                              timeout=30))
        except requests.RequestException as error:
            results[index] = (x, error)
        finally:
            session.close()
    waiting = [threading.Thread(target=send, args=(index,)) for index in (1, 2)]
    for thread in waiting:
        thread.start()
    time.sleep(0.5)
    refused = [server.infer("tiny_queue", [("x", "FP32", np.zeros((1, 3), np.float32))]) for _ in range(3)]
    still_waiting = all(thread.is_alive() for thread in waiting)
    for thread in waiting:
        thread.join(timeout=30)
    assert still_waiting, "the queued requests were answered before the queue delay"
    for response in refused:
        assert response.status_code == 503, response.text
        assert "queue is full" in error_message(response).lower()
    assert sorted(results) == [1, 2]
    for x, response in results.values():
        assert isinstance(response, requests.Response), response
        assert np.array_equal(response_arrays(response)["y"], x)
    assert_healthy(server)


def test_a_client_that_hangs_up_does_not_hurt_the_server(server):
    """Clients close (or reset) their connections with requests waiting in slow_queue's queue, or
    half-sent: the server answers the next request in the same batch with its own rows, and later ones."""
    x_abandoned = np.full((1, 3), -7.0, np.float32)
    body, headers = build_request([("x", "FP32", x_abandoned)])
    request = http_request_bytes("POST", infer_path("slow_queue"), server.host, server.port, body,
                                 headers={"Content-Type": "application/json"})
    for index in range(6):
        connection = socket.create_connection((server.host, server.port), timeout=5)
        if index % 2:  # close with a reset instead of a FIN
            connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        connection.sendall(request)
        connection.close()
    for partial in (request[:len(request) - len(body) // 2], request[:20]):
        connection = socket.create_connection((server.host, server.port), timeout=5)
        connection.sendall(partial)
        connection.close()
    x = np.array([[3.0, 1.0, 4.0], [1.0, 5.0, 9.0]], np.float32)
    assert np.array_equal(response_arrays(server.infer("slow_queue", [("x", "FP32", x)]))["y"], x)
    time.sleep(SLOW_QUEUE_DELAY + 0.2)  # the abandoned requests' answers have been written (or dropped)
    assert np.array_equal(response_arrays(server.infer("slow_queue", [("x", "FP32", x)]))["y"], x)
    assert_healthy(server)


# --- batching and metrics ---------------------------------------------------------------------------

def run_concurrently(server, model, requests_per_thread, threads, make_input):
    """THREADS clients, started together, each sending REQUESTS_PER_THREAD requests to MODEL; returns
    [(input, response)]. make_input(thread, index) -> array."""
    barrier = threading.Barrier(threads)
    results = []
    errors = []
    lock = threading.Lock()

    def client(thread):
        session = new_session()
        try:
            barrier.wait(timeout=30)
            for index in range(requests_per_thread):
                x = make_input(thread, index)
                body, headers = build_request([("x", "FP32", x)])
                response = session.post(server.url + infer_path(model), data=body, headers=headers, timeout=30)
                with lock:
                    results.append((x, response))
        except Exception as error:  # reported below: a thread's exception would otherwise vanish
            errors.append(repr(error))
        finally:
            session.close()
    workers = [threading.Thread(target=client, args=(thread,)) for thread in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
    assert not any(worker.is_alive() for worker in workers), "clients still running after 120 s"
    assert not errors, errors[:5]
    assert len(results) == threads * requests_per_thread
    return results


def delta(before, after, name, **labels):
    return (metric(after, name, **labels) or 0) - (metric(before, name, **labels) or 0)


def test_concurrent_requests_are_merged_and_each_client_gets_its_own_rows(server):
    """8 clients at once, one row per request: the batcher merges them (fewer executions than
    requests), each answer is the client's own row, as it is when sent alone, and the metrics count
    every request once."""
    labels = dict(model="matmul", version="1")
    before = server.metrics()
    results = run_concurrently(server, "matmul", 6, 8,
                               lambda t, i: RNG.uniform(-1, 1, (1, 16)).astype(np.float32))
    after = server.metrics()
    assert len(results) == 48
    for x, response in results:
        assert np.allclose(response_arrays(response)["y"], matmul_reference(x), **TOLERANCE)
    for x, response in results[:12]:
        alone = response_arrays(server.infer("matmul", [("x", "FP32", x)]))["y"]
        assert np.allclose(response_arrays(response)["y"], alone, **TOLERANCE)
    assert delta(before, after, "nv_inference_request_success", **labels) == 48
    assert delta(before, after, "nv_inference_count", **labels) == 48
    executions = delta(before, after, "nv_inference_exec_count", **labels)
    assert 6 <= executions < 48, f"{executions} executions for 48 concurrent requests: nothing was merged"
    assert delta(before, after, "kiln_batch_size_count", **labels) == executions
    assert delta(before, after, "kiln_batch_size_sum", **labels) == 48


def test_multi_row_requests_are_merged_without_mixing_rows(server):
    """Requests of 1 to 3 rows merged: each client gets exactly its rows back, in order; nv_inference_count
    counts rows (Triton's inference count) while success counts requests; no batch exceeds
    max_batch_size; the threads in use stay within the budget while the load runs."""
    labels = dict(model="matmul", version="1")
    samples = []
    stop = threading.Event()

    def sample_threads():
        session = new_session()
        for _ in range(200):
            if stop.wait(0.02):
                break
            text = session.get(server.url + "/metrics", timeout=10).text
            parsed = parse_metrics(text)
            samples.append((metric(parsed, "kiln_threads_in_use"), metric(parsed, "kiln_thread_budget")))
        session.close()
    sampler = threading.Thread(target=sample_threads)
    before = server.metrics()
    sampler.start()
    try:
        results = run_concurrently(server, "matmul", 4, 8,
                                   lambda t, i: RNG.uniform(-1, 1, (1 + (t + i) % 3, 16)).astype(np.float32))
    finally:
        stop.set()
        sampler.join(timeout=30)
    after = server.metrics()
    rows = sum(x.shape[0] for x, _ in results)
    for x, response in results:
        y = response_arrays(response)["y"]
        assert y.shape == (x.shape[0], 8) and np.allclose(y, matmul_reference(x), **TOLERANCE)
    assert delta(before, after, "nv_inference_request_success", **labels) == 32
    assert delta(before, after, "nv_inference_count", **labels) == rows
    assert delta(before, after, "nv_inference_exec_count", **labels) <= rows
    buckets = sorted((float(dict(key[1])["le"]), value) for key, value in after.items()
                     if key[0] == "kiln_batch_size_bucket" and dict(key[1]).get("model") == "matmul")
    assert buckets and buckets[-1][0] == float("inf"), "kiln_batch_size has no +Inf bucket"
    assert [value for _, value in buckets] == sorted(value for _, value in buckets), buckets
    assert buckets[-1][1] == metric(after, "kiln_batch_size_count", **labels)
    at_most_8 = [value for le, value in buckets if 8 <= le]
    assert at_most_8[0] == buckets[-1][1], f"a batch above max_batch_size 8: {buckets}"
    assert samples, "no metrics sampled during the load"
    assert all(budget == 2 for _, budget in samples), samples
    assert all(used is not None and 0 <= used <= 2 for used, _ in samples), samples


def test_metrics_count_single_requests(server):
    """K single-row requests: success and inference count grow by K, executions by at most K, no
    failure; the durations grow, end to end at least as much as compute. A failed request is no success."""
    labels = dict(model="add", version="1")
    before = server.metrics()
    for seed in range(5):
        a, b = add_inputs(1, seed=seed)
        assert np.array_equal(response_arrays(server.infer("add", [("a", "FP32", a), ("b", "FP32", b)]))["sum"], a + b)
    after = server.metrics()
    assert delta(before, after, "nv_inference_request_success", **labels) == 5
    assert delta(before, after, "nv_inference_count", **labels) == 5
    assert 1 <= delta(before, after, "nv_inference_exec_count", **labels) <= 5
    assert delta(before, after, "nv_inference_request_failure", **labels) == 0
    end_to_end = delta(before, after, "nv_inference_request_duration_us", **labels)
    compute = delta(before, after, "nv_inference_compute_infer_duration_us", **labels)
    assert end_to_end > 0 and compute > 0 and end_to_end >= compute
    assert delta(before, after, "nv_inference_queue_duration_us", **labels) >= 0
    response = server.post(ADD, *as_json(add_request(data=[1.0] * 7)))
    assert response.status_code == 400
    assert delta(after, server.metrics(), "nv_inference_request_success", **labels) == 0


def test_metrics_on_their_own_port_through_curl(server):
    """--metrics-port 0 prints where the metrics went; they carry the per-model series and the
    kiln gauges (the budget is --thread-budget)."""
    match = server.wait_for_line(METRICS_ON, 10)
    assert match, server.stderr
    assert match["host"] == "127.0.0.1" and int(match["port"]) not in (0, server.port)
    status, body = curl(f"http://{match['host']}:{match['port']}/metrics")
    assert status == 200
    samples = parse_metrics(body.decode())
    for name in ("nv_inference_request_success", "nv_inference_request_failure", "nv_inference_count",
                 "nv_inference_exec_count", "nv_inference_request_duration_us", "nv_inference_queue_duration_us",
                 "nv_inference_compute_infer_duration_us"):
        assert metric(samples, name, model="add", version="1") is not None, name
    assert metric(samples, "kiln_thread_budget") == 2
    assert metric(samples, "kiln_threads_in_use") is not None
    assert metric(samples, "kiln_batch_size_count", model="matmul", version="1") is not None


# --- servers of their own -------------------------------------------------------------------------

def test_a_config_contradicting_its_model_fails_that_model_only(start_server, tmp_path):
    """Models whose config names an input the model lacks, another datatype or other dims, and a
    file that is no model, fail to load each with a line naming what was wrong; the good model
    serves, and the server reports itself not ready."""
    def config(name, input_name="x", datatype="TYPE_FP32", dims="3"):
        return (f'name: "{name}"\nmax_batch_size: 4\n'
                f'input [ {{ name: "{input_name}" data_type: {datatype} dims: [ {dims} ] }} ]\n'
                f'output [ {{ name: "y" data_type: TYPE_FP32 dims: [ 3 ] }} ]\n')
    write_model(tmp_path, "good", {1: identity_model("FP32")}, config("good"))
    write_model(tmp_path, "bad_input_name", {1: identity_model("FP32")}, config("bad_input_name", input_name="nope"))
    write_model(tmp_path, "bad_data_type", {1: identity_model("FP32")}, config("bad_data_type", datatype="TYPE_FP64"))
    write_model(tmp_path, "bad_dims", {1: identity_model("FP32")}, config("bad_dims", dims="4"))
    write_model(tmp_path, "not_a_model", {1: np.random.default_rng(0).bytes(2048)})
    server = start_server(tmp_path)
    failed = {m["name"]: m["reason"] for m in server.matching(MODEL_FAILED)}
    assert set(failed) == {"bad_input_name", "bad_data_type", "bad_dims", "not_a_model"}, server.stderr
    assert "nope" in failed["bad_input_name"]
    assert "data_type" in failed["bad_data_type"] and "dims" in failed["bad_dims"], failed
    assert [(m["name"], m["version"]) for m in server.matching(MODEL_READY)] == [("good", "1")]
    assert server.get("/v2/health/live").status_code == 200
    assert server.get("/v2/health/ready").status_code == 503
    assert server.get("/v2/models/good/ready").status_code == 200
    x = np.ones((2, 3), np.float32)
    assert np.array_equal(response_arrays(server.infer("good", [("x", "FP32", x)]))["y"], x)
    for name in failed:
        assert server.get(f"/v2/models/{name}/ready").status_code in (404, 503)
        response = server.infer(name, [("x", "FP32", x)])
        assert response.status_code in (400, 404, 503), response.text
        error_message(response)


def test_a_body_over_max_request_bytes_gets_413(start_server, tmp_path):
    """--max-request-bytes 4096: a body of exactly 4096 bytes is served, one byte more is refused
    with 413 and a JSON error, a binary body too; a declared length over the limit is refused without
    the server waiting for the body; the server stays healthy."""
    write_model(tmp_path, "identity_fp32", {1: identity_model("FP32")})
    server = start_server(tmp_path, "--max-request-bytes", 4096)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    body, headers = build_request([("x", "FP32", x)])
    at_limit = body[:-1] + b" " * (4096 - len(body)) + body[-1:]  # whitespace is still valid JSON
    assert len(at_limit) == 4096
    assert np.array_equal(response_arrays(server.post(infer_path("identity_fp32"), at_limit, headers))["y"], x)
    over = server.post(infer_path("identity_fp32"), at_limit[:-1] + b" }", headers)
    assert over.status_code == 413, over.text
    error_message(over)
    big = RNG.uniform(-1, 1, (4, 3)).astype(np.float32)
    text = b"{" + b" " * 5000 + json.dumps({"inputs": [{"name": "x", "shape": [4, 3], "datatype": "FP32",
                                                       "parameters": {"binary_data_size": 48}}]}).encode()[1:]
    over = server.post(infer_path("identity_fp32"), text + big.tobytes(),
                       {"Content-Type": "application/octet-stream", "Inference-Header-Content-Length": str(len(text))})
    assert over.status_code == 413, over.text
    error_message(over)
    status, _, answer = raw_http(server.host, server.port, http_request_bytes(
        "POST", infer_path("identity_fp32"), server.host, server.port, content_length=10**10,
        headers={"Content-Type": "application/json"}))
    assert status == 413, answer
    assert np.array_equal(response_arrays(server.infer("identity_fp32", [("x", "FP32", x)]))["y"], x)
    assert server.get("/v2/health/ready").status_code == 200


def test_request_timeout_ms_fails_requests_still_queued_with_504(start_server, tmp_path):
    """--request-timeout-ms 100: a request held 1 s in the queue fails with 504 (counted as a
    failure); one that runs at once, and a batch that fills before the timeout, succeed."""
    write_model(tmp_path, "held", {1: identity_model("FP32")}, queued_config("held", 1_000_000))
    write_model(tmp_path, "direct", {1: identity_model("FP32")})
    server = start_server(tmp_path, "--request-timeout-ms", 100)
    x = np.arange(3, dtype=np.float32).reshape(1, 3)
    started = time.monotonic()
    response = server.infer("held", [("x", "FP32", x)])
    assert response.status_code == 504, response.text
    error_message(response)
    assert time.monotonic() - started < 5
    assert metric(server.metrics(), "nv_inference_request_failure", model="held", version="1") == 1
    assert np.array_equal(response_arrays(server.infer("direct", [("x", "FP32", x)]))["y"], x)
    full = np.arange(24, dtype=np.float32).reshape(8, 3)  # a batch of 8 runs without waiting
    assert np.array_equal(response_arrays(server.infer("held", [("x", "FP32", full)]))["y"], full)
    assert server.get("/v2/health/ready").status_code == 200


def test_a_chunked_body_over_max_request_bytes_gets_413(start_server, tmp_path):
    """A body sent in chunks (no Content-Length) counts against --max-request-bytes too; a small one
    is served."""
    write_model(tmp_path, "identity_fp32", {1: identity_model("FP32")})
    server = start_server(tmp_path, "--max-request-bytes", 4096)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    body, headers = build_request([("x", "FP32", x)])

    def chunks(padding):  # requests sends a generator with Transfer-Encoding: chunked
        yield body[:-1]
        for _ in range(padding // 100):
            yield b" " * 100
        yield body[-1:]
    small = server.post(infer_path("identity_fp32"), chunks(0), headers)
    assert np.array_equal(response_arrays(small)["y"], x)
    try:
        over = server.post(infer_path("identity_fp32"), chunks(8000), headers)
    except requests.ConnectionError as error:
        raise AssertionError(f"connection dropped instead of a 413: {error}")
    assert over.status_code == 413, f"{over.status_code}: {over.text[:300]}"
    error_message(over)
    assert np.array_equal(response_arrays(server.infer("identity_fp32", [("x", "FP32", x)]))["y"], x)


def shutdown_repository(path, delay_us):
    write_model(path, "queued", {1: identity_model("FP32")}, queued_config("queued", delay_us))
    return path


def test_sigterm_under_load_answers_or_refuses_every_request_and_exits_0(start_server, tmp_path):
    """8 clients send requests in a loop (at most 200 in all, 20 s) to a model that batches with a
    queue delay; SIGTERM comes mid-way. Every request gets a 200 with its own rows, a 503, or a
    refused or reset connection, never a wrong answer or a hang; before the signal all succeed; the
    server exits 0 within --shutdown-timeout (5 s) and a little."""
    server = start_server(shutdown_repository(tmp_path, 20000), "--shutdown-timeout", 5)
    lock = threading.Lock()
    counts = {"sent": 0, "ok": 0}
    outcomes = []  # (kind, finished at, detail)
    deadline = time.monotonic() + 20
    terminated_at = []

    def client(thread):
        session = new_session()
        try:
            for index in range(200):
                with lock:
                    if counts["sent"] >= 200 or time.monotonic() > deadline:
                        return
                    counts["sent"] += 1
                x = np.array([[thread, index, thread * 1000 + index]], np.float32)
                body, headers = build_request([("x", "FP32", x)])
                try:
                    response = session.post(server.url + infer_path("queued"), data=body, headers=headers,
                                            timeout=(5, 20))
                except requests.Timeout as error:
                    kind, detail = "timeout", str(error)
                except (requests.ConnectionError, requests.exceptions.ChunkedEncodingError) as error:
                    refused = "NewConnectionError" in str(error) or "refused" in str(error).lower()
                    kind, detail = ("refused" if refused else "reset"), str(error)  # or cut mid-answer
                else:
                    if response.status_code == 200:
                        try:
                            right = np.array_equal(response_arrays(response)["y"], x)
                        except (AssertionError, ValueError, KeyError) as error:
                            right, detail = False, f"unreadable: {error}"
                        kind, detail = ("ok", "") if right else ("wrong", response.text[:300])
                    elif response.status_code == 503:
                        kind, detail = "503", response.text[:300]
                    else:
                        kind, detail = f"status {response.status_code}", response.text[:300]
                with lock:
                    outcomes.append((kind, time.monotonic(), detail))
                    counts["ok"] += kind == "ok"
                if kind in ("refused", "reset", "timeout"):
                    return  # the server is going away: this client stops
        finally:
            session.close()
    workers = [threading.Thread(target=client, args=(thread,)) for thread in range(8)]
    for worker in workers:
        worker.start()
    wait_until = time.monotonic() + 8
    while time.monotonic() < wait_until:
        with lock:
            if counts["ok"] >= 24:
                break
        time.sleep(0.01)
    terminated_at.append(time.monotonic())
    server.terminate()
    try:
        returncode = server.process.wait(timeout=5 + 10)
    except subprocess.TimeoutExpired:
        returncode = None
    exited_after = time.monotonic() - terminated_at[0]
    for worker in workers:
        worker.join(timeout=60)
    summary = {}
    for kind, _, _ in outcomes:
        summary[kind] = summary.get(kind, 0) + 1
    print(f"\nSIGTERM under load: {counts['sent']} sent, outcomes {summary}, exit {returncode} "
          f"{exited_after:.2f} s after the signal")
    assert not any(worker.is_alive() for worker in workers), "clients hung after the server exited"
    assert len(outcomes) == counts["sent"], summary
    assert returncode == 0, f"exit code {returncode}; stderr:\n{server.stderr}"
    assert exited_after <= 5 + 3, f"exited {exited_after:.1f} s after SIGTERM"
    bad = [(kind, detail) for kind, _, detail in outcomes if kind not in ("ok", "503", "refused", "reset")]
    assert not bad, f"{summary}: {bad[:5]}"
    early = [(kind, detail) for kind, finished, detail in outcomes if kind != "ok" and finished < terminated_at[0]]
    assert not early, f"failures before SIGTERM: {early[:5]}"
    assert sum(kind == "ok" and finished < terminated_at[0] for kind, finished, _ in outcomes) >= 24, summary


@pytest.mark.parametrize("arguments,expected", [
    (["--model-repository", "/nonexistent/kiln-models"], "--model-repository /nonexistent/kiln-models is not a directory"),
    ([], "kiln serve needs --model-repository DIR"),
    (["--model-repository", ".", "--http-port", "70000"], "--http-port"),
    (["--model-repository", ".", "--no-such-option"], "no-such-option"),
])
def test_bad_command_lines_fail_at_once_naming_the_option(kiln_bin, arguments, expected):
    result = subprocess.run([str(kiln_bin), "serve", *arguments], capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert expected in result.stderr, result.stderr
    assert result.stderr.count("\n") == 1, result.stderr  # one error line, nothing served


def test_sigterm_while_models_load_stops_loading_and_exits_0(kiln_bin, tmp_path, demo_model):
    """A signal during warm-up stops loading at the next batch size: the server does not start
    listening afterwards, and exits 0 long before it would have warmed every model up."""
    for index in range(6):
        (tmp_path / f"demo{index}" / "1").mkdir(parents=True)
        (tmp_path / f"demo{index}" / "1" / "model.onnx").write_bytes(demo_model.read_bytes())
        (tmp_path / f"demo{index}" / "config.pbtxt").write_text("max_batch_size: 256\n")
    process = subprocess.Popen([str(kiln_bin), "serve", "--model-repository", str(tmp_path), "--host", "127.0.0.1",
                                "--http-port", "0", "--threads", "1"], stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
    try:
        first = process.stderr.readline()
        assert "version 1 ready" in first, first
        started = time.monotonic()
        process.send_signal(signal.SIGTERM)
        _, rest = process.communicate(timeout=60)
        assert process.returncode == 0, first + rest
        assert time.monotonic() - started < 30
        assert "listening on" not in rest, rest
        assert "shutting down on SIGTERM" in rest and rest.rstrip().endswith("kiln serve: stopped"), rest
        # Loading stopped: the last models never became ready.
        assert (first + rest).count("version 1 ready") < 6, first + rest
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


@pytest.mark.parametrize("delay_s,shutdown_timeout", [(1, 10), (30, 1)], ids=["drains", "times_out"])
def test_sigterm_answers_the_requests_waiting_in_the_queue(start_server, tmp_path, delay_s, shutdown_timeout):
    """Three requests wait in the queue when SIGTERM comes: each is answered (its rows, or a 503)
    before the server exits 0, within --shutdown-timeout and a little, even when the queue delay is
    longer than that; a new request after the signal is not served."""
    server = start_server(shutdown_repository(tmp_path, int(delay_s * 1e6)), "--shutdown-timeout", shutdown_timeout)
    results = {}

    def send(index):
        x = np.full((1, 3), index, np.float32)
        session = new_session()
        body, headers = build_request([("x", "FP32", x)])
        try:
            results[index] = (x, session.post(server.url + infer_path("queued"), data=body, headers=headers,
                                              timeout=(5, shutdown_timeout + delay_s + 10)))
        except requests.RequestException as error:
            results[index] = (x, error)
        finally:
            session.close()
    waiting = [threading.Thread(target=send, args=(index,)) for index in range(3)]
    for thread in waiting:
        thread.start()
    time.sleep(0.5)
    signalled = time.monotonic()
    server.terminate()
    time.sleep(0.2)
    try:
        late = server.infer("queued", [("x", "FP32", np.ones((1, 3), np.float32))])
        assert late.status_code == 503, f"a request after SIGTERM got {late.status_code}: {late.text[:300]}"
    except (requests.ConnectionError, requests.exceptions.ChunkedEncodingError):
        pass  # refused: not accepting any more
    returncode = server.process.wait(timeout=shutdown_timeout + delay_s + 10)
    exited_after = time.monotonic() - signalled
    for thread in waiting:
        thread.join(timeout=30)
    assert returncode == 0, server.stderr
    assert exited_after <= shutdown_timeout + 3, f"exited {exited_after:.1f} s after SIGTERM"
    assert sorted(results) == [0, 1, 2]
    for x, response in results.values():
        assert isinstance(response, requests.Response), f"a queued request got no answer: {response}"
        if response.status_code != 503:
            assert np.array_equal(response_arrays(response)["y"], x)


# --- slow tier ------------------------------------------------------------------------------------

@pytest.mark.slow
def test_demo_model_batched_requests_match_each_alone(start_server, tmp_path, demo_model):
    """The demo CNN behind dynamic batching: 12 clients at once get, within 1e-5, what each input gets
    alone."""
    model = onnx.load(str(demo_model))
    (graph_input,), (graph_output,) = model.graph.input, model.graph.output
    input_dims = [d.dim_value for d in graph_input.type.tensor_type.shape.dim][1:]
    output_dims = [d.dim_value for d in graph_output.type.tensor_type.shape.dim][1:]
    config = (f'name: "demo"\nmax_batch_size: 8\n'
              f'input [ {{ name: "{graph_input.name}" data_type: TYPE_FP32 dims: {input_dims} }} ]\n'
              f'output [ {{ name: "{graph_output.name}" data_type: TYPE_FP32 dims: {output_dims} }} ]\n'
              'dynamic_batching { max_queue_delay_microseconds: 50000 preferred_batch_size: [ 4, 8 ] }\n')
    write_model(tmp_path, "demo", {1: model}, config)
    server = start_server(tmp_path)
    barrier = threading.Barrier(12)
    results = {}

    def client(index):
        x = np.random.default_rng(index).standard_normal([1, *input_dims]).astype(np.float32)
        body, headers = build_request([(graph_input.name, "FP32", x)], binary_inputs=True, outputs=[graph_output.name],
                                      binary_outputs=True)
        session = new_session()
        try:
            barrier.wait(timeout=30)
            results[index] = (x, session.post(server.url + infer_path("demo"), data=body, headers=headers, timeout=60))
        finally:
            session.close()
    workers = [threading.Thread(target=client, args=(index,)) for index in range(12)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
    assert sorted(results) == list(range(12))
    samples = server.metrics()
    assert metric(samples, "nv_inference_exec_count", model="demo") < 12
    for x, response in results.values():
        batched = response_arrays(response)[graph_output.name]
        alone = response_arrays(server.infer("demo", [(graph_input.name, "FP32", x)], binary_inputs=True,
                                             outputs=[graph_output.name], binary_outputs=True))[graph_output.name]
        assert np.allclose(batched, alone, **TOLERANCE)


@pytest.mark.slow
def test_many_hang_ups_and_errors_interleaved_with_good_requests(server):
    """Two hundred rounds of a dropped connection, a bad request and a good one, from 4 clients."""
    body, _ = build_request([("x", "FP32", np.ones((1, 3), np.float32))])
    dropped = http_request_bytes("POST", infer_path("slow_queue"), server.host, server.port, body)
    failures = []

    def client(thread):
        session = new_session()
        deadline = time.monotonic() + 60
        try:
            for index in range(50):
                if time.monotonic() > deadline:
                    break
                connection = socket.create_connection((server.host, server.port), timeout=5)
                connection.sendall(dropped)
                connection.close()
                bad = session.post(server.url + ADD, data=b'{"inputs": [', timeout=30)
                a, b = add_inputs(1 + index % 4, seed=thread * 1000 + index)
                good_body, headers = build_request([("a", "FP32", a), ("b", "FP32", b)])
                good = session.post(server.url + ADD, data=good_body, headers=headers, timeout=30)
                if bad.status_code != 400 or good.status_code != 200 or \
                        not np.array_equal(response_arrays(good)["sum"], a + b):
                    failures.append((thread, index, bad.status_code, good.status_code))
        except Exception as error:
            failures.append((thread, repr(error)))
        finally:
            session.close()
    workers = [threading.Thread(target=client, args=(thread,)) for thread in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
    assert not failures, failures[:5]
    assert_healthy(server)
