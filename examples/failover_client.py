#!/usr/bin/python3
"""Spreads Open Inference Protocol (KServe v2) requests over several `kiln serve` processes, and
retries a request on another server when one stops: what a Kubernetes Service in front of several
pods, plus a client that retries, do together.

    /usr/bin/python3 examples/failover_client.py --servers http://127.0.0.1:8000,http://127.0.0.1:8001 \\
        --model resnet50 [--input batch.npy] [--requests 100] [--concurrency 4] [--json]

Without --input, each request is one batch-1 tensor of zeros in the shape the model's metadata gives.
It prints how many requests each server answered, the retries, and the failures.

When to retry: a request goes to the next server when the connection is refused, breaks or times out,
when an answer is cut short, or when the answer is 503 (not ready, its queue is full, it is shutting down), 504 (it waited in the
queue too long) or 502 (a proxy in front found no server). Inference changes nothing on the server, so
running a request a second time is safe. Any other answer is final: a 400 names a bad request, which
every server would refuse. A server that failed is skipped for `cooldown` seconds, then tried again.
Each request makes at most `attempts` tries, none starting after `timeout` seconds.
"""
import argparse
import concurrent.futures
import http
import itertools
import json
import sys
import threading
import time

import numpy as np
import requests

DATATYPES = {np.dtype(np.float32): "FP32", np.dtype(np.float64): "FP64", np.dtype(np.int64): "INT64",
             np.dtype(np.int32): "INT32", np.dtype(np.uint8): "UINT8", np.dtype(np.int8): "INT8",
             np.dtype(np.bool_): "BOOL"}
NUMPY_TYPES = {datatype: dtype for dtype, datatype in DATATYPES.items()}
RETRIED_STATUSES = {http.HTTPStatus.BAD_GATEWAY, http.HTTPStatus.SERVICE_UNAVAILABLE, http.HTTPStatus.GATEWAY_TIMEOUT}
# What a server that stopped, or never answered, looks like from here (not a bad request: requests'
# InvalidJSONError and the like are the caller's to fix, and fail at once).
CONNECTION_FAILURES = (requests.ConnectionError, requests.Timeout, requests.exceptions.ChunkedEncodingError)


class NoServerAnswered(RuntimeError):
    """Every try of one request failed; the message lists what each server said."""


class FailoverClient:
    """Round-robin over `servers` (base URLs), retrying on another server as the module describes.
    Safe to use from several threads: each thread keeps its own connections."""

    def __init__(self, servers, timeout=30.0, attempts=None, cooldown=1.0, new_session=requests.Session):
        if not servers:
            raise ValueError("give at least one server URL")
        self.servers = [server.rstrip("/") for server in servers]
        self.timeout = timeout
        self.attempts = attempts or 2 * len(self.servers)
        self.cooldown = cooldown
        self._next = itertools.count()
        self._lock = threading.Lock()
        self._down_until = {server: 0.0 for server in self.servers}
        self._local = threading.local()
        self._new_session = new_session
        self.retries = 0

    def _session(self):
        if not hasattr(self._local, "session"):
            self._local.session = self._new_session()
        return self._local.session

    def _pick(self):
        """The next server in turn that is not cooling down; the one that recovers first if all are."""
        with self._lock:
            start = next(self._next)
            now = time.monotonic()
            for offset in range(len(self.servers)):
                server = self.servers[(start + offset) % len(self.servers)]
                if self._down_until[server] <= now:
                    return server, 0.0
            server = min(self.servers, key=self._down_until.get)
            return server, self._down_until[server] - now

    def _failed(self, server):
        with self._lock:
            self._down_until[server] = time.monotonic() + self.cooldown

    def post(self, path, body):
        """POSTs `body` (a dict, sent as JSON) to `path` on some server; returns (server, answer dict).
        Raises requests.HTTPError for a final error answer, NoServerAnswered when every try failed,
        ValueError for a body JSON cannot carry (NaN, infinities)."""
        data = json.dumps(body, allow_nan=False)
        deadline = time.monotonic() + self.timeout
        failures = []
        for attempt in range(self.attempts):
            server, wait = self._pick()
            left = deadline - time.monotonic()
            if wait >= left:
                break
            time.sleep(wait)
            left = deadline - time.monotonic()
            if attempt:
                with self._lock:
                    self.retries += 1
            try:
                answer = self._session().post(server + path, data=data, timeout=left,
                                              headers={"Content-Type": "application/json"})
            except CONNECTION_FAILURES as error:
                failures.append(f"{server}: {type(error).__name__}")
                self._failed(server)
                continue
            if answer.status_code in RETRIED_STATUSES:
                failures.append(f"{server}: {answer.status_code} {answer.text.strip()[:200]}")
                self._failed(server)
                continue
            answer.raise_for_status()
            try:
                return server, answer.json()
            except ValueError:
                # The server died while sending its answer: the headers came, the body did not
                # (urllib3 returns a body cut short without an error).
                failures.append(f"{server}: answer cut short ({len(answer.content)} bytes)")
                self._failed(server)
        raise NoServerAnswered(f"no server answered {path} within {self.attempts} tries and {self.timeout:g} s: "
                               + "; ".join(failures))

    def infer(self, model, inputs, version=None):
        """Runs `model` on {name: numpy array}; returns (server, {output name: numpy array})."""
        path = f"/v2/models/{model}" + (f"/versions/{version}" if version else "") + "/infer"
        body = {"inputs": [tensor_json(name, value) for name, value in inputs.items()]}
        server, answer = self.post(path, body)
        return server, {output["name"]: tensor_value(output) for output in answer["outputs"]}


