"""A validator of Chrome's Trace Event Format as Perfetto and chrome://tracing read it, for the traces
kiln writes: the top-level object, the fields each phase needs, non-negative durations, integer pid
and tid, unique ids with parents that exist, thread names, and proper nesting of complete events
per thread. Also reads a trace back into an event tree, for round trips.

    problems = validate(json.load(open(path)))   # [] when the trace is valid
"""
import json

_METADATA_NAMES = {"process_name", "thread_name", "process_sort_index", "thread_sort_index", "process_labels"}


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value):
    return (isinstance(value, (int, float))) and not isinstance(value, bool)


def to_ns(microseconds):
    """A trace timestamp (µs, three decimals in kiln's traces) as integer ns."""
    return round(microseconds * 1000)


def validate(trace):
    problems = []
    if not isinstance(trace, dict):
        return [f"top level is {type(trace).__name__}, expected an object"]
    if not _is_int(trace.get("schemaVersion")):
        problems.append("schemaVersion missing or not an integer")
    if trace.get("displayTimeUnit") not in ("ms", "ns"):
        problems.append(f"displayTimeUnit is {trace.get('displayTimeUnit')!r}, expected 'ms' or 'ns'")
    events = trace.get("traceEvents")
    if not isinstance(events, list):
        return problems + ["traceEvents missing or not a list"]

    ids = {}
    named_threads = set()
    complete = {}  # (pid, tid) -> [(start_ns, end_ns, id)]
    flows = {}
    for index, event in enumerate(events):
        where = f"event {index}"
        if not isinstance(event, dict):
            problems.append(f"{where}: not an object")
            continue
        phase = event.get("ph")
        where = f"event {index} ({phase} {event.get('name')!r})"
        if not isinstance(event.get("name"), str):
            problems.append(f"{where}: name missing or not a string")
        if not _is_int(event.get("pid")):
            problems.append(f"{where}: pid missing or not an integer")
        if phase in ("X", "i", "I", "s", "t", "f", "B", "E") and not _is_int(event.get("tid")):
            problems.append(f"{where}: tid missing or not an integer")
        if phase != "M" and not (_is_number(event.get("ts")) and event["ts"] >= 0):
            problems.append(f"{where}: ts missing or negative")
        if phase == "X":
            if not (_is_number(event.get("dur")) and event["dur"] >= 0):
                problems.append(f"{where}: dur missing or negative")
                continue
            args = event.get("args")
            if not isinstance(args, dict):
                problems.append(f"{where}: args missing")
                continue
            event_id, parent_id = args.get("id"), args.get("parent_id")
            if not (_is_int(event_id) and event_id > 0):
                problems.append(f"{where}: args.id missing or not a positive integer")
            elif event_id in ids:
                problems.append(f"{where}: args.id {event_id} is not unique")
            if not (_is_int(parent_id) and parent_id >= 0):
                problems.append(f"{where}: args.parent_id missing or negative")
            start = to_ns(event["ts"])
            ids[event_id] = (event["pid"], event.get("tid"), start, start + to_ns(event["dur"]), parent_id)
            complete.setdefault((event["pid"], event.get("tid")), []).append((start, start + to_ns(event["dur"]), event_id))
        elif phase in ("i", "I"):
            if event.get("s", "t") not in ("g", "p", "t"):
                problems.append(f"{where}: scope s must be g, p or t")
            args = event.get("args", {})
            if "id" in args:
                if not (_is_int(args["id"]) and args["id"] > 0) or args["id"] in ids:
                    problems.append(f"{where}: args.id not a unique positive integer")
                ids[args["id"]] = (event["pid"], event.get("tid"), to_ns(event["ts"]), to_ns(event["ts"]),
                                   args.get("parent_id", 0))
        elif phase == "M":
            if event.get("name") not in _METADATA_NAMES:
                problems.append(f"{where}: unknown metadata name")
            args = event.get("args")
            if event.get("name") in ("process_name", "thread_name") and not (
                    isinstance(args, dict) and isinstance(args.get("name"), str)):
                problems.append(f"{where}: args.name missing")
            if event.get("name") == "thread_name":
                if not _is_int(event.get("tid")):
                    problems.append(f"{where}: tid missing or not an integer")
                named_threads.add((event.get("pid"), event.get("tid")))
        elif phase == "C":
            args = event.get("args")
            if not (isinstance(args, dict) and args and all(_is_number(v) for v in args.values())):
                problems.append(f"{where}: a counter needs numeric args")
        elif phase in ("s", "t", "f"):
            if "id" not in event or not isinstance(event.get("cat"), str):
                problems.append(f"{where}: a flow event needs id and cat")
            flows.setdefault(event.get("id"), []).append(phase)
        else:
            problems.append(f"{where}: phase {phase!r} is not one kiln writes")

    for key in complete:
        if key not in named_threads:
            problems.append(f"thread {key[1]} of process {key[0]} has no thread_name metadata event")
    for event_id, (pid, tid, start, end, parent_id) in ids.items():
        if parent_id == 0:
            continue
        if parent_id not in ids:
            problems.append(f"event {event_id}: parent {parent_id} is not in the trace")
            continue
        parent = ids[parent_id]
        if (parent[0], parent[1]) == (pid, tid) and not (parent[2] <= start and end <= parent[3]):
            problems.append(f"event {event_id}: outside its parent {parent_id} on the same thread")
    # Complete events on one thread nest: each starts after the enclosing one ends or ends inside it.
    for (pid, tid), spans in complete.items():
        stack = []
        for start, end, event_id in sorted(spans, key=lambda s: (s[0], -s[1])):
            # The enclosing event ended before this one starts (an empty event at its very end nests).
            while stack and stack[-1][1] <= start and not end <= stack[-1][1]:
                stack.pop()
            if stack and end > stack[-1][1]:
                problems.append(f"thread {tid}: event {event_id} overlaps event {stack[-1][2]} without nesting")
            stack.append((start, end, event_id))
    for flow_id, phases in flows.items():
        if phases.count("s") != 1 or phases.count("f") != 1:
            problems.append(f"flow {flow_id}: expected one start and one finish, got {phases}")
    return problems


def load_tree(path):
    """{id: (parent_id, name, kind, tid, start_ns, end_ns)} of a kiln trace's events (complete and
    memory events), timestamps in ns from the trace's first event."""
    with open(path) as file:
        trace = json.load(file)
    tree = {}
    for event in trace["traceEvents"]:
        if event["ph"] not in ("X", "i"):
            continue
        args = event["args"]
        start = to_ns(event["ts"])
        end = start + to_ns(event.get("dur", 0))
        tree[args["id"]] = (args["parent_id"], event["name"], args["kind"], event["tid"], start, end)
    return tree
