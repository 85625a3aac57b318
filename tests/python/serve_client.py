"""A client for `kiln serve` in tests: starts a server and reads the port it printed, writes small
ONNX models into a Triton-layout model repository, builds KServe v2 requests (JSON and the binary
tensor extension) and reads their answers, and parses the Prometheus text of /metrics.

Everything talks to 127.0.0.1 only, and every wait is bounded in time."""
import json
import pathlib
import re
import signal
import socket
import subprocess
import threading
import time

import numpy as np
import onnx
import requests
from onnx import TensorProto, helper, numpy_helper

OPSET = 13
START_TIMEOUT = 60  # seconds for the server to print its listening line
HTTP_TIMEOUT = (5, 30)  # connect, read: no request in these tests should take longer

LISTENING = re.compile(r"^kiln serve: listening on http://(?P<host>[0-9.]+):(?P<port>\d+)/?(?: \(.*\))?\s*$")
GRPC_LISTENING = re.compile(r"^kiln serve: listening on grpc://(?P<host>[0-9.]+):(?P<port>\d+)\s*$")
METRICS_ON = re.compile(r"^kiln serve: metrics on http://(?P<host>[0-9.]+):(?P<port>\d+)/metrics\s*$")
MODEL_READY = re.compile(r"^kiln serve: model '(?P<name>[^']+)' version (?P<version>\d+) ready\b")
MODEL_FAILED = re.compile(r"^kiln serve: model '(?P<name>[^']+)' version (?P<version>\d+) failed to load: (?P<reason>.+)$")

# KServe datatype -> (numpy dtype of the values a test holds, ONNX element type). BF16 values are held
# as their raw uint16 bits (numpy has no bfloat16).
DATATYPES = {
    "BOOL": (np.bool_, TensorProto.BOOL),
    "UINT8": (np.uint8, TensorProto.UINT8),
    "UINT16": (np.uint16, TensorProto.UINT16),
    "UINT32": (np.uint32, TensorProto.UINT32),
    "UINT64": (np.uint64, TensorProto.UINT64),
    "INT8": (np.int8, TensorProto.INT8),
    "INT16": (np.int16, TensorProto.INT16),
    "INT32": (np.int32, TensorProto.INT32),
    "INT64": (np.int64, TensorProto.INT64),
    "FP16": (np.float16, TensorProto.FLOAT16),
    "FP32": (np.float32, TensorProto.FLOAT),
    "FP64": (np.float64, TensorProto.DOUBLE),
    "BF16": (np.uint16, TensorProto.BFLOAT16),
}
FLOATS = ("FP16", "FP32", "FP64", "BF16")

# Six values per integer datatype (a [2, 3] tensor) at the edges of each type: JSON and typed gRPC
# contents have to carry them through unchanged (a 64-bit integer through a double would not).
INTEGER_EDGE_VALUES = {
    "BOOL": np.array([True, False, True, True, False, False]),
    "UINT8": np.array([0, 255, 1, 128, 7, 254], np.uint8),
    "UINT16": np.array([0, 65535, 1, 32768, 7, 65534], np.uint16),
    "UINT32": np.array([0, 2**32 - 1, 1, 2**31, 7, 2**32 - 2], np.uint32),
    "UINT64": np.array([0, 2**64 - 1, 1, 2**63, 2**53 + 1, 2**64 - 2], np.uint64),
    "INT8": np.array([-128, 127, 0, -1, 1, 42], np.int8),
    "INT16": np.array([-32768, 32767, 0, -1, 1, 4242], np.int16),
    "INT32": np.array([-2**31, 2**31 - 1, 0, -1, 1, 424242], np.int32),
    "INT64": np.array([-2**63, 2**63 - 1, 0, -(2**53 + 1), 2**53 + 1, -1], np.int64),
}


# --- the server process ------------------------------------------------------------------------------

