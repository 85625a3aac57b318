"""Batch inference on Dask: a model loaded once per worker, fed the blocks of a Dask array, the
partitions of a Dask DataFrame or of a Dask Bag, answering with the same kind of collection, lazily
and in input order.

    from dask.distributed import Client
    import kiln.dask
    client = Client("tcp://scheduler:8786")          # or Client(LocalCluster(...))
    model = kiln.dask.Model("resnet50.onnx", threads=1, deterministic=True)
    model.register(client)                           # every worker loads it once; new workers too
    logits = kiln.dask.predict(images, model, batch_size=16)  # images: a Dask array [N, 3, 224, 224]
    logits.compute()

A `Model` is a Dask WorkerPlugin. Registering it makes every worker of the cluster, and every worker
that joins later (a restarted one included), build one kiln Session of it. Tasks find it on their
worker by name. A model that fails to load on a worker fails `register` with that worker's error. A
task that reaches a worker where the model did not load fails with that worker's load error.

Threads: Dask's nanny starts workers with OMP_NUM_THREADS=1, which kiln would read. A Model
therefore sets its session's `threads` itself: `threads=N` if given, else the worker's `threads`
resource (`dask-worker --resources threads=4`), else the worker's `--nthreads`. A worker runs one
batch at a time through a model, so one model never uses more threads than that on a worker.
"""
import asyncio
import hashlib
import logging
import math
import operator
import os
import tempfile
import threading
import time

import numpy as np

import kiln

try:
    import dask
    import dask.array as _da
    from dask.highlevelgraph import HighLevelGraph
    from distributed import WorkerPlugin, get_client, get_worker
except ImportError as _error:  # pragma: no cover: dask is an optional dependency of kiln
    raise ImportError(f"kiln.dask needs dask and distributed (Debian: python3-distributed): {_error}") from None

__all__ = ["Model", "predict", "sessions_loaded"]

_logger = logging.getLogger("kiln.dask")
# How long the client waits for a worker to answer a question about a model (its inputs, its output
# shapes): long enough for a worker that joins to load a large model, short of forever on a cluster
# without workers.
ASK_TIMEOUT_SECONDS = 600

# Sessions this process built through Models: what tests count to check that a worker loads its model
# once, whatever the number of tasks it ran.
_sessions_loaded = 0
_sessions_loaded_lock = threading.Lock()

_SETTING_NAMES = frozenset(setting["name"] for setting in kiln.backends.table())


def sessions_loaded():
    """How many model sessions Models built in this process (run it on workers with client.run)."""
    return _sessions_loaded


