"""PyTorch's live profiler read into kiln's trace model (kiln.profiler.load_trace(prof) calls this).

    with torch.profiler.profile(record_shapes=True, profile_memory=True, with_stack=True) as prof:
        train_step()
    trace = kiln.profiler.load_trace(prof)       # or kiln.torch_trace.from_torch(prof)

It walks `prof.profiler.kineto_results.experimental_event_tree()` (PyTorch 1.13 and later) and keeps
what the tree holds: ids, parents, thread, ns times, names, input shapes and dtypes, Python frames,
memory events. Nothing is guessed: what the profile did not record is listed in `trace.unavailable`.

This module only reads and builds a trace; it never runs kiln's runtime, so profiling PyTorch and
reading its profile in one process leaves PyTorch's threads and OpenBLAS (which both load as
libopenblas.so.0) as PyTorch set them.
"""
import json as _json
import re as _re

from kiln import _kiln

__all__ = ["from_torch", "torch_facts"]

# PyTorch's own names for what it records (torch._C._profiler._EventType), as kiln's kinds.
_KINDS = {
    "TorchOp": "op",
    "Backend": "op",
    "Allocation": "memory",
    "OutOfMemory": "memory",
    "PyCall": "python",
    "PyCCall": "python",
    "Kineto": "other",
}
# Kineto's category for each, so a live trace and a Kineto file of the same run read alike.
_CATEGORIES = {
    "op": "cpu_op",
    "annotation": "user_annotation",
    "python": "python_function",
    "memory": "cpu_instant_event",
    "other": "",
}
_DEVICE_TYPES = {"cpu": 0, "cuda": 1}  # c10::DeviceType, as Kineto writes "Device Type"


def _tag(event):
    return str(event.tag).rsplit(".", 1)[-1]


def _kineto_results(prof):
    """The profiler's results: torch.profiler.profile holds torch.autograd.profiler.profile in
    .profiler, which holds them in .kineto_results once it has stopped."""
    inner = getattr(prof, "profiler", prof)
    if inner is None:  # a torch.profiler.profile that never started
        raise ValueError("from_torch: the profiler has no results yet (read it after the `with` block "
                         "or after prof.stop())")
    if not hasattr(inner, "kineto_results"):
        raise TypeError(
            "from_torch: expected a torch.profiler.profile or torch.autograd.profiler.profile, got "
            f"{type(prof).__module__}.{type(prof).__name__}")
    results = inner.kineto_results
    if results is None:
        raise ValueError("from_torch: the profiler has no results yet (read it after the `with` block "
                         "or after prof.stop())")
    if not hasattr(results, "experimental_event_tree"):
        raise ValueError("from_torch: this PyTorch's profiler results have no experimental_event_tree() "
                         "(PyTorch 1.13 or later has it); export a Kineto JSON trace and load that instead")
    return inner, results


def torch_facts(config=None):
    """What the running PyTorch says of itself: version, CPU capability in use, threads and
    precision flags (read now: the process that profiled, as it is when the profile is read)."""
    import torch

    facts = {"framework": "torch", "framework_version": str(torch.__version__)}
    show = torch.__config__.show()
    capability = _re.search(r"CPU capability usage:\s*(\S+)", show)
    if capability:
        facts["cpu_capability"] = capability.group(1)
    facts["threads"] = str(torch.get_num_threads())
    facts["interop_threads"] = str(torch.get_num_interop_threads())
    if hasattr(torch, "get_float32_matmul_precision"):
        facts["float32_matmul_precision"] = torch.get_float32_matmul_precision()
    facts["allow_tf32_matmul"] = str(bool(torch.backends.cuda.matmul.allow_tf32)).lower()
    facts["allow_tf32_cudnn"] = str(bool(torch.backends.cudnn.allow_tf32)).lower()
    facts["mkldnn_enabled"] = str(bool(torch.backends.mkldnn.enabled)).lower()
    facts["deterministic_algorithms"] = str(bool(torch.are_deterministic_algorithms_enabled())).lower()
    facts["cuda_available"] = str(bool(torch.cuda.is_available())).lower()
    # What TorchTidy's FP32MatMulPattern reads (empty for a PyTorch built without CUDA).
    facts["cuda_arch_list"] = ",".join(torch.cuda.get_arch_list())
    # The machine as kiln names it: kiln tidy measures fixes only on the CPU a trace was recorded on.
    machine = _kiln.profiler.machine_facts()
    for name in ("cpu", "cpu_extensions", "cores"):
        facts[name] = machine[name]
    if config:
        facts.update(config)
    return facts


def _frame(state):
    return state.file_name, state.line_number, state.function_name