class Server:
    """`kiln serve --model-repository REPO --host 127.0.0.1 --http-port 0 OPTIONS...`, its stderr
    collected line by line on a thread (so the pipe never fills), started when it printed its
    listening line. Call kill() in a finalizer: it is safe to call twice and after the process ended."""

    def __init__(self, kiln_bin, repository, *options):
        self.command = [str(kiln_bin), "serve", "--model-repository", str(repository), "--host", "127.0.0.1",
                        "--http-port", "0", *map(str, options)]
        self.lines = []
        self.stdout_lines = []
        self._changed = threading.Condition()
        self.process = subprocess.Popen(self.command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True, errors="replace", bufsize=1)
        self._readers = [threading.Thread(target=self._read, args=(self.process.stderr, self.lines), daemon=True),
                         threading.Thread(target=self._read, args=(self.process.stdout, self.stdout_lines), daemon=True)]
        for reader in self._readers:
            reader.start()
        self.session = new_session()
        try:
            match = self.wait_for_line(LISTENING, START_TIMEOUT)
            assert match, (f"no listening line within {START_TIMEOUT} s (exit code {self.process.poll()}); "
                           f"stderr:\n{self.stderr}")
            self.host, self.port = match["host"], int(match["port"])
            self.url = f"http://{self.host}:{self.port}"
        except BaseException:
            self.kill()
            raise

    def _read(self, stream, lines):
        for line in stream:
            with self._changed:
                lines.append(line.rstrip("\n"))
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    @property
    def stderr(self):
        with self._changed:
            return "\n".join(self.lines)

    def wait_for_line(self, pattern, timeout):
        """The first stderr line matching `pattern` (a re.Match), waiting up to `timeout` seconds; None
        if none came (or the process ended without printing one)."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                for line in self.lines:
                    match = pattern.match(line)
                    if match:
                        return match
                left = deadline - time.monotonic()
                if left <= 0 or (self.process.poll() is not None and not self._readers[0].is_alive()):
                    return None
                self._changed.wait(min(left, 0.2))

    def matching(self, pattern):
        with self._changed:
            return [match for match in map(pattern.match, self.lines) if match]

    def grpc_target(self):
        """HOST:PORT of the gRPC listener (started with --grpc-port)."""
        match = self.wait_for_line(GRPC_LISTENING, START_TIMEOUT)
        assert match, f"no gRPC listening line; stderr:\n{self.stderr}"
        return f"{match['host']}:{match['port']}"

    def rss_bytes(self):
        """The server process's resident memory."""
        for line in pathlib.Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise AssertionError("no VmRSS line")

    def get(self, path, **kwargs):
        return self.session.get(self.url + path, timeout=HTTP_TIMEOUT, **kwargs)

    def post(self, path, data, headers=None, **kwargs):
        return self.session.post(self.url + path, data=data, headers=headers, timeout=HTTP_TIMEOUT, **kwargs)

    def infer(self, model, inputs, version=None, **request_options):
        """POSTs an inference request (see build_request) to MODEL; returns the requests.Response."""
        body, headers = build_request(inputs, **request_options)
        return self.post(infer_path(model, version), body, headers)

    def metrics(self, url=None):
        response = self.session.get((url or self.url) + "/metrics", timeout=HTTP_TIMEOUT)
        assert response.status_code == 200, response.text
        return parse_metrics(response.text)

    def terminate(self):
        self.process.send_signal(signal.SIGTERM)

    def kill(self):
        if self.process.poll() is None:
            self.process.kill()
        try:
            self.process.wait(timeout=30)
        finally:
            for reader in self._readers:
                reader.join(timeout=5)
            self.session.close()


def new_session():
    """A requests session that never goes through a proxy from the environment."""
    session = requests.Session()
    session.trust_env = False
    return session


def infer_path(model, version=None):
    return f"/v2/models/{model}" + (f"/versions/{version}" if version is not None else "") + "/infer"


# --- model repository ---------------------------------------------------------------------------------

