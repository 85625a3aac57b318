"""What fixing TorchTidy's anti-patterns saves on this CPU, measured with PyTorch itself
(torch.utils.benchmark), for kiln tidy --benchmark on a PyTorch trace. kiln embeds this file and runs
it with Debian's Python (which has torch): kiln links no Python.

    python3 torch_benchmark.py CASES.json RESULTS.json

CASES.json: {"threads": N, "cases": [{"id", "fix", "op", "shapes", "dtypes"}]}, one per distinct
operator call to time; RESULTS.json: {"torch_version", "results": [{"id", "before_us", "after_us"} or
{"id", "error"}]}. The fixes:
  bf16_autocast   a float32 product under torch.autocast("cpu", torch.bfloat16), the CPU's form of
                  TorchTidy's FP32MatMulPattern advice (TF32 exists only on GPUs)
  no_copy         the copy an ExtraCUDACopyPattern chain makes, removed (the tensor made where it is
                  used)
  aligned_dims    a float16/bfloat16 product with every dimension padded to a multiple of 8
"""
import json
import sys

import torch
import torch.utils.benchmark as benchmark

DTYPES = {"float": torch.float32, "double": torch.float64, "c10::Half": torch.float16,
          "c10::BFloat16": torch.bfloat16, "float32": torch.float32, "float16": torch.float16,
          "bfloat16": torch.bfloat16}
MIN_RUN_TIME = 0.2  # seconds each side of a case


def tensors(shapes, dtypes):
    made = []
    for shape, dtype in zip(shapes, dtypes):
        if dtype not in DTYPES:
            raise ValueError(f"dtype '{dtype}' is not one this benchmark makes")
        made.append(torch.randn(shape).to(DTYPES[dtype]) if shape else torch.tensor(1.0, dtype=DTYPES[dtype]))
    return made


# Each product and how many of its inputs are tensors (addmm's and baddbmm's scalars follow them).
PRODUCTS = {"aten::mm": (torch.mm, 2), "aten::bmm": (torch.bmm, 2), "aten::addmm": (torch.addmm, 3),
            "aten::baddbmm": (torch.baddbmm, 3)}


def product(op):
    if op not in PRODUCTS:
        raise ValueError(f"'{op}' is not a product this benchmark times")
    return PRODUCTS[op]


def microseconds(statement, values):
    timer = benchmark.Timer(stmt=statement, globals=values)
    return timer.blocked_autorange(min_run_time=MIN_RUN_TIME).median * 1e6


def padded(shapes):
    return [[(dim + 7) // 8 * 8 for dim in shape] for shape in shapes]


def measure(case):
    operands = case["shapes"]
    if case["fix"] == "bf16_autocast":
        function, count = product(case["op"])
        values = {"torch": torch, "f": function, "args": tensors(operands[:count], case["dtypes"])}
        before = microseconds("f(*args)", values)
        after = microseconds("with torch.autocast('cpu', dtype=torch.bfloat16):\n    f(*args)", values)
        return before, after
    if case["fix"] == "no_copy":
        # What aten::_to_copy does: a new tensor, and the copy into it.
        source = tensors(operands[:1], case["dtypes"][:1])[0]
        return microseconds("torch.empty_like(source).copy_(source)", {"torch": torch, "source": source}), 0.0
    if case["fix"] == "aligned_dims":
        function, count = product(case["op"])
        before = microseconds("f(*args)", {"f": function, "args": tensors(operands[:count], case["dtypes"])})
        after = microseconds("f(*args)", {"f": function, "args": tensors(padded(operands[:count]), case["dtypes"])})
        return before, after
    raise ValueError(f"unknown fix '{case['fix']}'")


def main():
    with open(sys.argv[1]) as file:
        request = json.load(file)
    if request.get("threads"):
        torch.set_num_threads(int(request["threads"]))
    results = []
    for case in request["cases"]:
        try:
            before, after = measure(case)
            results.append({"id": case["id"], "before_us": before, "after_us": after})
        except (RuntimeError, ValueError, TypeError, IndexError) as error:
            results.append({"id": case["id"], "error": str(error).splitlines()[0]})
    with open(sys.argv[2], "w") as file:
        json.dump({"torch_version": str(torch.__version__), "results": results}, file)


if __name__ == "__main__":
    main()