class Model(WorkerPlugin):
    """An ONNX model that every Dask worker loads once, with kiln settings (the names of
    kiln.backends.table()) for its session.

    `model` is a path that every worker can read (absolute, or relative to the client's directory), or
    the model file's bytes: they are sent to each worker, which writes them once per machine and user
    to a file named by their hash in its temporary directory, so workers of one machine map one file
    (use_mmap) and share its pages. `name` keys the model on the workers; by default it is derived from
    the model (for a path the client can read: also the file's size and modification time, so a
    re-exported file gets a new name) and the settings, so registering the same model twice is one
    registration."""

    def __init__(self, model, *, name=None, threads=None, **settings):
        if isinstance(model, (bytes, bytearray, memoryview)):
            self._bytes = bytes(model)
            self._path = None
            identity = hashlib.sha256(self._bytes).hexdigest()
        elif isinstance(model, (str, os.PathLike)):
            self._bytes = None
            self._path = os.path.abspath(os.fspath(model))
            try:
                stat = os.stat(self._path)
                identity = (self._path, stat.st_size, stat.st_mtime_ns)
            except OSError:  # only the workers can read it: its path is its identity
                identity = self._path
        else:
            raise TypeError(f"model must be a path or the model file's bytes, got {type(model).__name__}")
        if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
            raise ValueError(f"threads must be a positive integer or None (the worker decides), got {threads!r}")
        unknown = sorted(set(settings) - _SETTING_NAMES)
        if unknown:
            raise ValueError(f"unknown kiln setting(s) {', '.join(unknown)}; known: {', '.join(sorted(_SETTING_NAMES))}")
        if "threads" in settings:
            raise ValueError("give threads as Model(threads=N), not as a setting")
        self._threads = threads
        self._settings = dict(settings)
        if name is None:
            described = repr((identity, threads, sorted(self._settings.items())))
            name = "kiln-model-" + hashlib.sha256(described.encode()).hexdigest()[:16]
        if not isinstance(name, str) or not name:
            raise ValueError(f"name must be a non-empty string, got {name!r}")
        self.name = name
        self._described = {}  # client side: what _describe and _probe answered, per question
        self._reset_worker_state()

    def _reset_worker_state(self):
        self.session = None
        self.error = None
        self.threads = None
        self.worker_address = None
        # Kept across teardown: a task that started before a teardown still finds a lock, then no session.
        self._run_lock = threading.Lock()
        self.runs = self.rows = 0
        self.run_seconds = 0.0

    def __getstate__(self):
        # What travels to workers: the model and its settings, never a session or a lock.
        return {"_bytes": self._bytes, "_path": self._path, "_threads": self._threads,
                "_settings": self._settings, "name": self.name}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._described = {}
        self._reset_worker_state()

    def __repr__(self):
        source = self._path if self._path else f"<{len(self._bytes or b'')} bytes>"
        return f"kiln.dask.Model({source!r}, name={self.name!r}, threads={self._threads}, settings={self._settings})"

    # WorkerPlugin

    async def setup(self, worker):
        # Loading (and a large model's planning) runs off the worker's event loop, which keeps
        # answering the scheduler's heartbeats meanwhile.
        self.worker_address = worker.address
        await asyncio.get_running_loop().run_in_executor(None, self._load, worker)

    def _load(self, worker):
        global _sessions_loaded
        try:
            self.threads = self._threads_on(worker)
            if not self._path:
                self._path = _write_once(self._bytes)
                self._bytes = None  # the file holds them now; the scheduler keeps the copy new workers get
            session = kiln.Session(self._path, threads=self.threads, **self._settings)
        except Exception as error:
            self.error = f"kiln.dask: model {self.name!r} failed to load on worker {worker.address}: {error}"
            # A worker that joins later reports nothing to a client: its log is where this shows.
            _logger.error("%s", self.error)
            raise RuntimeError(self.error) from error
        with self._run_lock:
            self.session = session
        with _sessions_loaded_lock:
            _sessions_loaded += 1

    def teardown(self, worker):
        with self._run_lock:  # after the run in progress, if any
            self.session = None

    def _threads_on(self, worker):
        if self._threads is not None:
            return self._threads
        declared = worker.state.total_resources.get("threads")
        if declared is not None:
            if declared < 1 or declared != int(declared):
                raise ValueError(f"the worker's threads resource is {declared}, not a positive integer")
            return int(declared)
        return worker.state.nthreads

    # Client side

    def register(self, client=None):
        """Registers this model with the cluster of `client` (default: the current one) unless a
        model of this name is registered already (to replace one, client.unregister_worker_plugin(name)
        first); every worker loads it before this returns. Raises the first worker's load error.
        Returns self."""
        client = client or get_client()
        if not _registered(client, self.name):
            try:
                client.register_worker_plugin(self, name=self.name)
            except Exception:
                # The scheduler keeps a plugin whose setup failed: unregister it, so that workers that
                # join later do not try again and a corrected model can be registered under this name.
                client.unregister_worker_plugin(self.name)
                raise
        return self

    def run_stats(self, client=None):
        """{worker address: {"runs", "rows", "run_seconds"}}: the batches each worker ran through this
        model since it loaded it, and the time spent in kiln. A job's wall time beyond run_seconds is
        Dask's (scheduling, moving data, making inputs)."""
        name = self.name

        def read(dask_worker):
            model = dask_worker.plugins.get(name)
            return None if model is None else {"runs": model.runs, "rows": model.rows, "run_seconds": model.run_seconds}
        return (client or get_client()).run(read)

    def _ask(self, client, question, *arguments):
        """The answer of a worker to `question` (_describe or _probe) about this model, asked once
        per client and arguments: a model registered under a name does not change."""
        key = (client.scheduler.address, question.__name__, repr(arguments))
        if key not in self._described:
            self._described[key] = _ask_a_worker(client, question, self.name, *arguments)
        return self._described[key]