def make_model(nodes, inputs, outputs, initializers=()):
    """An opset-13 model of NODES; inputs and outputs are (name, ONNX element type, shape)."""
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(*spec) for spec in inputs],
                              [helper.make_tensor_value_info(*spec) for spec in outputs], list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    onnx.checker.check_model(model)
    return model


def identity_model(datatype, shape=("batch", 3)):
    """y = Identity(x) of one KServe datatype."""
    element = DATATYPES[datatype][1]
    return make_model([helper.make_node("Identity", ["x"], ["y"])], [("x", element, list(shape))],
                      [("y", element, list(shape))])


def add_model(width=4):
    """sum = a + b and diff = a - b on float32 [batch, width]."""
    shape = ["batch", width]
    return make_model([helper.make_node("Add", ["a", "b"], ["sum"]), helper.make_node("Sub", ["a", "b"], ["diff"])],
                      [("a", TensorProto.FLOAT, shape), ("b", TensorProto.FLOAT, shape)],
                      [("sum", TensorProto.FLOAT, shape), ("diff", TensorProto.FLOAT, shape)])


def plus_constant_model(constant, width=3):
    """y = x + CONSTANT on float32 [batch, width]: versions of one model that answer differently."""
    shape = ["batch", width]
    return make_model([helper.make_node("Add", ["x", "c"], ["y"])], [("x", TensorProto.FLOAT, shape)],
                      [("y", TensorProto.FLOAT, shape)],
                      [numpy_helper.from_array(np.array([constant], np.float32), "c")])


def matmul_model(weights):
    """y = x @ WEIGHTS on float32 [batch, K] x [K, N]."""
    k, n = weights.shape
    return make_model([helper.make_node("MatMul", ["x", "w"], ["y"])], [("x", TensorProto.FLOAT, ["batch", k])],
                      [("y", TensorProto.FLOAT, ["batch", n])],
                      [numpy_helper.from_array(weights.astype(np.float32), "w")])


def write_model(repository, name, models, config=None):
    """REPOSITORY/NAME/<version>/model.onnx for each {version: model (or bytes)} and, when given,
    REPOSITORY/NAME/config.pbtxt."""
    folder = pathlib.Path(repository) / name
    for version, model in models.items():
        (folder / str(version)).mkdir(parents=True, exist_ok=True)
        path = folder / str(version) / "model.onnx"
        if isinstance(model, bytes):
            path.write_bytes(model)
        else:
            onnx.save(model, str(path))
    if config is not None:
        (folder / "config.pbtxt").write_text(config)
    return folder


# --- values -------------------------------------------------------------------------------------------

def bf16_bits_to_float32(bits):
    return (np.asarray(bits, np.uint16).astype(np.uint32) << 16).view(np.float32)


def float32_to_bf16_bits(values):
    """The bfloat16 bits of float32 VALUES, which must be exactly representable."""
    words = np.asarray(values, np.float32).view(np.uint32)
    assert not np.any(words & 0xFFFF), f"{values} are not exact bfloat16 values"
    return (words >> 16).astype(np.uint16)


def to_json_data(datatype, array):
    """ARRAY as the flat list of JSON values KServe v2 takes for DATATYPE (BF16: numbers)."""
    flat = np.asarray(array).reshape(-1)
    if datatype == "BOOL":
        return [bool(value) for value in flat]
    if datatype == "BF16":
        return [float(value) for value in bf16_bits_to_float32(flat)]
    if datatype in FLOATS:
        return [float(value) for value in flat]
    return [int(value) for value in flat]


