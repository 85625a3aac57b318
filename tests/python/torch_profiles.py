"""PyTorch runs profiled in the test process, and their event trees written as PyTorch writes traces.

The Kineto writer follows PyTorch 2.x's torch/csrc/autograd/profiler_kineto.cpp (which args each event
gets: AddGenericMetadata, AddTensorboardFields) and libkineto's output_json.cpp (the event layout:
"X" events with cat/name/pid/tid/ts/dur/args, [memory] as "i" events of cat "cpu_instant_event",
thread_name metadata, the "Trace" span, "Record Window End", ts/dur as µs with three decimals
relative to baseTimeNanoseconds). Older writers wrote whole µs since the epoch and no base: the
`ns_precision=False` variant. One addition no writer makes: "Ev Idx" (a field name libkineto
defines), the event's pre-order index in PyTorch's tree, which only the tests read, to pair events.
"""
import json
import os

import torch
import torch.profiler


def training_run(steps=3, with_stack=True, record_shapes=True, profile_memory=True):
    """A small training loop: a DataLoader, a model, an optimizer, and indexing in a Python loop."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    data = torch.utils.data.TensorDataset(torch.randn(4 * steps, 8), torch.randn(4 * steps, 4))
    loader = torch.utils.data.DataLoader(data, batch_size=4)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], with_stack=with_stack,
                                record_shapes=record_shapes, profile_memory=profile_memory) as prof:
        for x, y in loader:
            with torch.profiler.record_function("train_step"):
                loss = torch.nn.functional.mse_loss(model(x), y)
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
            total = torch.zeros(4)
            for i in range(4):
                total[i] = x[i].sum()
    return prof


def tag(event):
    return str(event.tag).rsplit(".", 1)[-1]


def is_annotation(event):
    return tag(event) == "TorchOp" and str(event.extra_fields.scope).endswith("USER_SCOPE")


def kiln_kind(event):
    if is_annotation(event):
        return "annotation"
    return {"TorchOp": "op", "Backend": "op", "Allocation": "memory", "OutOfMemory": "memory",
            "PyCall": "python", "PyCCall": "python"}.get(tag(event), "other")


def preorder(prof):
    """PyTorch's tree in pre-order: [(event, parent index or None)], independently of kiln."""
    roots = prof.profiler.kineto_results.experimental_event_tree()
    out = []
    pending = [(root, None) for root in reversed(roots)]
    while pending:
        event, parent = pending.pop()
        index = len(out)
        out.append((event, parent))
        for child in reversed(event.children):
            pending.append((child, index))
    return out


