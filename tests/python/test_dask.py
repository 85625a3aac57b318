"""kiln.dask on a LocalCluster of 2 worker processes (1 thread each, each under a nanny, as
`dask-worker` runs them): predict over a Dask array, DataFrame and Bag equal to in-process kiln bit for
bit (deterministic mode, the same batches) and in input order; the model loaded once per worker;
threads set from the Model or the worker, not from the nanny's OMP_NUM_THREADS=1; a model that fails
to load failing registration with the worker's error; and a worker killed while a job runs: the nanny
starts a new one (a new pid) that loads the model, and the job finishes with the same results.

Everything talks to 127.0.0.1 only, and every wait is bounded in time."""
import os
import pathlib
import signal
import subprocess
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from serve_client import make_model

pytest.importorskip("distributed", reason="kiln.dask needs python3-distributed")
import dask  # noqa: E402
import dask.array as da  # noqa: E402
import dask.bag as db  # noqa: E402
import dask.dataframe as dd  # noqa: E402
import pandas as pd  # noqa: E402
from distributed import Client, LocalCluster  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]
DEMO = REPO / "models" / "demo.onnx"
TIMEOUT = 120  # seconds: no computation in these tests should take longer


def tabular_model():
    """score [N, 1] and probs [N, 3] from columns a [N], b [N] and features [N, 3]."""
    rng = np.random.default_rng(7)
    weights = numpy_helper.from_array(rng.standard_normal((5, 3)).astype(np.float32), "w")
    score_weights = numpy_helper.from_array(rng.standard_normal((5, 1)).astype(np.float32), "v")
    axes = numpy_helper.from_array(np.array([1], np.int64), "axes")
    nodes = [helper.make_node("Unsqueeze", ["a", "axes"], ["a2"]),
             helper.make_node("Unsqueeze", ["b", "axes"], ["b2"]),
             helper.make_node("Concat", ["a2", "b2", "features"], ["h"], axis=1),
             helper.make_node("MatMul", ["h", "w"], ["logits"]),
             helper.make_node("Softmax", ["logits"], ["probs"], axis=1),
             helper.make_node("MatMul", ["h", "v"], ["score"])]
    return make_model(nodes, [("a", TensorProto.FLOAT, ["n"]), ("b", TensorProto.FLOAT, ["n"]),
                              ("features", TensorProto.FLOAT, ["n", 3])],
                      [("score", TensorProto.FLOAT, ["n", 1]), ("probs", TensorProto.FLOAT, ["n", 3])],
                      [weights, score_weights, axes])


def deep_model(width=512, depth=12):
    """y = tanh(...tanh(x W1)... W_depth) on [N, width]: enough work per row to keep a job running."""
    rng = np.random.default_rng(11)
    nodes, initializers, value = [], [], "x"
    for layer in range(depth):
        weight = (rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32)
        initializers.append(numpy_helper.from_array(weight, f"w{layer}"))
        nodes += [helper.make_node("MatMul", [value, f"w{layer}"], [f"m{layer}"]),
                  helper.make_node("Tanh", [f"m{layer}"], [f"t{layer}"])]
        value = f"t{layer}"
    nodes.append(helper.make_node("Identity", [value], ["y"]))
    return make_model(nodes, [("x", TensorProto.FLOAT, ["n", width])], [("y", TensorProto.FLOAT, ["n", width])],
                      initializers)