def _describe(event, kind, python_parent):
    """The fields of one event, as kiln's trace_from_events reads them."""
    extra = event.extra_fields
    attributes = {}
    record = {"kind": kind, "name": event.name, "start_ns": event.start_time_ns, "end_ns": event.end_time_ns}
    tag = _tag(event)
    if tag in ("TorchOp", "Backend"):
        inputs = getattr(extra, "inputs", None)
        if inputs is not None:
            record["input_shapes"] = [list(shape) for shape in inputs.shapes]
            record["input_dtypes"] = list(inputs.dtypes)
            if any(inputs.strides):
                attributes["Input Strides"] = _json.dumps([list(stride) for stride in inputs.strides])
        attributes["External id"] = event.correlation_id
        if tag == "TorchOp":
            if extra.sequence_number >= 0:
                attributes["Sequence number"] = extra.sequence_number
            attributes["scope"] = str(extra.scope).rsplit(".", 1)[-1]
            attributes["allow_tf32_cublas"] = str(bool(extra.allow_tf32_cublas)).lower()
    elif tag in ("PyCall", "PyCCall"):
        attributes["Python id"] = event.id
        attributes["Python parent id"] = python_parent if python_parent is not None else "null"
        caller_file, caller_line, caller_function = _frame(extra.caller)
        attributes["caller"] = f"{caller_file}({caller_line}): {caller_function}"
        if tag == "PyCall":
            # The function's own frame: PyTorch names a call "file(line): function" from it.
            record["file"], record["line"], _ = _frame(extra.callsite)
            if extra.module is not None:
                attributes["module_class"] = extra.module.cls_name
            if extra.opt is not None:
                attributes["optimizer"] = "true"
    elif tag in ("Allocation", "OutOfMemory"):
        record["bytes"] = extra.alloc_size
        record["total_bytes"] = extra.total_allocated
        attributes["Total Reserved"] = extra.total_reserved
        device = getattr(extra, "device", None)
        if device is not None:
            attributes["Device Type"] = _DEVICE_TYPES.get(device.type, device.type)
            attributes["Device Id"] = device.index if device.index is not None else -1
        if tag == "Allocation":
            attributes["Addr"] = extra.ptr
        else:
            attributes["out_of_memory"] = "true"
    record["category"] = _CATEGORIES[kind]
    record["attributes"] = {key: str(value) for key, value in attributes.items()}
    return record


def from_torch(prof):
    """A kiln Trace (kiln._kiln.profiler.Trace) of a stopped torch.profiler.profile: every event of
    its event tree with its parent, thread, ns times, inputs' shapes and dtypes, Python frames and
    memory events, and PyTorch's facts. `trace.unavailable` lists what the profile did not record."""
    inner, results = _kineto_results(prof)
    roots = results.experimental_event_tree()
    record_shapes = bool(getattr(inner, "record_shapes", False))
    profile_memory = bool(getattr(inner, "profile_memory", False))
    with_stack = bool(getattr(inner, "with_stack", False))

    events, threads = [], {}
    # Pre-order, iteratively (an event tree can be deeper than Python's recursion limit).
    pending = [(root, 0, None) for root in reversed(roots)]
    while pending:
        event, parent_id, python_parent = pending.pop()
        tag = _tag(event)
        kind = _KINDS.get(tag, "other")
        if tag == "TorchOp" and str(event.extra_fields.scope).endswith("USER_SCOPE"):
            kind = "annotation"  # record_function and ProfilerStep#N (Kineto's user_annotation)
        record = _describe(event, kind, python_parent)
        record["id"] = len(events) + 1
        record["parent_id"] = parent_id
        record["thread"] = threads.setdefault(event.start_tid, len(threads))
        events.append(record)
        child_python_parent = event.id if tag in ("PyCall", "PyCCall") else python_parent
        for child in reversed(event.children):
            pending.append((child, record["id"], child_python_parent))

    unavailable = [
        "events of threads other than the one that started the profiler (PyTorch 1.13's tree has only that thread)"
    ]
    if not with_stack:
        unavailable.append("Python frames (recorded without with_stack)")
    if not record_shapes:
        unavailable.append("input shapes and dtypes (recorded without record_shapes)")
    if not profile_memory:
        unavailable.append("memory events (recorded without profile_memory)")
    config = {"record_shapes": str(record_shapes).lower(), "profile_memory": str(profile_memory).lower(),
              "with_stack": str(with_stack).lower()}
    thread_table = [(tid, "") for tid, _ in sorted(threads.items(), key=lambda item: item[1])]
    return _kiln.profiler.trace_from_events(
        events, thread_table, "torch", torch_facts(config), unavailable,
        ["parents as PyTorch's event tree has them"], record_shapes, profile_memory)
