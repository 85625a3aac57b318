"""Serving beyond one process: three `kiln serve` processes on 127.0.0.1 behind the example client
examples/failover_client.py (round-robin, retrying on another server), one of them killed mid-run:
every request answered, with its own values; and the deployment files under deploy/ checked against
what can be checked here (kiln serve's options, its probe endpoints, Debian's packages and the
binary's libraries). The container and Kubernetes parts themselves are not run: these machines have
no container runtime or cluster.

Every request loop is bounded in count and time."""
import concurrent.futures
import pathlib
import re
import shlex
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import requests
import yaml

from serve_client import Server, add_model, new_session, write_model

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "examples"))
import failover_client  # noqa: E402

REQUESTS = 300
KILL_AFTER = 100  # answered requests before one server is killed
AROUND_THE_KILL = 12  # requests after those that may run while it dies; the rest wait for the kill
WIDTH = 4


@pytest.fixture(scope="module")
def repository(tmp_path_factory):
    repository = tmp_path_factory.mktemp("failover_repository")
    write_model(repository, "add", {1: add_model(WIDTH)})
    return repository


def test_requests_spread_over_servers_and_survive_one_killed(kiln_bin, repository):
    servers = [Server(kiln_bin, repository, "--threads", "1") for _ in range(3)]
    try:
        client = failover_client.FailoverClient([server.url for server in servers], timeout=30, cooldown=0.5,
                                                new_session=new_session)
        answered_by = [None] * REQUESTS
        answered = threading.Semaphore(0)
        killed = threading.Event()

        def request(index):
            if index >= KILL_AFTER + AROUND_THE_KILL:
                assert killed.wait(timeout=60), "the server was never killed"
            a = np.arange(index * WIDTH, (index + 1) * WIDTH, dtype=np.float32)[None, :]
            b = np.full((1, WIDTH), 0.5, np.float32)
            server, outputs = client.infer("add", {"a": a, "b": b})
            # Each request's own answer: the values identify it.
            np.testing.assert_array_equal(outputs["sum"], a + b)
            np.testing.assert_array_equal(outputs["diff"], a - b)
            answered_by[index] = server
            answered.release()

        with concurrent.futures.ThreadPoolExecutor(6) as pool:
            futures = [pool.submit(request, index) for index in range(REQUESTS)]
            deadline = time.monotonic() + 60
            for _ in range(KILL_AFTER):
                assert answered.acquire(timeout=max(deadline - time.monotonic(), 0.01)), "requests stopped being answered"
            victim = servers[1]
            victim.process.kill()  # SIGKILL: no goodbye, connections just break
            victim.process.wait(timeout=30)
            killed.set()
            for future in futures:
                future.result(timeout=60)  # re-raises a request that failed or answered wrongly

        assert None not in answered_by
        counts = {server.url: answered_by.count(server.url) for server in servers}
        assert sum(counts.values()) == REQUESTS
        assert all(count > 0 for count in counts.values()), counts
        # The survivors took the rest; the victim's share stopped when it died.
        assert counts[victim.url] < REQUESTS / 3, counts
        assert client.retries >= 1
    finally:
        for server in servers:
            server.kill()


def test_the_client_gives_up_with_every_servers_reason(kiln_bin, repository):
    server = Server(kiln_bin, repository)
    url = server.url
    server.kill()
    client = failover_client.FailoverClient([url, url], timeout=5, attempts=3, cooldown=0.1, new_session=new_session)
    with pytest.raises(failover_client.NoServerAnswered, match=r"no server answered .* within 3 tries.*ConnectionError"):
        client.infer("add", {"a": np.zeros((1, WIDTH), np.float32), "b": np.zeros((1, WIDTH), np.float32)})