def _write_once(model_bytes):
    """The path of a file holding `model_bytes` in this user's kiln-dask folder of this machine's
    temporary directory, named by their hash: written by the first worker (to a private name, then
    renamed into place), reused by the others once its bytes are checked."""
    digest = hashlib.sha256(model_bytes).hexdigest()
    folder = os.path.join(tempfile.gettempdir(), f"kiln-dask-{os.getuid()}")
    os.makedirs(folder, mode=0o700, exist_ok=True)
    if os.stat(folder).st_uid != os.getuid():
        raise PermissionError(f"{folder} belongs to another user; kiln.dask writes model files only to a folder of its own")
    path = os.path.join(folder, f"{digest[:32]}.onnx")
    try:
        with open(path, "rb") as existing:
            if hashlib.sha256(existing.read()).hexdigest() == digest:
                return path
    except FileNotFoundError:
        pass
    descriptor, partial = tempfile.mkstemp(suffix=".partial", dir=folder)
    try:
        with os.fdopen(descriptor, "wb") as file:
            file.write(model_bytes)
        os.replace(partial, path)
    except BaseException:
        if os.path.exists(partial):
            os.unlink(partial)
        raise
    return path


def _ask_a_worker(client, question, name, *arguments):
    future = client.submit(question, name, *arguments, pure=False)
    try:
        return future.result(timeout=ASK_TIMEOUT_SECONDS)
    except TimeoutError:
        future.cancel()
        workers = len(client.scheduler_info().get("workers", {}))
        raise TimeoutError(f"kiln.dask: no worker answered about model {name!r} within {ASK_TIMEOUT_SECONDS} s "
                           f"(the cluster has {workers} worker(s))") from None


def _registered(client, name):
    return client.run_on_scheduler(_scheduler_has_plugin, name=name)


def _scheduler_has_plugin(name, dask_scheduler=None):
    return name in dask_scheduler.worker_plugins


# Worker side: what tasks run.

def _model_on_this_worker(name):
    worker = get_worker()
    model = worker.plugins.get(name)
    if model is None:
        raise RuntimeError(f"kiln.dask: model {name!r} is not registered on worker {worker.address}; "
                           f"call Model.register(client) before predict")
    return model


def _run_once(model, feeds, counted_rows=0):
    """One run under the worker's lock for this model, which a teardown also takes; a run of
    `counted_rows` > 0 rows counts in the model's run_stats."""
    with model._run_lock:
        if model.session is None:
            raise RuntimeError(model.error or f"kiln.dask: model {model.name!r} is not loaded on worker "
                               f"{model.worker_address}")
        began = time.perf_counter()
        results = model.session.run(feeds)
        if counted_rows:
            model.run_seconds += time.perf_counter() - began
            model.runs += 1
            model.rows += counted_rows
        return results


def _run_batches(name, feeds, batch_size, outputs, spec):
    """Runs {input: array of N rows} through the model `batch_size` rows at a time; returns
    {output: array of N rows} for the names in `outputs`, each row shaped as `spec` says."""
    model = _model_on_this_worker(name)
    rows = len(next(iter(feeds.values())))
    step = batch_size or rows
    pieces = {output: [] for output in outputs}
    for start in range(0, rows, max(step, 1)):
        batch = {input: values[start:start + step] for input, values in feeds.items()}
        batch_rows = len(next(iter(batch.values())))
        results = _run_once(model, batch, counted_rows=batch_rows)
        for output in outputs:
            value = results[output]
            if value.ndim == 0 or value.shape[0] != batch_rows:
                raise ValueError(f"kiln.dask: output {output!r} of model {name!r} has shape {list(value.shape)} for a "
                                 f"batch of {batch_rows} rows; predict needs outputs batched along axis 0")
            if spec is not None and (value.shape[1:] != spec[output][0] or value.dtype != spec[output][1]):
                raise ValueError(f"kiln.dask: output {output!r} of model {name!r} has rows of shape "
                                 f"{list(value.shape[1:])} ({value.dtype}) in a batch of {batch_rows}, but "
                                 f"{list(spec[output][0])} ({spec[output][1]}) for one row; predict needs every row "
                                 f"of an output shaped alike")
            pieces[output].append(value)
    return {output: np.concatenate(values) if len(values) != 1 else values[0] for output, values in pieces.items()}


def _empty_outputs(spec):
    return {output: np.empty((0, *row_shape), dtype) for output, (row_shape, dtype) in spec.items()}