@pytest.fixture(scope="module")
def kiln_dask(kiln_module):
    # Worker processes are spawned: they find kiln (and this directory's helpers) through PYTHONPATH.
    paths = [str(pathlib.Path(kiln_module.__file__).parents[1]), str(pathlib.Path(__file__).parent)]
    os.environ["PYTHONPATH"] = os.pathsep.join(paths + [os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    import kiln.dask
    return kiln.dask


@pytest.fixture(scope="module")
def client(kiln_dask):
    with dask.config.set({"distributed.scheduler.worker-ttl": None}):
        cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                               dashboard_address=None)
    client = Client(cluster, timeout=60)
    yield client
    client.close()
    cluster.close()


def computed(client, *collections):
    """The collections computed on the cluster together (shared tasks run once), waiting at most
    TIMEOUT seconds."""
    futures = client.compute(list(collections))
    results = [future.result(timeout=TIMEOUT) for future in futures]
    return results[0] if len(results) == 1 else results


def worker_pids(client):
    return client.run(os.getpid)


def sessions_loaded(client, kiln_dask):
    return client.run(kiln_dask.sessions_loaded)


def batched(session, feeds, batch_size, output):
    """What predict computes for one block or partition: `batch_size` rows per run, concatenated."""
    rows = len(next(iter(feeds.values())))
    return np.concatenate([session.run({name: value[start:start + batch_size] for name, value in feeds.items()})[output]
                           for start in range(0, rows, batch_size)])


def test_array_equals_in_process_kiln_in_order(client, kiln_dask, kiln_module):
    model = kiln_dask.Model(DEMO, threads=1, deterministic=True)
    images = da.random.RandomState(3).random_sample((100, 3, 64, 64), chunks=(16, 3, 64, 64)).astype(np.float32)
    logits = kiln_dask.predict(images, model, batch_size=8)
    # Lazy, with the chunks and dtype known before anything runs.
    assert isinstance(logits, da.Array)
    assert logits.chunks == ((16,) * 6 + (4,), (10,))
    assert logits.dtype == np.float32
    result = computed(client, logits)

    session = kiln_module.Session(DEMO, threads=1, deterministic=True)
    local = images.compute(scheduler="sync")
    expected = np.concatenate([batched(session, {"input": local[start:start + 16]}, 8, "logits")
                               for start in range(0, 100, 16)])
    assert result.shape == (100, 10)
    np.testing.assert_array_equal(result, expected)
    # One slice of the array, alone: the same rows give the same values (order kept through the graph).
    np.testing.assert_array_equal(computed(client, logits[32:48]), expected[32:48])


def test_several_inputs_and_outputs_as_arrays(client, kiln_dask, kiln_module, tmp_path):
    path = tmp_path / "tabular.onnx"
    onnx.save(tabular_model(), str(path))
    model = kiln_dask.Model(path, threads=1, deterministic=True, name="tabular-arrays")
    rng = np.random.default_rng(12)
    local = {"a": rng.standard_normal(40).astype(np.float32), "b": rng.standard_normal(40).astype(np.float32),
             "features": rng.standard_normal((40, 3)).astype(np.float32)}
    # Inputs chunked differently are split at the first one's row boundaries.
    arrays = {"a": da.from_array(local["a"], chunks=10), "b": da.from_array(local["b"], chunks=20),
              "features": da.from_array(local["features"], chunks=(40, 3))}
    predicted = kiln_dask.predict(arrays, model, outputs=["score", "probs"])
    assert sorted(predicted) == ["probs", "score"]
    assert predicted["score"].chunks == ((10,) * 4, (1,)) and predicted["probs"].chunks == ((10,) * 4, (3,))
    before = sum(stat["runs"] for stat in model.run_stats(client).values())
    score, probs = computed(client, predicted["score"], predicted["probs"])
    # Both outputs came from one run per block.
    assert sum(stat["runs"] for stat in model.run_stats(client).values()) - before == 4
    session = kiln_module.Session(path, threads=1, deterministic=True)
    np.testing.assert_array_equal(score, batched(session, local, 10, "score"))
    np.testing.assert_array_equal(probs, batched(session, local, 10, "probs"))


def test_dataframe_columns_are_named_inputs(client, kiln_dask, kiln_module, tmp_path):
    model_bytes = tabular_model().SerializeToString()
    model = kiln_dask.Model(model_bytes, threads=1, deterministic=True)
    rng = np.random.default_rng(5)
    table = pd.DataFrame(rng.standard_normal((96, 5)).astype(np.float32), columns=["a", "b", "f0", "f1", "f2"],
                         index=pd.RangeIndex(1000, 1096, name="row"))
    frame = dd.from_pandas(table, npartitions=4)
    predicted = kiln_dask.predict(frame, model, batch_size=8, inputs={"features": ["f0", "f1", "f2"]})
    assert isinstance(predicted, dd.DataFrame)
    assert list(predicted.columns) == ["score", "probs_0", "probs_1", "probs_2"]
    assert list(predicted.dtypes) == [np.float32] * 4
    assert predicted.index.name == "row" and predicted.index.dtype == table.index.dtype
    result = computed(client, predicted)

    path = tmp_path / "tabular.onnx"
    path.write_bytes(model_bytes)
    session = kiln_module.Session(path, threads=1, deterministic=True)
    partitions = [part.compute(scheduler="sync") for part in frame.to_delayed()]
    expected_score, expected_probs = [], []
    for part in partitions:
        feeds = {"a": part["a"].to_numpy(), "b": part["b"].to_numpy(), "features": part[["f0", "f1", "f2"]].to_numpy()}
        expected_score.append(batched(session, feeds, 8, "score"))
        expected_probs.append(batched(session, feeds, 8, "probs"))
    assert list(result.index) == list(table.index) and result.index.name == "row"
    np.testing.assert_array_equal(result["score"].to_numpy(), np.concatenate(expected_score)[:, 0])
    np.testing.assert_array_equal(result[["probs_0", "probs_1", "probs_2"]].to_numpy(), np.concatenate(expected_probs))
    # Partitions a filter emptied come back empty, with the same columns.
    nothing = computed(client, kiln_dask.predict(frame[frame["a"] > 1e9], model, inputs={"features": ["f0", "f1", "f2"]}))
    assert len(nothing) == 0 and list(nothing.columns) == list(result.columns)

    # The model's bytes went to the workers, which share one file named by their hash.
    def model_files():
        import glob
        import tempfile
        return sorted(glob.glob(os.path.join(tempfile.gettempdir(), f"kiln-dask-{os.getuid()}", "*.onnx")))
    files = client.run(model_files)
    assert len({tuple(found) for found in files.values()}) == 1
    assert sum(pathlib.Path(found).read_bytes() == model_bytes for found in next(iter(files.values()))) == 1

    # A column the model needs and the frame lacks is named, with the columns the frame has.
    with pytest.raises(ValueError, match=r"model input 'features' reads column\(s\) 'features'.*a, b, f0, f1, f2"):
        kiln_dask.predict(frame, model)


def test_bag_of_dicts_in_order(client, kiln_dask, kiln_module):
    model = kiln_dask.Model(DEMO, threads=1, deterministic=True)
    rng = np.random.default_rng(9)
    items = [{"input": rng.random((3, 64, 64), dtype=np.float32), "id": i} for i in range(22)]
    bag = db.from_sequence(items, npartitions=3)
    predicted = kiln_dask.predict(bag, model, batch_size=4)
    assert isinstance(predicted, db.Bag)
    result = computed(client, predicted)

    session = kiln_module.Session(DEMO, threads=1, deterministic=True)
    expected = []
    for part in bag.to_delayed():
        rows = np.stack([item["input"] for item in part.compute(scheduler="sync")])
        expected.extend(batched(session, {"input": rows}, 4, "logits"))
    assert len(result) == len(items)
    for got, want in zip(result, expected):
        assert list(got) == ["logits"]
        np.testing.assert_array_equal(got["logits"], want)

    # An item without the model's input fails the job, naming the item and what it has.
    broken = db.from_sequence(items[:3] + [{"image": items[0]["input"]}], npartitions=1)
    with pytest.raises(ValueError, match=r"item at position 3 of its partition has no input 'input'; it has image"):
        computed(client, kiln_dask.predict(broken, model))


def test_model_loads_once_per_worker(client, kiln_dask):
    before = sessions_loaded(client, kiln_dask)
    model = kiln_dask.Model(DEMO, threads=1, name="demo-counted")
    images = da.random.RandomState(4).random_sample((64, 3, 64, 64), chunks=(8, 3, 64, 64)).astype(np.float32)
    for _ in range(3):
        computed(client, kiln_dask.predict(images, model, batch_size=8))
    bag = db.from_sequence([{"input": image} for image in images.compute(scheduler="sync")], npartitions=4)
    computed(client, kiln_dask.predict(bag, "demo-counted"))
    after = sessions_loaded(client, kiln_dask)
    assert set(after) == set(before)
    assert {address: after[address] - before[address] for address in after} == {address: 1 for address in after}
    # Every row ran once: 3 arrays of 8 blocks run 8 rows at a time, and 4 Bag partitions run whole.
    stats = model.run_stats(client).values()
    assert sum(stat["rows"] for stat in stats) == 4 * 64
    assert sum(stat["runs"] for stat in stats) == 3 * 8 + 4
    assert all(stat["run_seconds"] > 0 for stat in stats if stat["runs"])


def test_threads_come_from_the_model_or_the_worker(client, kiln_dask):
    # The nanny starts workers with OMP_NUM_THREADS=1, which kiln would take as its thread count.
    assert set(client.run(lambda: os.environ.get("OMP_NUM_THREADS")).values()) == {"1"}

    def threads_of(name):
        def read(dask_worker):
            import numpy
            model = dask_worker.plugins[name]
            plan = model.session.explain({"input": numpy.zeros((1, 3, 64, 64), numpy.float32)})
            return model.threads, max(step["threads"] for step in plan)
        return client.run(read)

    explicit = kiln_dask.Model(DEMO, threads=2, name="demo-two-threads").register(client)
    assert set(threads_of(explicit.name).values()) == {(2, 2)}
    from_worker = kiln_dask.Model(DEMO, name="demo-worker-threads").register(client)
    assert set(threads_of(from_worker.name).values()) == {(1, 1)}  # each worker has --nthreads 1


def test_a_model_that_fails_to_load_fails_registration(client, kiln_dask, tmp_path):
    missing = kiln_dask.Model(tmp_path / "missing.onnx", name="missing-model")
    started = time.monotonic()
    with pytest.raises(RuntimeError, match=r"model 'missing-model' failed to load on worker tcp://127\.0\.0\.1:\d+: "
                                           r".*missing\.onnx"):
        missing.register(client)
    with pytest.raises(RuntimeError, match=r"model 'garbage-model' failed to load on worker"):
        kiln_dask.Model(b"not an onnx model", name="garbage-model").register(client)
    assert time.monotonic() - started < TIMEOUT
    # Nothing stays registered: the name takes a model that loads.
    with pytest.raises(ValueError, match=r"no model named 'garbage-model' is registered"):
        kiln_dask.predict(da.zeros((4, 3, 64, 64), chunks=4, dtype=np.float32), "garbage-model")
    fixed = kiln_dask.Model(DEMO, threads=1, name="garbage-model").register(client)
    assert computed(client, kiln_dask.predict(da.zeros((4, 3, 64, 64), chunks=4, dtype=np.float32), fixed)).shape == (4, 10)
    client.unregister_worker_plugin("garbage-model")


def test_a_worker_that_cannot_load_the_model_fails_the_job_with_its_error(kiln_dask, tmp_path):
    """A worker restarted after the model file went away cannot load it: a job that reaches it fails
    with that worker's error instead of waiting."""
    path = tmp_path / "demo.onnx"
    path.write_bytes(DEMO.read_bytes())
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=None) as cluster, Client(cluster, timeout=60) as client:
        model = kiln_dask.Model(path, threads=1).register(client)
        images = da.zeros((4, 3, 64, 64), chunks=4, dtype=np.float32)
        assert computed(client, kiln_dask.predict(images, model)).shape == (4, 10)
        path.unlink()
        client.restart(timeout=TIMEOUT)
        started = time.monotonic()
        with pytest.raises(RuntimeError, match=r"model 'kiln-model-\w+' failed to load on worker tcp://.*demo\.onnx"):
            computed(client, kiln_dask.predict(da.ones((4, 3, 64, 64), chunks=4, dtype=np.float32), model))
        assert time.monotonic() - started < TIMEOUT