def test_the_client_does_not_retry_a_bad_request(kiln_bin, repository):
    servers = [Server(kiln_bin, repository) for _ in range(2)]
    try:
        client = failover_client.FailoverClient([server.url for server in servers], new_session=new_session)
        with pytest.raises(requests.HTTPError) as refused:
            client.infer("add", {"a": np.zeros((1, WIDTH + 1), np.float32), "b": np.zeros((1, WIDTH), np.float32)})
        assert refused.value.response.status_code == 400
        assert client.retries == 0
        with pytest.raises(ValueError, match=r"Out of range float values are not JSON compliant"):
            client.infer("add", {"a": np.full((1, WIDTH), np.nan, np.float32), "b": np.zeros((1, WIDTH), np.float32)})
    finally:
        for server in servers:
            server.kill()


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_probes_while_models_load_live_but_not_ready(kiln_bin, tmp_path, demo_model):
    """What KServe's probes see during a slow start: live (no restart) but not ready (no traffic)
    while models warm up, then ready. The port is fixed, as in a pod: port 0 is named only once
    loading is done."""
    for index in range(4):
        write_model(tmp_path, f"demo{index}", {1: demo_model.read_bytes()}, config="max_batch_size: 256\n")
    port = free_port()
    process = subprocess.Popen([str(kiln_bin), "serve", "--model-repository", str(tmp_path), "--host", "127.0.0.1",
                                "--http-port", str(port), "--threads", "1"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    session = new_session()
    url = f"http://127.0.0.1:{port}"
    try:
        seen = set()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and process.poll() is None:
            try:
                live = session.get(url + "/v2/health/live", timeout=5).status_code
                ready = session.get(url + "/v2/health/ready", timeout=5)
            except requests.RequestException:
                time.sleep(0.02)  # not listening yet, or too busy loading to answer in time
                continue
            seen.add((live, ready.status_code))
            if ready.status_code == 200:
                break
            time.sleep(0.02)
        assert (200, 503) in seen, f"never seen live and not ready while loading: {seen}"
        assert (200, 200) in seen, f"never ready: {seen}"
        assert not any(live != 200 for live, _ in seen), seen
    finally:
        process.terminate()
        assert process.wait(timeout=60) == 0


# --- deploy/ --------------------------------------------------------------------------------------------

def serve_options(kiln_bin):
    text = subprocess.run([str(kiln_bin), "serve", "--help"], capture_output=True, text=True, check=True).stdout
    return set(re.findall(r"^\s+(--[a-z-]+)", text, re.MULTILINE))


def manifest_container():
    runtime = yaml.safe_load((REPO / "deploy" / "kubernetes" / "servingruntime.yaml").read_text())
    assert runtime["kind"] == "ServingRuntime"
    (container,) = runtime["spec"]["containers"]
    return runtime, container


def test_serving_runtime_runs_kiln_serve_with_options_it_has(kiln_bin, repository):
    runtime, container = manifest_container()
    assert {"v2", "grpc-v2"} <= set(runtime["spec"]["protocolVersions"])
    assert [model_format["name"] for model_format in runtime["spec"]["supportedModelFormats"]] == ["onnx"]
    args = container["args"]
    assert args[0] == "serve"
    options = dict(zip(args[1::2], args[2::2]))
    assert set(options) <= serve_options(kiln_bin), set(options) - serve_options(kiln_bin)
    assert options["--model-repository"] == "/mnt/models"  # where KServe's storage initializer writes
    port = int(options["--http-port"])
    assert [p["containerPort"] for p in container["ports"]] == [port]
    probes = {kind: container[kind]["httpGet"] for kind in ("livenessProbe", "readinessProbe")}
    assert {probe["port"] for probe in probes.values()} == {port}

    # The same options on this machine (loopback, any free ports): the probes and the metrics path answer.
    local = {**options, "--model-repository": None, "--http-port": None, "--grpc-port": "0"}
    server = Server(kiln_bin, repository, *[word for option, value in local.items() if value is not None
                                            for word in (option, value)])
    try:
        for probe in probes.values():
            assert server.get(probe["path"]).status_code == 200, probe
        assert server.get(runtime["spec"]["annotations"]["prometheus.kserve.io/path"]).status_code == 200
    finally:
        server.kill()


def test_inference_service_uses_the_runtime():
    runtime, _ = manifest_container()
    service = yaml.safe_load((REPO / "deploy" / "kubernetes" / "inferenceservice.yaml").read_text())
    assert service["kind"] == "InferenceService"
    model = service["spec"]["predictor"]["model"]
    assert model["runtime"] == runtime["metadata"]["name"]
    assert model["modelFormat"]["name"] == "onnx"
    assert model["protocolVersion"] in runtime["spec"]["protocolVersions"]


def dockerfile_stages():
    """[(stage's FROM image, [packages its apt-get install lines name])], and the ENTRYPOINT + CMD words."""
    text = (REPO / "deploy" / "Dockerfile").read_text().replace("\\\n", " ")
    stages, command = [], []
    for line in text.splitlines():
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        if words[0] == "FROM":
            stages.append((words[1], []))
        elif words[0] == "RUN" and "install" in words and "apt-get" in words:
            install = shlex.split(line.split("apt-get install", 1)[1].split("&&")[0])
            stages[-1][1].extend(word for word in install if not word.startswith("-"))
        elif words[0] in ("ENTRYPOINT", "CMD"):
            command += yaml.safe_load(line.split(None, 1)[1])
    return stages, command


def packages_of_needed_libraries(binary):
    """{library: Debian package} for each shared library `binary` names as NEEDED, found where the
    dynamic loader finds it (ldd) and looked up with dpkg under both its /lib and /usr/lib spelling."""
    needed = re.findall(r"NEEDED\s+(\S+)", subprocess.run(["objdump", "-p", str(binary)], capture_output=True,
                                                          text=True, check=True).stdout)
    listing = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, check=True).stdout
    resolved = dict(re.findall(r"^\s*(\S+) => (/\S+)", listing, re.MULTILINE))
    # The dynamic loader has a line of its own: "/lib64/ld-linux-x86-64.so.2 (0x...)".
    resolved.update((pathlib.Path(path).name, path) for path in re.findall(r"^\s*(/\S+) \(", listing, re.MULTILINE))
    packages = {}
    for library in needed:
        assert library in resolved, f"ldd does not resolve {library}"
        real = str(pathlib.Path(resolved[library]).resolve())
        spellings = {resolved[library], real, *(path.replace("/usr/lib/", "/lib/", 1) for path in (resolved[library], real)),
                     *("/usr" + path for path in (resolved[library], real) if path.startswith("/lib/"))}
        owners = subprocess.run(["dpkg", "-S", *sorted(spellings)], capture_output=True, text=True).stdout
        found = sorted({line.split(":", 1)[0] for line in owners.splitlines() if ": " in line})
        assert found, f"no Debian package ships {library} ({resolved[library]})"
        packages[library] = found[0]
    return packages


def skip_a_sanitizer_build(kiln_bin):
    """The container builds a Release kiln; a sanitizer build links more (libasan, and libraries its
    link keeps that a Release link drops), so its libraries say nothing about the container's."""
    needed = subprocess.run(["objdump", "-p", str(kiln_bin)], capture_output=True, text=True, check=True).stdout
    if re.search(r"NEEDED\s+lib[at]san", needed):
        pytest.skip("a sanitizer build of kiln: the Release build's tier checks the container's libraries")


def test_dockerfile_packages_build_and_run_kiln(kiln_bin):
    skip_a_sanitizer_build(kiln_bin)
    (build_image, build_packages), (runtime_image, runtime_packages) = dockerfile_stages()[0]
    assert build_image.startswith("debian:12") and runtime_image.startswith("debian:12")
    # The build stage's packages are among the ones the project's build installs.
    listed = set(re.sub(r"#.*", "", (REPO / "scripts" / "debian_packages.txt").read_text()).split())
    assert set(build_packages) <= listed, set(build_packages) - listed
    # Every package is Debian's (the apt lists on this Debian 12 machine know it).
    known = subprocess.run(["apt-cache", "show", *build_packages, *runtime_packages], capture_output=True, text=True)
    assert known.returncode == 0, known.stderr
    # The runtime stage installs the package of every library the binary links, beyond Debian's base.
    base = {"libc6", "libgcc-s1", "libstdc++6"}
    missing = {library: package for library, package in packages_of_needed_libraries(kiln_bin).items()
               if package not in base | set(runtime_packages)}
    assert not missing, missing
    # It runs kiln serve with options kiln serve has.
    _, command = dockerfile_stages()
    assert command[:2] == ["/opt/kiln/bin/kiln", "serve"]
    assert {word for word in command[2:] if word.startswith("--")} <= serve_options(kiln_bin)


@pytest.mark.slow
def test_the_dockerfile_build_commands_install_a_kiln_that_serves(kiln_bin, repository, tmp_path):
    """The build stage's cmake commands, run here without a container (into temporary folders instead
    of /tmp/kiln-build and /opt/kiln): they install the kiln binary alone, and it serves."""
    skip_a_sanitizer_build(kiln_bin)  # once per slow tier: with the Release build's tests
    text = (REPO / "deploy" / "Dockerfile").read_text().replace("\\\n", " ")
    (run,) = [line for line in text.splitlines() if line.startswith("RUN cmake ")]
    build, prefix = tmp_path / "build", tmp_path / "prefix"
    for command in run[len("RUN "):].split("&&"):
        words = [str(build) if word == "/tmp/kiln-build" else word.replace("/opt/kiln", str(prefix))
                 for word in shlex.split(command)]
        subprocess.run(words, cwd=REPO, check=True, timeout=3600, stdout=subprocess.DEVNULL)
    installed = sorted(str(path.relative_to(prefix)) for path in prefix.rglob("*") if path.is_file())
    assert installed == ["bin/kiln"], installed
    version = subprocess.run([str(prefix / "bin" / "kiln"), "--version"], capture_output=True, text=True, check=True)
    assert version.stdout == subprocess.run([str(kiln_bin), "--version"], capture_output=True, text=True).stdout
    server = Server(prefix / "bin" / "kiln", repository)
    try:
        assert server.get("/v2/health/ready").status_code == 200
        a, b = np.ones((1, WIDTH), np.float32), np.full((1, WIDTH), 2, np.float32)
        client = failover_client.FailoverClient([server.url], new_session=new_session)
        np.testing.assert_array_equal(client.infer("add", {"a": a, "b": b})[1]["sum"], a + b)
    finally:
        server.kill()