def _probe(name, row_specs, outputs):
    """{output: (row shape, dtype)} from one row of zeros: what lazy collections need to know ahead."""
    model = _model_on_this_worker(name)
    feeds = {input: np.zeros((1, *row_shape), dtype) for input, (row_shape, dtype) in row_specs.items()}
    results = _run_once(model, feeds)
    unknown = sorted(set(outputs) - set(results))
    if unknown:
        raise ValueError(f"kiln.dask: model {name!r} has no output {', '.join(map(repr, unknown))}; "
                         f"its outputs: {', '.join(results)}")
    spec = {}
    for output in outputs:
        value = results[output]
        if value.ndim == 0 or value.shape[0] != 1:
            raise ValueError(f"kiln.dask: output {output!r} of model {name!r} has shape {list(value.shape)} for one "
                             f"row; predict needs outputs batched along axis 0")
        spec[output] = (tuple(value.shape[1:]), value.dtype)
    return spec


def _describe(name):
    model = _model_on_this_worker(name)
    with model._run_lock:
        session = model.session
        if session is None:
            raise RuntimeError(model.error or f"kiln.dask: model {name!r} is not loaded on worker "
                               f"{model.worker_address}")
        return session.inputs, [output["name"] for output in session.outputs]


# predict

class _Named:
    """A model registered by name only: asked afresh each time."""

    def __init__(self, name):
        self.name = name

    def _ask(self, client, question, *arguments):
        return _ask_a_worker(client, question, self.name, *arguments)


def predict(collection, model, batch_size=None, outputs=None, inputs=None, client=None):
    """Runs `model` (a Model, registered here if it is not yet, or a registered model's name) over a
    Dask collection and returns the same kind of collection, lazily, in input order:

    - a Dask array (the model's one input) or a dict {input name: Dask array}, rows along axis 0:
      blocks of rows run on the workers; returns a Dask array per output, chunked like the input's
      rows (a dict {output: array} when `outputs` is a list, or is left out and the model has several);
    - a Dask DataFrame: each model input reads the column of its name, or the columns
      `inputs={input: [column, ...]}` names (stacked for an input of shape [N, k]); returns a
      DataFrame with the input's index and one column per output value (`name` for an output of one
      value per row, `name_0`, `name_1`, ... for more);
    - a Dask Bag of dicts {input name: array of one example}: stacked batch_size at a time; returns a
      Bag of dicts {output name: array of one example}.

    `batch_size` caps the rows of one run (default: a whole block or partition); `outputs` picks model
    outputs (a name or a list; default: all of them)."""
    import dask.bag
    import dask.dataframe

    if not isinstance(collection, (dask.dataframe.DataFrame, dask.bag.Bag, _da.Array, dict)):
        raise TypeError(f"predict takes a Dask array (or a dict of them), DataFrame or Bag, got "
                        f"{type(collection).__name__}")
    client = client or get_client()
    if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1):
        raise ValueError(f"batch_size must be a positive integer or None, got {batch_size!r}")
    if isinstance(model, str):
        if not _registered(client, model):
            raise ValueError(f"no model named {model!r} is registered with this cluster; register a kiln.dask.Model")
        model = _Named(model)
    elif isinstance(model, Model):
        model.register(client)
    else:
        raise TypeError(f"model must be a kiln.dask.Model or a registered model's name, got {type(model).__name__}")
    name = model.name
    model_inputs, model_outputs = model._ask(client, _describe)
    single_output = isinstance(outputs, str)
    chosen = [outputs] if single_output else list(outputs) if outputs is not None else model_outputs
    if not chosen:
        raise ValueError(f"outputs= names no output; model {name!r} has {', '.join(model_outputs)}")
    unknown = [output for output in chosen if output not in model_outputs]
    if unknown:
        raise ValueError(f"model {name!r} has no output {', '.join(map(repr, unknown))}; its outputs: "
                         f"{', '.join(model_outputs)}")
    if inputs is not None and not isinstance(collection, dask.dataframe.DataFrame):
        raise ValueError("inputs= maps DataFrame columns to model inputs; it applies to DataFrames only")

    if isinstance(collection, dask.dataframe.DataFrame):
        return _predict_frame(collection, model, model_inputs, chosen, batch_size, inputs, client)
    if isinstance(collection, dask.bag.Bag):
        dtypes = {described["name"]: np.dtype(described["dtype"]) for described in model_inputs}
        return collection.map_partitions(_predict_items, name, dtypes, chosen, batch_size)
    arrays = _array_feeds(collection, model_inputs, name)
    results = _predict_arrays(arrays, model, chosen, batch_size, client)
    return results[chosen[0]] if single_output or (outputs is None and len(chosen) == 1) else results