def test_bad_arguments_are_named(client, kiln_dask):
    model = kiln_dask.Model(DEMO, threads=1)
    images = da.zeros((4, 3, 64, 64), chunks=(2, 3, 64, 64), dtype=np.float32)
    with pytest.raises(ValueError, match=r"has no output 'probabilities'; its outputs: logits"):
        kiln_dask.predict(images, model, outputs="probabilities")
    with pytest.raises(ValueError, match=r"takes inputs input; got image"):
        kiln_dask.predict({"image": images}, model)
    with pytest.raises(ValueError, match=r"batch_size must be a positive integer"):
        kiln_dask.predict(images, model, batch_size=0)
    with pytest.raises(TypeError, match=r"Dask array \(or a dict of them\), DataFrame or Bag, got ndarray"):
        kiln_dask.predict(np.zeros((4, 3, 64, 64), np.float32), model)
    with pytest.raises(ValueError, match=r"no model named 'nobody' is registered"):
        kiln_dask.predict(images, "nobody")
    with pytest.raises(ValueError, match=r"unknown kiln setting\(s\) determinstic"):
        kiln_dask.Model(DEMO, determinstic=True)
    with pytest.raises(TypeError, match=r"input 'input' is float64; model '.*' takes float32 \(convert it with \.astype\)"):
        kiln_dask.predict(images.astype(np.float64), model)
    with pytest.raises(ValueError, match=r"outputs= names no output; model '.*' has logits"):
        kiln_dask.predict(images, model, outputs=[])
    unknown_rows = dd.from_pandas(pd.DataFrame({"x": np.zeros(4, np.float32)}), npartitions=2).to_dask_array()
    with pytest.raises(ValueError, match=r"unknown chunk sizes .* compute_chunk_sizes\(\)"):
        kiln_dask.predict(unknown_rows, model)