def from_json_data(datatype, data, shape):
    """The array a response's flat JSON DATA stands for, checking each value has DATATYPE's JSON type
    (booleans for BOOL, integers for integer types: a big INT64 printed as a double is caught here)."""
    assert isinstance(data, list) and all(not isinstance(value, (list, dict)) for value in data), \
        f"response data should be a flat list: {str(data)[:200]}"
    if datatype == "BOOL":
        assert all(isinstance(value, bool) for value in data), f"BOOL data should be true/false: {data[:10]}"
    elif datatype in FLOATS:
        assert all(isinstance(value, (int, float)) and not isinstance(value, bool) for value in data), data[:10]
    else:
        assert all(isinstance(value, int) and not isinstance(value, bool) for value in data), \
            f"{datatype} data should be JSON integers: {data[:10]}"
    if datatype == "BF16":
        array = float32_to_bf16_bits(np.array(data, np.float32))
    else:
        array = np.array(data, dtype=DATATYPES[datatype][0])
    return array.reshape(shape)


def to_bytes(datatype, array):
    """ARRAY's raw little-endian bytes (BOOL one byte per element, BF16/FP16 their 2-byte bits)."""
    dtype = np.dtype(DATATYPES[datatype][0])
    if datatype == "BOOL":
        return np.asarray(array, np.bool_).astype(np.uint8).tobytes()
    return np.ascontiguousarray(np.asarray(array, dtype), dtype.newbyteorder("<")).tobytes()


def from_bytes(datatype, raw, shape):
    dtype = np.dtype(DATATYPES[datatype][0])
    if datatype == "BOOL":
        values = np.frombuffer(raw, np.uint8)
        assert set(values.tolist()) <= {0, 1}, f"BOOL bytes should be 0 or 1: {values[:16]}"
        return values.astype(np.bool_).reshape(shape)
    return np.frombuffer(raw, dtype.newbyteorder("<")).astype(dtype).reshape(shape)


# --- requests and responses ---------------------------------------------------------------------------

def build_request(inputs, outputs=None, binary_inputs=False, binary_outputs=None, request_id=None, parameters=None,
                  nested=False):
    """(body, headers) of a KServe v2 inference request.

    INPUTS: [(name, datatype, array)]; their shapes are the arrays'. BINARY_INPUTS: True (all), False,
    or a set of input names sent as raw bytes after the JSON header. OUTPUTS: None (all) or a list of
    names. BINARY_OUTPUTS: None (say nothing), True/False (binary_data on every requested output), or a
    set of output names. NESTED: JSON data nested row-major instead of flat."""
    binary_names = {name for name, _, _ in inputs} if binary_inputs is True else set(binary_inputs or ())
    header = {"inputs": []}
    raw = []
    for name, datatype, array in inputs:
        array = np.asarray(array)
        entry = {"name": name, "shape": list(array.shape), "datatype": datatype}
        if name in binary_names:
            data = to_bytes(datatype, array)
            entry["parameters"] = {"binary_data_size": len(data)}
            raw.append(data)
        else:
            flat = to_json_data(datatype, array)
            entry["data"] = np.array(flat, dtype=object).reshape(array.shape).tolist() if nested else flat
        header["inputs"].append(entry)
    if outputs is not None:
        header["outputs"] = []
        for name in outputs:
            entry = {"name": name}
            if binary_outputs is not None:
                wanted = binary_outputs if isinstance(binary_outputs, bool) else name in binary_outputs
                entry["parameters"] = {"binary_data": wanted}
            header["outputs"].append(entry)
    if request_id is not None:
        header["id"] = request_id
    if parameters:
        header["parameters"] = dict(parameters)
    text = json.dumps(header).encode()
    if not raw:
        return text, {"Content-Type": "application/json"}
    return text + b"".join(raw), {"Content-Type": "application/octet-stream",
                                  "Inference-Header-Content-Length": str(len(text))}


