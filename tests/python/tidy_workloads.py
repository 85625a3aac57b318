"""PyTorch runs made to show each TorchTidy pattern (torch.profiler._pattern_matcher, PyTorch 1.13),
a clean one that shows none and a mixed one that shows all: profiled in the test process with
with_stack and record_shapes, as TorchTidy needs.

Each workload's docstring says which pattern it is for; the tests check that TorchTidy finds it there,
so a workload that stopped showing its pattern fails instead of passing vacuously.
"""
import torch
import torch.profiler


def profiled(workload, profile_memory=False):
    """Without memory events by default: TorchTidy takes a memory event between two calls for the
    previous or next call, so a tensor freed at the wrong moment hides a match (docs/tidy.md), and
    what a workload shows would depend on when Python frees. test_tidy.py also compares kiln with
    TorchTidy on runs with memory events."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], with_stack=True,
                                record_shapes=True, profile_memory=profile_memory) as prof:
        workload()
    return prof


def extra_copy():
    """Extra CUDA Copy Pattern: a filled tensor copied at once (on a CPU: .to(copy=True)); the
    float64 conversion is not a match (copy_'s dtypes differ)."""
    for _ in range(3):
        filled = torch.zeros(64, 64)
        filled.to("cpu", copy=True)
    torch.ones(8).to(torch.float64)


def for_loop_indexing():
    """For Loop Indexing Pattern: a tensor filled row by row in a Python loop."""
    rows = torch.empty(20, 8)
    for i in range(20):
        rows[i] = i


def fp32_matmul():
    """FP32 MatMul Pattern: float32 aten::mm (on a CPU-only PyTorch it fires on every one)."""
    a, b = torch.randn(16, 32), torch.randn(32, 8)
    for _ in range(4):
        torch.mm(a, b)


def optimizer_single_tensor():
    """Optimizer Single Tensor Pattern: Adam without foreach."""
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 4, bias=False)
    optimizer = torch.optim.Adam(model.parameters())
    for _ in range(2):
        model(torch.randn(2, 4)).sum().backward()
        optimizer.step()


def synchronized_dataloader():
    """Synchronized DataLoader Pattern: a DataLoader with num_workers=0."""
    data = torch.utils.data.TensorDataset(torch.randn(8, 2))
    for _ in torch.utils.data.DataLoader(data, batch_size=4):
        pass


def grad_set_to_zero():
    """Gradient Set To Zero Instead of None Pattern: zero_grad() without set_to_none=True."""
    model = torch.nn.Conv2d(1, 1, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, foreach=True)
    model(torch.randn(1, 1, 2, 2)).sum().backward()
    optimizer.zero_grad()


def conv_bias_before_batchnorm():
    """Enabling Bias in Conv2d Followed By BatchNorm Pattern: the first conv has a bias, the second not."""
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
                                torch.nn.Conv2d(4, 4, 3, bias=False), torch.nn.BatchNorm2d(4)).eval()
    with torch.no_grad():
        for _ in range(2):
            model(torch.randn(1, 3, 8, 8))


def unaligned_bf16_matmul():
    """Matrix Multiplication Dimension Not Aligned Pattern: bfloat16 products, one with dims not a
    multiple of 8."""
    torch.mm(torch.randn(10, 12).bfloat16(), torch.randn(12, 16).bfloat16())
    torch.mm(torch.randn(16, 16).bfloat16(), torch.randn(16, 8).bfloat16())


def clean():
    """None: no bias before BatchNorm, foreach SGD, set_to_none, vectorized fill, no products."""
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, bias=False), torch.nn.BatchNorm2d(4), torch.nn.ReLU())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, foreach=True)
    for _ in range(2):
        model(torch.randn(2, 3, 8, 8)).sum().backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    rows = torch.empty(20, 8)
    rows[:] = torch.arange(20.0).unsqueeze(1)


# workload -> the pattern (TorchTidy's name) it is made to show
WORKLOADS = {
    extra_copy: "Extra CUDA Copy Pattern",
    for_loop_indexing: "For Loop Indexing Pattern",
    fp32_matmul: "FP32 MatMul Pattern",
    optimizer_single_tensor: "Optimizer Single Tensor Pattern",
    synchronized_dataloader: "Synchronized DataLoader Pattern",
    grad_set_to_zero: "Gradient Set To Zero Instead of None Pattern",
    conv_bias_before_batchnorm: "Enabling Bias in Conv2d Followed By BatchNorm Pattern",
    unaligned_bf16_matmul: "Matrix Multiplication Dimension Not Aligned Pattern",
}


def mixed():
    """All of the above in one run, each inside a record_function range."""
    for workload in WORKLOADS:
        with torch.profiler.record_function(workload.__name__):
            workload()