def tensor_json(name, value):
    value = np.asarray(value)
    if value.dtype not in DATATYPES:
        raise TypeError(f"input {name!r} has dtype {value.dtype}; this example sends {', '.join(map(str, DATATYPES))}")
    return {"name": name, "shape": list(value.shape), "datatype": DATATYPES[value.dtype],
            "data": value.ravel().tolist()}


def tensor_value(output):
    if output["datatype"] not in NUMPY_TYPES:
        raise ValueError(f"output {output['name']!r} has datatype {output['datatype']}, which this example does not read")
    return np.asarray(output["data"], NUMPY_TYPES[output["datatype"]]).reshape(output["shape"])


def zeros_from_metadata(server, model):
    """{input: zeros of batch 1} from GET /v2/models/{model} (a -1 dim becomes 1)."""
    metadata = requests.get(f"{server}/v2/models/{model}", timeout=30)
    metadata.raise_for_status()
    return {tensor["name"]: np.zeros([1 if dim < 0 else dim for dim in tensor["shape"]], NUMPY_TYPES[tensor["datatype"]])
            for tensor in metadata.json()["inputs"]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--servers", required=True, help="comma-separated base URLs, e.g. http://127.0.0.1:8000")
    parser.add_argument("--model", required=True)
    parser.add_argument("--input", help=".npy file for the model's one input (default: zeros from its metadata)")
    parser.add_argument("--requests", type=int, default=100)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per request, all tries included")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    args = parser.parse_args()
    if args.requests < 1 or args.concurrency < 1:
        parser.error("--requests and --concurrency must be positive")

    client = FailoverClient(args.servers.split(","), timeout=args.timeout)
    if args.input:
        metadata = requests.get(f"{client.servers[0]}/v2/models/{args.model}", timeout=30)
        metadata.raise_for_status()
        inputs = {metadata.json()["inputs"][0]["name"]: np.load(args.input)}
    else:
        inputs = zeros_from_metadata(client.servers[0], args.model)

    answered = {server: 0 for server in client.servers}
    failures = []
    with concurrent.futures.ThreadPoolExecutor(args.concurrency) as pool:
        futures = [pool.submit(client.infer, args.model, inputs) for _ in range(args.requests)]
        for future in concurrent.futures.as_completed(futures):
            try:
                server, _ = future.result()
                answered[server] += 1
            except (NoServerAnswered, requests.HTTPError) as error:
                failures.append(str(error))
    summary = {"answered": answered, "retries": client.retries, "failed": len(failures), "failures": failures[:5]}
    if args.json:
        print(json.dumps(summary))
    else:
        for server, count in answered.items():
            print(f"{server}: {count} answered")
        print(f"retries: {client.retries}, failed: {len(failures)}")
        for failure in failures[:5]:
            print(f"  {failure}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
