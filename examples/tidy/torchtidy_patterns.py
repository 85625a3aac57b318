"""TorchTidy's patterns written as kiln user patterns: run them with
`kiln tidy TRACE --patterns examples/tidy/torchtidy_patterns.py`; on any trace each matches what
kiln's built-in version matches (tests/python/test_tidy_patterns.py checks it).

They are PyTorch 1.13's rules (torch/profiler/_pattern_matcher.py) as kiln runs them
(tidy/torchtidy_patterns.cpp), flaws included: the same names, advice, skips and traversal order.
NamePattern needs a regular expression, NamePattern(prof, "aten::add"); the others take the
profile alone and are listed in PATTERNS, in TorchTidy's order.
"""
import re

from kiln.tidy import Fix, Pattern

TUNING_GUIDE = "https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html"


def torchtidy_skips_without(recorded, option):
    """TorchTidy's skip for a profile recorded without `option`: the reason, or False."""
    return False if recorded else f"TorchTidy skips it: the profile was recorded without {option}"


def is_dataloader_function(event, function):
    """Whether `event` is the call of `function` in torch/utils/data/dataloader.py."""
    return event.name.startswith("torch/utils/data/dataloader.py") and event.name.endswith(function)


class NamePattern(Pattern):
    """Events whose name contains a match of a regular expression."""

    def __init__(self, prof, name, should_benchmark=False):
        super().__init__(prof, should_benchmark)
        self.name = name
        self.description = f"Matched Name Event: {name}"
        self.regex = re.compile(name)

    def match(self, event):
        return self.regex.search(event.name) is not None


class ExtraCUDACopyPattern(Pattern):
    """A tensor filled (fill_, zero_, normal_, uniform_) and then copied at once by aten::to."""

    name = "Extra CUDA Copy Pattern"
    description = "Filled a CPU tensor and immediately moved it to GPU. Please initalize it on GPU."
    url = f"{TUNING_GUIDE}#create-tensors-directly-on-the-target-device"
    init_ops = {"aten::fill_", "aten::zero_", "aten::normal_", "aten::uniform_"}

    @property
    def skip(self):
        return (torchtidy_skips_without(self.context.with_stack, "with_stack")
                or torchtidy_skips_without(self.context.record_shapes, "record_shapes"))

    def match(self, event):
        # aten::to -> its last child aten::_to_copy -> its last child aten::copy_, same dtype in and out.
        if event.name != "aten::to" or not event.children:
            return False
        to_copy = event.children[-1]
        if to_copy.name != "aten::_to_copy" or not to_copy.children:
            return False
        copy = to_copy.children[-1]
        dtypes = copy.input_dtypes
        if copy.name != "aten::copy_" or len(dtypes) < 2 or dtypes[0] != dtypes[1]:
            return False
        # The call before the aten::to's parent (a memory event counts as one), down its last children
        # to a fill: any level may be the fill (aten::zero_ is one, PyTorch skips fill_ there).
        if event.parent is None:
            return False
        before = self.prev_of(event.parent)
        if before is None:
            return False
        while before.children:
            before = before.children[-1]
            if before.name in self.init_ops:
                return True
        return before.name in self.init_ops

    def fix(self, event):
        return Fix("torch_benchmark", torch_fix="no_copy",
                   what="the copy each chain makes (a new tensor and the copy into it) timed with "
                        "torch.utils.benchmark: creating the tensor where it is used saves it")


class ForLoopIndexingPattern(Pattern):
    """aten::select and the ops after it repeated 10 times or more among siblings: a Python loop
    indexing a tensor."""

    name = "For Loop Indexing Pattern"
    description = "For loop indexing detected. Vectorization recommended."
    repeats = 10

    def __init__(self, prof, should_benchmark=False):
        super().__init__(prof, should_benchmark)
        self.visited = set()  # ids of the selects a matched loop already counted

    def eventTreeTraversal(self):
        # Breadth first, as TorchTidy; each traversal starts with nothing visited (kiln's reset()).
        self.visited = set()
        yield from self.breadth_first()

    def match(self, event):
        if event.name != "aten::select" or event.id in self.visited:
            return False
        _, after = self.siblings_of(event)
        if len(after) <= 1:
            return False
        next_select = next((i for i, sibling in enumerate(after) if sibling.name == "aten::select"), None)
        if next_select is None:
            return False
        # One iteration: this select and the ops up to the next one; count the identical ones after it.
        names = [event.name] + [sibling.name for sibling in after[:next_select]]
        rest = after[next_select:]
        count = 1
        for start in range(0, len(rest), len(names)):
            if [sibling.name for sibling in rest[start:start + len(names)]] != names:
                break
            count += 1
            self.visited.add(rest[start].id)
        return count >= self.repeats


class FP32MatMulPattern(Pattern):
    """aten::mm run with TF32 off, on a PyTorch whose CUDA architectures all have TF32 (none counts)."""

    name = "FP32 MatMul Pattern"
    description = ("You are currently using GPU that supports TF32. Please enable TF32 by setting "
                   "'torch.backends.cuda.matmul.allow_tf32 = True'")
    url = "https://pytorch.org/docs/stable/notes/cuda.html#tensorfloat-32-tf32-on-ampere-devices"

    @property
    def skip(self):
        # TorchTidy's all(arch >= sm_80 ...): true for an empty list (a PyTorch without CUDA).
        for arch in self.context.cuda_arches:
            if arch < 80:
                return f"TorchTidy skips it: the CUDA architectures include sm_{arch} (before Ampere, no TF32)"
        return torchtidy_skips_without(self.context.record_shapes, "record_shapes")

    def match(self, event):
        # context.is_torch_op: an operator or record_function range (a live profile's backend
        # events are not).
        return (self.context.is_torch_op(event) and event.name == "aten::mm"
                and not self.context.allow_tf32_cublas(event))

    def report(self, event):
        return self.description

    def fix(self, event):
        return Fix("torch_benchmark", torch_fix="bf16_autocast",
                   what="each distinct product timed in float32 and under torch.autocast('cpu', "
                        "torch.bfloat16) with torch.utils.benchmark (TF32, TorchTidy's advice, exists only "
                        "on GPUs)")