def test_a_worker_killed_mid_job_is_replaced_and_the_job_completes(client, kiln_dask, kiln_module, tmp_path):
    path = tmp_path / "deep.onnx"
    onnx.save(deep_model(), str(path))
    model = kiln_dask.Model(path, threads=1, deterministic=True).register(client)
    blocks, rows = 120, 256
    inputs = da.random.RandomState(21).standard_normal((blocks * rows, 512), chunks=(rows, 512)).astype(np.float32)
    job = client.compute(kiln_dask.predict(inputs, model, batch_size=64))
    pids_before = worker_pids(client)

    def finished_blocks(dask_scheduler=None):
        return sum("kiln-output-" in str(key) and task.state == "memory" for key, task in dask_scheduler.tasks.items())
    deadline = time.monotonic() + TIMEOUT
    while client.run_on_scheduler(finished_blocks) < 6:
        assert time.monotonic() < deadline, "the job made no progress"
        assert not job.done(), "the job finished before a worker could be killed: make it longer"
        time.sleep(0.05)
    victim_pid = sorted(pids_before.values())[0]
    os.kill(victim_pid, signal.SIGKILL)
    # The job was still running when the worker died: it has not finished after the kill.
    assert not job.done(), "the job finished before the worker was killed: make it longer"

    computed = job.result(timeout=TIMEOUT)
    session = kiln_module.Session(path, threads=1, deterministic=True)
    local = inputs.compute(scheduler="sync")
    expected = np.concatenate([batched(session, {"x": local[start:start + rows]}, 64, "y")
                               for start in range(0, blocks * rows, rows)])
    assert computed.shape == expected.shape  # no block lost or repeated
    np.testing.assert_array_equal(computed, expected)

    # The nanny started a new worker process, which loaded the model once.
    deadline = time.monotonic() + TIMEOUT
    while True:
        pids_after = worker_pids(client)
        if len(pids_after) == 2 and victim_pid not in pids_after.values():
            break
        assert time.monotonic() < deadline, f"no replacement worker: {pids_after}"
        time.sleep(0.2)
    new_workers = [address for address, pid in pids_after.items() if pid not in pids_before.values()]
    assert len(new_workers) == 1
    loaded = client.run(lambda dask_worker: dask_worker.plugins[model.name].session is not None, workers=new_workers)
    assert loaded == {new_workers[0]: True}
    # The replacement loaded every registered model, this one among them, each once.
    def loaded_models(dask_worker):
        from kiln.dask import Model
        return sum(isinstance(plugin, Model) and plugin.session is not None for plugin in dask_worker.plugins.values())
    assert client.run(kiln_dask.sessions_loaded, workers=new_workers) == client.run(loaded_models, workers=new_workers)