def parse_response(headers, body):
    """(JSON header, {output name: array}) of a 200 inference response, its binary outputs cut from
    the body after the JSON in the order the outputs are listed. HEADERS: any mapping whose lookup is
    case-insensitive (requests' headers) or a dict with lower-case keys."""
    length = headers.get("Inference-Header-Content-Length", headers.get("inference-header-content-length"))
    if length is None:
        header, rest = json.loads(body), b""
    else:
        length = int(length)
        assert 0 < length <= len(body), f"Inference-Header-Content-Length {length} with a {len(body)}-byte body"
        header, rest = json.loads(body[:length]), body[length:]
    arrays = {}
    offset = 0
    for output in header["outputs"]:
        name, datatype, shape = output["name"], output["datatype"], output["shape"]
        size = (output.get("parameters") or {}).get("binary_data_size")
        if size is not None:
            assert "data" not in output, f"binary output {name} also has JSON data"
            assert length is not None, "binary output without an Inference-Header-Content-Length header"
            assert offset + size <= len(rest), f"output {name} runs past the end of the body"
            arrays[name] = from_bytes(datatype, rest[offset:offset + size], shape)
            offset += size
        else:
            arrays[name] = from_json_data(datatype, output["data"], shape)
    assert offset == len(rest), f"{len(rest) - offset} bytes after the binary outputs"
    return header, arrays


def response_arrays(response):
    """{output name: array} of a requests.Response that must be a 200."""
    assert response.status_code == 200, f"{response.status_code}: {response.text[:500]}"
    return parse_response(response.headers, response.content)[1]


def error_message(response):
    """The "error" string of an error response, which must be a JSON object {"error": "..."}."""
    try:
        body = json.loads(response.content)
    except ValueError:
        raise AssertionError(f"{response.status_code} error body is not JSON: {response.content[:300]!r}")
    assert isinstance(body, dict) and isinstance(body.get("error"), str) and body["error"], body
    return body["error"]


# --- metrics ------------------------------------------------------------------------------------------

SAMPLE = re.compile(r"^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)(?:\s+\d+)?$")
LABEL = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"\s*,?')


def parse_metrics(text):
    """Prometheus text -> {(name, ((label, value), ...)): float}; fails on a line it cannot read."""
    samples = {}
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        match = SAMPLE.match(line)
        assert match, f"not a Prometheus sample line: {line!r}"
        labels = tuple(sorted(LABEL.findall(match["labels"] or "")))
        key = (match["name"], labels)
        assert key not in samples, f"sample given twice: {line!r}"
        samples[key] = float(match["value"])
    return samples


def metric(samples, name, **labels):
    """The sum of NAME's samples whose labels include LABELS (None if there is none)."""
    wanted = {(key, str(value)) for key, value in labels.items()}
    values = [value for (sample, sample_labels), value in samples.items()
              if sample == name and wanted <= set(sample_labels)]
    return sum(values) if values else None


# --- raw sockets --------------------------------------------------------------------------------------

def raw_http(host, port, request_bytes, timeout=10):
    """Sends REQUEST_BYTES on a new connection and reads one response with a Content-Length (or to
    the connection's end); returns (status, {lower-case header: value}, body)."""
    with socket.create_connection((host, port), timeout=timeout) as connection:
        connection.sendall(request_bytes)
        data = b""
        deadline = time.monotonic() + timeout
        while b"\r\n\r\n" not in data and time.monotonic() < deadline:
            chunk = connection.recv(65536)
            if not chunk:
                break
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        assert lines and lines[0].startswith("HTTP/1."), f"not an HTTP response: {data[:200]!r}"
        status = int(lines[0].split()[1])
        headers = {line.split(":", 1)[0].strip().lower(): line.split(":", 1)[1].strip() for line in lines[1:] if ":" in line}
        length = int(headers["content-length"]) if "content-length" in headers else None
        while (length is None or len(body) < length) and time.monotonic() < deadline:
            try:
                chunk = connection.recv(65536)
            except (ConnectionResetError, socket.timeout):
                break
            if not chunk:
                break
            body += chunk
        return status, headers, body


def http_request_bytes(method, path, host, port, body=b"", headers=None, content_length=None):
    """The bytes of an HTTP/1.1 request (CONTENT_LENGTH may lie about BODY)."""
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}:{port}",
             f"Content-Length: {len(body) if content_length is None else content_length}"]
    lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body