def _us(ns, base, ns_precision):
    if ns_precision:
        relative = ns - base
        return f"{relative // 1000}.{relative % 1000:03d}"
    return str(ns // 1000)


def _dur(start, end, ns_precision):
    if ns_precision:
        duration = end - start
        return f"{duration // 1000}.{duration % 1000:03d}"
    return str(end // 1000 - start // 1000)


def write_kineto(prof, path, ns_precision=True):
    """Writes prof's event tree as PyTorch 2.x writes a Kineto trace (see the module's docstring)."""
    events = preorder(prof)
    pid = os.getpid()
    starts = [event.start_time_ns for event, _ in events]
    # Kineto's base is a time before every event (the program's start); any earlier time will do.
    base = min(starts) - 1_234_567
    python_ids = {}
    for index, (event, _) in enumerate(events):
        if tag(event) in ("PyCall", "PyCCall"):
            python_ids[index] = len(python_ids) + 1
    record_shapes = prof.profiler.record_shapes

    def python_parent(index):
        parent = events[index][1]
        while parent is not None and parent not in python_ids:
            parent = events[parent][1]
        return python_ids.get(parent)

    lines = []

    def emit(text):
        lines.append(text)

    tids = sorted({event.start_tid for event, _ in events})
    emit(f'{{"name": "process_name", "ph": "M", "ts": {_us(base, base, ns_precision)}, "pid": {pid}, "tid": 0, '
         f'"args": {{"name": "python3"}}}}')
    for tid in tids:
        emit(f'{{"name": "thread_name", "ph": "M", "ts": {_us(base, base, ns_precision)}, "pid": {pid}, '
             f'"tid": {tid}, "args": {{"name": "thread {tid} (python3)"}}}}')
    # PyTorch writes its activities in start order (a stable sort of the order it recorded them in,
    # which puts a parent before a child that starts in the same ns).
    order = sorted(range(len(events)), key=lambda index: events[index][0].start_time_ns)
    for index in order:
        event, _ = events[index]
        kind = tag(event)
        ts = _us(event.start_time_ns, base, ns_precision)
        args = []
        if kind in ("Allocation", "OutOfMemory"):
            extra = event.extra_fields
            args += [("Device Type", 0 if extra.device.type == "cpu" else 1),
                     ("Device Id", extra.device.index if extra.device.index is not None else -1)]
            if kind == "Allocation":
                args.append(("Addr", extra.ptr))
            args += [("Bytes", extra.alloc_size), ("Total Allocated", extra.total_allocated),
                     ("Total Reserved", extra.total_reserved), ("Ev Idx", index)]
            emit(json.dumps({"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": pid,
                             "tid": event.start_tid})[:-1] + f', "ts": {ts}, "args": {json.dumps(dict(args))}}}')
            continue
        if kind in ("TorchOp", "Backend"):
            category = "user_annotation" if is_annotation(event) else "cpu_op"
            extra = event.extra_fields
            args.append(("External id", event.correlation_id))
            if record_shapes and extra.inputs.shapes:
                args.append(("Input Dims", [list(shape) for shape in extra.inputs.shapes]))
                args.append(("Input type", list(extra.inputs.dtypes)))
            if kind == "TorchOp" and extra.sequence_number >= 0:
                args += [("Fwd thread id", event.start_tid), ("Sequence number", extra.sequence_number)]
            args.append(("Record function id", 0))
        elif kind in ("PyCall", "PyCCall"):
            category = "python_function"
            args += [("Python id", python_ids[index]), ("Python parent id", python_parent(index))]
            if kind == "PyCall" and event.extra_fields.module is not None:
                args.append(("Python module id", 0))
        else:
            category = "cpu_op"
        args.append(("Ev Idx", index))
        dur = _dur(event.start_time_ns, event.end_time_ns, ns_precision)
        emit(json.dumps({"ph": "X", "cat": category, "name": event.name, "pid": pid, "tid": event.start_tid})[:-1]
             + f', "ts": {ts}, "dur": {dur}, "args": {json.dumps(dict(args))}}}')
    end = max(event.end_time_ns for event, _ in events)
    emit(f'{{"ph": "X", "cat": "Trace", "ts": {_us(min(starts), base, ns_precision)}, '
         f'"dur": {_dur(min(starts), end, ns_precision)}, "pid": "Spans", "tid": "PyTorch Profiler", '
         f'"name": "PyTorch Profiler (0)", "args": {{"Op count": 0}}}}')
    emit(f'{{"name": "Iteration Start: PyTorch Profiler", "ph": "i", "s": "g", "pid": "Traces", '
         f'"tid": "Trace PyTorch Profiler", "ts": {_us(min(starts), base, ns_precision)}}}')
    emit(f'{{"name": "Record Window End", "ph": "i", "s": "g", "pid": "", "tid": "", '
         f'"ts": {_us(end + 1000, base, ns_precision)}}}')
    header = '{\n  "schemaVersion": 1,\n  "deviceProperties": [\n  ],\n'
    header += '  "displayTimeUnit": "ms",\n'
    if ns_precision:
        header += f'  "baseTimeNanoseconds": {base},\n'
    with open(path, "w") as out:
        out.write(header + '  "traceEvents": [\n  ' + ",\n  ".join(lines) + f'\n  ],\n  "traceName": "{path}"\n}}')