class OptimizerSingleTensorPattern(Pattern):
    """Adam, AdamW or SGD running their single-tensor implementation (no foreach=True)."""

    name = "Optimizer Single Tensor Pattern"
    description = ("Deteced optimizer running with single tensor implementation. Please enable multi tensor "
                   "implementation by passing 'foreach=True' into optimizer.")

    def match(self, event):
        return event.name.endswith(("_single_tensor_adam", "_single_tensor_sgd", "_single_tensor_adamw"))


class SynchronizedDataLoaderPattern(Pattern):
    """A DataLoader's __iter__ whose _get_iterator does not start with check_worker_number_rationality
    (num_workers=0)."""

    name = "Synchronized DataLoader Pattern"
    description = ("Detected DataLoader running with synchronized implementation. Please enable asynchronous "
                   "dataloading by setting num_workers > 0 when initializing DataLoader.")
    url = f"{TUNING_GUIDE}#enable-async-data-loading-and-augmentation"

    def match(self, event):
        if not is_dataloader_function(event, "__iter__") or not event.children:
            return False
        get_iterator = event.children[0]
        if not is_dataloader_function(get_iterator, "_get_iterator") or not get_iterator.children:
            return False
        return not is_dataloader_function(get_iterator.children[0], "check_worker_number_rationality")


class GradNotSetToNonePattern(Pattern):
    """A zero_grad call that zeroes gradients (aten::zero_ not inside aten::zeros) instead of
    setting them to None."""

    name = "Gradient Set To Zero Instead of None Pattern"
    description = ("Detected gradient set to zero instead of None. Please add 'set_to_none=True' when calling "
                   "zero_grad().")
    url = f"{TUNING_GUIDE}#disable-gradient-calculation-for-validation-or-inference"

    def match(self, event):
        if not event.name.endswith(": zero_grad"):
            return False
        below = list(event.children)
        while below:  # depth first under the call
            sub_event = below.pop()
            if sub_event.name == "aten::zero_" and sub_event.parent.name != "aten::zeros":
                return True
            below.extend(reversed(sub_event.children))
        return False


class Conv2dBiasFollowedByBatchNorm2dPattern(Pattern):
    """aten::conv2d with a bias in a Conv2d module whose next sibling is a BatchNorm2d module."""

    name = "Enabling Bias in Conv2d Followed By BatchNorm Pattern"
    description = "Detected bias enabled in Conv2d that is followed by BatchNorm2d. Please set 'bias=False' in Conv2d."
    url = f"{TUNING_GUIDE}#disable-bias-for-convolutions-directly-followed-by-a-batch-norm"

    @property
    def skip(self):
        return torchtidy_skips_without(self.context.record_shapes, "record_shapes")

    def match(self, event):
        if event.name != "aten::conv2d":
            return False
        dtypes = event.input_dtypes
        if len(dtypes) < 3 or dtypes[2] == "":  # the third input is the bias
            return False
        # The Conv2d module above it, or its root if there is none (TorchTidy's go_up_until).
        module = self.go_up_until(event, lambda e: e.name.startswith("nn.Module: Conv2d"))
        after = self.next_of(module)
        return after is not None and after.name.startswith("nn.Module: BatchNorm2d")


class MatMulDimInFP16Pattern(Pattern):
    """A half or bfloat16 aten::mm, aten::bmm or aten::addmm with an input's last two dimensions not
    all multiples of 8."""

    name = "Matrix Multiplication Dimension Not Aligned Pattern"
    description = "Detected matmul with dimension not aligned. Please use matmul with aligned dimension."
    url = f"{TUNING_GUIDE}#use-mixed-precision-and-amp"
    alignment = 8

    @property
    def skip(self):
        if not self.context.with_stack:
            return ("TorchTidy skips it: the profile was recorded without with_stack (though the rule reads "
                    "no Python frame)")
        return torchtidy_skips_without(self.context.record_shapes, "record_shapes")

    def match(self, event):
        if event.name not in ("aten::mm", "aten::bmm", "aten::addmm") or not event.input_dtypes:
            return False
        if not event.input_dtypes[0].endswith(("c10::BFloat16", "c10::Half")):
            return False
        return any(dim % self.alignment != 0 for shape in event.input_shapes for dim in shape[-2:])

    def fix(self, event):
        return Fix("torch_benchmark", torch_fix="aligned_dims",
                   what="each distinct product timed as recorded and with every dimension padded to a "
                        "multiple of 8 (torch.utils.benchmark)")


# The patterns that take the profile alone, in TorchTidy's order (ForLoopIndexingPattern included,
# as kiln runs it).
PATTERNS = [
    ExtraCUDACopyPattern, ForLoopIndexingPattern, FP32MatMulPattern, OptimizerSingleTensorPattern,
    SynchronizedDataLoaderPattern, GradNotSetToNonePattern, Conv2dBiasFollowedByBatchNorm2dPattern,
    MatMulDimInFP16Pattern,
]