def test_dask_scheduler_and_dask_worker_commands(kiln_dask, kiln_module, tmp_path):
    """The commands docs/scale_out.md gives for a cluster across machines, here on 127.0.0.1: a
    scheduler, then two single-threaded workers that declare a threads resource kiln takes."""
    scheduler_file = tmp_path / "scheduler.json"
    processes = [subprocess.Popen(["dask-scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                                   "--scheduler-file", str(scheduler_file)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    try:
        deadline = time.monotonic() + TIMEOUT
        while not scheduler_file.exists():
            assert time.monotonic() < deadline and processes[0].poll() is None, "dask-scheduler did not start"
            time.sleep(0.1)
        processes.append(subprocess.Popen(["dask-worker", "--scheduler-file", str(scheduler_file), "--host", "127.0.0.1",
                                           "--nworkers", "2", "--nthreads", "1", "--resources", "threads=2",
                                           "--no-dashboard"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        with Client(scheduler_file=str(scheduler_file), timeout=60) as client:
            client.wait_for_workers(2, timeout=TIMEOUT)
            model = kiln_dask.Model(DEMO, deterministic=True, name="demo-from-resources").register(client)
            assert set(client.run(lambda dask_worker: dask_worker.plugins[model.name].threads).values()) == {2}
            images = da.random.RandomState(8).random_sample((24, 3, 64, 64), chunks=(8, 3, 64, 64)).astype(np.float32)
            result = computed(client, kiln_dask.predict(images, model))
        session = kiln_module.Session(DEMO, threads=2, deterministic=True)
        local = images.compute(scheduler="sync")
        expected = np.concatenate([session.run({"input": local[start:start + 8]})["logits"] for start in range(0, 24, 8)])
        np.testing.assert_array_equal(result, expected)
    finally:
        for process in reversed(processes):
            process.terminate()
        for process in reversed(processes):
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=30)