def _array_feeds(collection, model_inputs, name):
    names = [i["name"] for i in model_inputs]
    if isinstance(collection, dict):
        arrays = dict(collection)
    elif len(names) == 1:
        arrays = {names[0]: collection}
    else:
        raise ValueError(f"model {name!r} has inputs {', '.join(names)}; give predict a dict {{input name: Dask array}}")
    if sorted(arrays) != sorted(names):
        raise ValueError(f"model {name!r} takes inputs {', '.join(names)}; got {', '.join(map(str, arrays))}")
    dtypes = {described["name"]: np.dtype(described["dtype"]) for described in model_inputs}
    for input, array in arrays.items():
        if not isinstance(array, _da.Array) or array.ndim == 0:
            raise TypeError(f"input {input!r} must be a Dask array with rows along axis 0")
        if any(math.isnan(extent) for extent in array.shape):
            raise ValueError(f"input {input!r} has unknown chunk sizes (shape {array.shape}); call "
                             f"compute_chunk_sizes() on it first")
        if array.dtype != dtypes[input]:
            raise TypeError(f"input {input!r} is {array.dtype}; model {name!r} takes {dtypes[input]} "
                            f"(convert it with .astype)")
    rows = {array.shape[0] for array in arrays.values()}
    if len(rows) != 1:
        raise ValueError(f"the input arrays have different numbers of rows: "
                         f"{', '.join(f'{k}: {v.shape[0]}' for k, v in arrays.items())}")
    first = next(iter(arrays.values()))
    # Whole rows per block, and every input split at the first one's row boundaries.
    return {input: array.rechunk({0: first.chunks[0], **{axis: -1 for axis in range(1, array.ndim)}})
            for input, array in arrays.items()}


def _predict_arrays(arrays, model, outputs, batch_size, client):
    """{output: Dask array}. One task per block runs the model; with one output its result is the
    output's block, with several each output picks its block out of the run's dict."""
    name = model.name
    row_specs = {input: (array.shape[1:], array.dtype) for input, array in arrays.items()}
    spec = model._ask(client, _probe, row_specs, outputs)
    row_chunks = next(iter(arrays.values())).chunks[0]
    token = dask.base.tokenize(name, outputs, batch_size, *(array.name for array in arrays.values()))

    def block_key(layer, block, output):
        return (layer, block, *([0] * len(spec[output][0])))

    def array(output, graph, layer):
        row_shape, dtype = spec[output]
        chunks = (row_chunks, *((extent,) for extent in row_shape))
        return _da.Array(graph, layer, chunks, dtype=dtype, meta=np.empty((0,) * (1 + len(row_shape)), dtype))

    single = outputs[0] if len(outputs) == 1 else None
    run_layer = f"kiln-output-{single}-{token}" if single else f"kiln-predict-{token}"
    tasks = {}
    for block in range(len(row_chunks)):
        feeds = {input: (array.name, block, *([0] * (array.ndim - 1))) for input, array in arrays.items()}
        key = block_key(run_layer, block, single) if single else (run_layer, block)
        tasks[key] = (_run_block, name, (dict, [[input, key] for input, key in feeds.items()]), batch_size, outputs,
                      spec, single)
    runs = HighLevelGraph.from_collections(run_layer, tasks, dependencies=list(arrays.values()))
    if single:
        return {single: array(single, runs, run_layer)}
    results = {}
    for output in outputs:
        layer = f"kiln-output-{output}-{token}"
        picks = {block_key(layer, block, output): (operator.getitem, (run_layer, block), output)
                 for block in range(len(row_chunks))}
        graph = HighLevelGraph({**runs.layers, layer: picks}, {**runs.dependencies, layer: {run_layer}})
        results[output] = array(output, graph, layer)
    return results


def _run_block(name, feeds, batch_size, outputs, spec, single):
    if len(next(iter(feeds.values()))) == 0:
        results = _empty_outputs(spec)
    else:
        results = _run_batches(name, feeds, batch_size, outputs, spec)
    return results[single] if single else results


def _frame_columns(output, row_shape):
    if row_shape in ((), (1,)):
        return [output]
    if len(row_shape) == 1:
        return [f"{output}_{i}" for i in range(row_shape[0])]
    raise ValueError(f"output {output!r} has {list(row_shape)} values per row; a DataFrame column holds one per "
                     f"row, so predict over a DataFrame takes outputs of shape [N] or [N, k] (use a Dask array)")


def _predict_frame(frame, model, model_inputs, outputs, batch_size, inputs, client):
    import pandas

    name = model.name
    columns = list(frame.columns)
    mapping = {}
    row_specs = {}
    for described in model_inputs:
        input = described["name"]
        chosen = inputs[input] if inputs and input in inputs else [input]
        chosen = [chosen] if isinstance(chosen, str) or not isinstance(chosen, (list, tuple)) else list(chosen)
        missing = [column for column in chosen if column not in columns]
        if missing:
            raise ValueError(f"model input {input!r} reads column(s) {', '.join(map(repr, missing))}, which the "
                             f"DataFrame lacks; its columns: {', '.join(map(str, columns))} (map them with inputs=)")
        if described["shape"] is None:
            raise ValueError(f"model input {input!r} declares no shape; DataFrame columns feed inputs of shape [N] "
                             f"or [N, k] (use a Dask array)")
        rank = len(described["shape"])
        if rank == 1 and len(chosen) == 1:
            row_shape = ()
        elif rank == 2:
            width = described["shape"][1]
            if isinstance(width, int) and width != len(chosen):
                raise ValueError(f"model input {input!r} takes {width} values per row; {len(chosen)} column(s) "
                                 f"map to it: {', '.join(map(str, chosen))}")
            row_shape = (len(chosen),)
        else:
            raise ValueError(f"model input {input!r} has shape {described['shape']}; DataFrame columns feed inputs "
                             f"of shape [N] (one column) or [N, k] (k columns)")
        mapping[input] = (chosen, row_shape)
        row_specs[input] = (row_shape, np.dtype(described["dtype"]))
    if inputs:
        extra = sorted(set(inputs) - set(mapping))
        if extra:
            raise ValueError(f"inputs= names {', '.join(map(repr, extra))}, which model {name!r} does not take; "
                             f"its inputs: {', '.join(mapping)}")
    spec = model._ask(client, _probe, row_specs, outputs)
    meta = pandas.DataFrame({column: np.empty(0, dtype) for output, (row_shape, dtype) in spec.items()
                             for column in _frame_columns(output, row_shape)}, index=frame._meta.index)
    dtypes = {input: dtype for input, (_, dtype) in row_specs.items()}
    return frame.map_partitions(_predict_partition, name, mapping, dtypes, outputs, batch_size, spec, meta=meta,
                                align_dataframes=False)


def _predict_partition(partition, name, mapping, dtypes, outputs, batch_size, spec):
    import pandas

    feeds = {}
    for input, (columns, row_shape) in mapping.items():
        values = partition[columns].to_numpy(dtype=dtypes[input])
        feeds[input] = values.reshape(len(partition), *row_shape)
    results = _run_batches(name, feeds, batch_size, outputs, spec) if len(partition) else _empty_outputs(spec)
    frame = {}
    for output in outputs:
        row_shape = spec[output][0]
        values = results[output].reshape(len(partition), len(_frame_columns(output, row_shape)))
        for i, column in enumerate(_frame_columns(output, row_shape)):
            frame[column] = values[:, i]
    return pandas.DataFrame(frame, index=partition.index)


def _predict_items(items, name, dtypes, outputs, batch_size):
    items = list(items)
    if not items:
        return []
    feeds = {}
    for input, dtype in dtypes.items():
        rows = []
        for position, item in enumerate(items):
            if not isinstance(item, dict):
                raise TypeError(f"kiln.dask: a Bag item is a dict {{input name: array}}, got {type(item).__name__} "
                                f"at position {position} of its partition")
            if input not in item:
                raise ValueError(f"kiln.dask: the Bag item at position {position} of its partition has no input "
                                 f"{input!r}; it has {', '.join(map(str, item))}")
            rows.append(np.asarray(item[input], dtype))
        shapes = {row.shape for row in rows}
        if len(shapes) != 1:
            raise ValueError(f"kiln.dask: input {input!r} has rows of shapes {sorted(shapes)} in one partition; "
                             f"rows batched together need one shape")
        feeds[input] = np.stack(rows)
    results = _run_batches(name, feeds, batch_size, outputs, None)
    return [{output: results[output][row] for output in outputs} for row in range(len(items))]
