#include "tidy/torchtidy_patterns.h"

#include <algorithm>
#include <regex>
#include <unordered_map>
#include <unordered_set>

#include "core/error.h"

namespace kiln::tidy {
namespace {

constexpr const char* kTuningGuide = "https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html";

Reason torchtidy_skips_without(bool recorded, const char* option) {
  if (recorded) return std::nullopt;
  return str_cat("TorchTidy skips it: the profile was recorded without ", option);
}

Reason needs_python_events(const TidyContext& context, const char* what) {
  if (context.with_stack) return std::nullopt;
  return str_cat("the trace has no Python events (recorded without with_stack): the rule looks for ", what);
}

const std::string& name_of(const TidyContext& context, EventIndex index) {
  return context.tree.event(index).name;
}

class NamePattern final : public Pattern {
 public:
  explicit NamePattern(const std::string& regex) : text_(regex) {
    try {
      regex_ = std::regex(regex, std::regex::ECMAScript | std::regex::optimize);
    } catch (const std::regex_error& error) {
      fail(ErrorKind::invalid_argument, "NamePattern: '", regex, "' is not a regular expression (",
           error.what(), ")");
    }
  }
  std::string name() const override { return text_; }
  std::string description() const override { return "Matched Name Event: " + text_; }
  bool match(const TidyContext& context, EventIndex event) override {
    // Names repeat (every aten::add ...): search each distinct one once.
    const std::string& name = name_of(context, event);
    const auto [it, inserted] = seen_.try_emplace(name, false);
    if (inserted) it->second = std::regex_search(name, regex_);
    return it->second;
  }

 private:
  std::string text_;
  std::regex regex_;
  std::unordered_map<std::string, bool> seen_;
};

class ExtraCUDACopyPattern final : public Pattern {
 public:
  std::string name() const override { return "Extra CUDA Copy Pattern"; }
  Fix fix(const TidyContext&, EventIndex) const override {
    return {Fix::Kind::torch_benchmark,
            {},
            {},
            "no_copy",
            "the copy each chain makes (a new tensor and the copy into it) timed with torch.utils.benchmark: "
            "creating the tensor where it is used saves it"};
  }
  std::string description() const override {
    return "Filled a CPU tensor and immediately moved it to GPU. Please initalize it on GPU.";
  }
  std::string url() const override {
    return str_cat(kTuningGuide, "#create-tensors-directly-on-the-target-device");
  }
  Reason skip(const TidyContext& context) const override {
    if (Reason reason = torchtidy_skips_without(context.with_stack, "with_stack")) return reason;
    return torchtidy_skips_without(context.record_shapes, "record_shapes");
  }
  Reason caveat(const TidyContext& context) const override {
    std::string flaws;
    if (!context.gpu_activity) {
      flaws =
          "the trace has no GPU work, so every match is a copy from host to host (e.g. .to(..., copy=True) "
          "of "
          "a tensor just filled): the rule never checks where the copy goes";
    }
    if (context.trace.memory_recorded) {
      // profile_memory: a tensor freed between the fill and the copy is a memory event between them.
      flaws +=
          str_cat(flaws.empty() ? "" : "; ",
                  "a tensor freed between the fill and the copy hides the fill (the rule takes the memory "
                  "event for the previous call)");
    }
    if (flaws.empty()) return std::nullopt;
    return flaws +
           ". 'Extra Host To Device Copy Pattern' requires the copy to reach a GPU and looks past memory "
           "events";
  }
  bool match(const TidyContext& context, EventIndex event) override {
    return extra_copy_of(context, event) != kNoEvent;
  }
};

class ForLoopIndexingPattern final : public Pattern {
 public:
  std::string name() const override { return "For Loop Indexing Pattern"; }
  std::string description() const override {
    return "For loop indexing detected. Vectorization recommended.";
  }
  Reason caveat(const TidyContext&) const override {
    return "TorchTidy's report_all_anti_patterns leaves this pattern out (commented out in 1.13); kiln runs "
           "it "
           "like the others";
  }
  Traversal traversal() const override { return Traversal::breadth_first; }
  void reset() override { visited_.clear(); }
  bool match(const TidyContext& context, EventIndex event) override {
    if (name_of(context, event) != "aten::select" || visited_.count(event) != 0) return false;
    const std::span<const EventIndex> siblings = context.tree.siblings(event);
    const std::span<const EventIndex> next = siblings.subspan(context.tree.position(event) + 1);
    if (next.size() <= 1) return false;
    // The ops from this select to the next one, then as many repeats of the same names as follow.
    const auto next_select = std::find_if(next.begin(), next.end(), [&](EventIndex sibling) {
      return name_of(context, sibling) == "aten::select";
    });
    if (next_select == next.end()) return false;
    const size_t length = static_cast<size_t>(next_select - next.begin()) + 1;
    const auto same_names = [&](std::span<const EventIndex> chunk) {
      if (chunk.size() != length) return false;
      if (name_of(context, chunk[0]) != name_of(context, event)) return false;
      for (size_t i = 1; i < length; ++i) {
        if (name_of(context, chunk[i]) != name_of(context, next[i - 1])) return false;
      }
      return true;
    };
    const std::span<const EventIndex> repeats = next.subspan(length - 1);
    int repeat_count = 1;
    for (size_t i = 0; i < repeats.size(); i += length) {
      if (!same_names(repeats.subspan(i, std::min(length, repeats.size() - i)))) break;
      ++repeat_count;
      visited_.insert(repeats[i]);
    }
    return repeat_count >= kRepeats;
  }

 private:
  static constexpr int kRepeats = 10;
  std::unordered_set<EventIndex> visited_;
};

class FP32MatMulPattern final : public Pattern {
 public:
  std::string name() const override { return "FP32 MatMul Pattern"; }
  // On a CPU the fix is bf16: TF32, TorchTidy's advice, exists only on GPUs.
  Fix fix(const TidyContext&, EventIndex) const override {
    return {Fix::Kind::torch_benchmark,
            {},
            {},
            "bf16_autocast",
            "each distinct product timed in float32 and under torch.autocast('cpu', torch.bfloat16) with "
            "torch.utils.benchmark (TF32, TorchTidy's advice, exists only on GPUs)"};
  }
  std::string description() const override {
    return "You are currently using GPU that supports TF32. Please enable TF32 by setting "
           "'torch.backends.cuda.matmul.allow_tf32 = True'";
  }
  std::string url() const override {
    return "https://pytorch.org/docs/stable/notes/cuda.html#tensorfloat-32-tf32-on-ampere-devices";
  }
  Reason skip(const TidyContext& context) const override {
    // TorchTidy: all(int(arch[3:]) >= 80 for arch in torch.cuda.get_arch_list()), true for an empty list.
    for (const int arch : context.cuda_arches) {
      if (arch < 80)
        return str_cat("TorchTidy skips it: the CUDA architectures include sm_", arch,
                       " (before Ampere, no TF32)");
    }
    return torchtidy_skips_without(context.record_shapes, "record_shapes");
  }
  Reason caveat(const TidyContext& context) const override {
    if (!context.gpu_activity) {
      return "the trace has no GPU work, yet the rule fires on every aten::mm: a PyTorch built without CUDA "
             "has an empty architecture list, which TorchTidy's all(...) takes for a TF32 GPU. TF32 is a GPU "
             "format (sm_80 and newer); nothing on the CPU uses it. The rule never reads the dtype either "
             "(bfloat16 and half products match). 'FP32 MatMul On TF32 GPU Pattern' is the corrected check";
    }
    return "the rule checks aten::mm only and never reads its dtype: aten::addmm, aten::bmm and "
           "aten::baddbmm run "
           "on cuBLAS with TF32 too, bfloat16 and half products match ('FP32 MatMul On TF32 GPU Pattern' "
           "counts float32 products of all four)";
  }
  bool match(const TidyContext& context, EventIndex event) override {
    const TraceEvent& op = context.tree.event(event);
    return context.is_torch_op(op) && op.name == "aten::mm" && !context.allow_tf32_cublas(op);
  }
  std::string report(const TidyContext&, EventIndex) const override { return description(); }
};

class OptimizerSingleTensorPattern final : public Pattern {
 public:
  std::string name() const override { return "Optimizer Single Tensor Pattern"; }
  std::string description() const override {
    return "Deteced optimizer running with single tensor implementation. Please enable multi tensor "
           "implementation by passing 'foreach=True' into optimizer.";
  }
  Reason cannot_see(const TidyContext& context) const override {
    return needs_python_events(context, "the optimizers' Python functions");
  }
  bool match(const TidyContext& context, EventIndex event) override {
    const std::string& name = name_of(context, event);
    for (const char* suffix : {"_single_tensor_adam", "_single_tensor_sgd", "_single_tensor_adamw"}) {
      if (name.ends_with(suffix)) return true;
    }
    return false;
  }
};

class SynchronizedDataLoaderPattern final : public Pattern {
 public:
  std::string name() const override { return "Synchronized DataLoader Pattern"; }
  std::string description() const override {
    return "Detected DataLoader running with synchronized implementation. Please enable asynchronous "
           "dataloading by setting num_workers > 0 when initializing DataLoader.";
  }
  std::string url() const override {
    return str_cat(kTuningGuide, "#enable-async-data-loading-and-augmentation");
  }
  Reason cannot_see(const TidyContext& context) const override {
    return needs_python_events(context, "DataLoader's Python functions");
  }
  bool match(const TidyContext& context, EventIndex event) override {
    const auto is_dataloader_function = [&](EventIndex index, std::string_view function) {
      const std::string& name = name_of(context, index);
      return name.starts_with("torch/utils/data/dataloader.py") && name.ends_with(function);
    };
    if (!is_dataloader_function(event, "__iter__")) return false;
    std::span<const EventIndex> below = context.tree.children(event);
    if (below.empty() || !is_dataloader_function(below[0], "_get_iterator")) return false;
    below = context.tree.children(below[0]);
    return !below.empty() && !is_dataloader_function(below[0], "check_worker_number_rationality");
  }
};

class GradNotSetToNonePattern final : public Pattern {
 public:
  std::string name() const override { return "Gradient Set To Zero Instead of None Pattern"; }
  std::string description() const override {
    return "Detected gradient set to zero instead of None. Please add 'set_to_none=True' when calling "
           "zero_grad().";
  }
  std::string url() const override {
    return str_cat(kTuningGuide, "#disable-gradient-calculation-for-validation-or-inference");
  }
  Reason cannot_see(const TidyContext& context) const override {
    return needs_python_events(context, "zero_grad's Python call");
  }
  Reason caveat(const TidyContext&) const override {
    return "its url points at the tuning guide's section on disabling gradients for validation, not at "
           "zero_grad(set_to_none=True) (\"#use-parameter-grad-none-instead-of-model-zero-grad-or-optimizer-"
           "zero-grad\")";
  }
  bool match(const TidyContext& context, EventIndex event) override {
    if (!name_of(context, event).ends_with(": zero_grad")) return false;
    const std::span<const EventIndex> below = context.tree.children(event);
    for (const EventIndex sub_event : context.tree.depth_first(below)) {
      if (name_of(context, sub_event) == "aten::zero_" &&
          name_of(context, context.tree.parent(sub_event)) != "aten::zeros")
        return true;
    }
    return false;
  }
};

class Conv2dBiasFollowedByBatchNorm2dPattern final : public Pattern {
 public:
  std::string name() const override { return "Enabling Bias in Conv2d Followed By BatchNorm Pattern"; }
  std::string description() const override {
    return "Detected bias enabled in Conv2d that is followed by BatchNorm2d. Please set 'bias=False' in "
           "Conv2d.";
  }
  std::string url() const override {
    return str_cat(kTuningGuide, "#disable-bias-for-convolutions-directly-followed-by-a-batch-norm");
  }
  Reason skip(const TidyContext& context) const override {
    return torchtidy_skips_without(context.record_shapes, "record_shapes");
  }
  Reason cannot_see(const TidyContext& context) const override {
    return needs_python_events(context, "the nn.Module events of Conv2d and BatchNorm2d");
  }
  Reason caveat(const TidyContext& context) const override {
    if (!context.trace.memory_recorded) return std::nullopt;
    return "with memory events, a tensor freed between the Conv2d and the BatchNorm2d module calls hides the "
           "pair (the rule takes the memory event for the next call)";
  }
  bool match(const TidyContext& context, EventIndex event) override {
    const TraceEvent& conv = context.tree.event(event);
    if (conv.name != "aten::conv2d") return false;
    if (conv.input_dtypes.size() < 3 || conv.input_dtypes[2].empty()) return false;
    // TorchTidy's go_up_until: stops at the first Conv2d module above, or at the root if none is.
    EventIndex module = event;
    while (context.tree.parent(module) != kNoEvent &&
           !name_of(context, module).starts_with("nn.Module: Conv2d"))
      module = context.tree.parent(module);
    const EventIndex next = context.tree.next(module);
    return next != kNoEvent && name_of(context, next).starts_with("nn.Module: BatchNorm2d");
  }
};

class MatMulDimInFP16Pattern final : public Pattern {
 public:
  std::string name() const override { return "Matrix Multiplication Dimension Not Aligned Pattern"; }
  Fix fix(const TidyContext&, EventIndex) const override {
    return {Fix::Kind::torch_benchmark,
            {},
            {},
            "aligned_dims",
            "each distinct product timed as recorded and with every dimension padded to a multiple of 8 "
            "(torch.utils.benchmark)"};
  }
  std::string description() const override {
    return "Detected matmul with dimension not aligned. Please use matmul with aligned dimension.";
  }
  std::string url() const override { return str_cat(kTuningGuide, "#use-mixed-precision-and-amp"); }
  Reason skip(const TidyContext& context) const override {
    if (!context.with_stack)
      return "TorchTidy skips it: the profile was recorded without with_stack (though the rule reads no "
             "Python "
             "frame)";
    return torchtidy_skips_without(context.record_shapes, "record_shapes");
  }
  bool match(const TidyContext& context, EventIndex event) override {
    const TraceEvent& op = context.tree.event(event);
    if (op.name != "aten::mm" && op.name != "aten::bmm" && op.name != "aten::addmm") return false;
    if (op.input_dtypes.empty()) return false;
    const std::string& dtype = op.input_dtypes[0];
    if (!dtype.ends_with("c10::BFloat16") && !dtype.ends_with("c10::Half")) return false;
    // Every input's last two dims a multiple of 8.
    for (const Shape& shape : op.input_shapes) {
      for (size_t i = shape.size() >= 2 ? shape.size() - 2 : 0; i < shape.size(); ++i) {
        if (shape[i] % kAlignment != 0) return true;
      }
    }
    return false;
  }

 private:
  static constexpr int64_t kAlignment = 8;
};

}  // namespace

std::unique_ptr<Pattern> name_pattern(const std::string& regex) {
  return std::make_unique<NamePattern>(regex);
}

std::vector<std::unique_ptr<Pattern>> torchtidy_patterns() {
  std::vector<std::unique_ptr<Pattern>> patterns;
  patterns.push_back(std::make_unique<ExtraCUDACopyPattern>());
  patterns.push_back(std::make_unique<ForLoopIndexingPattern>());
  patterns.push_back(std::make_unique<FP32MatMulPattern>());
  patterns.push_back(std::make_unique<OptimizerSingleTensorPattern>());
  patterns.push_back(std::make_unique<SynchronizedDataLoaderPattern>());
  patterns.push_back(std::make_unique<GradNotSetToNonePattern>());
  patterns.push_back(std::make_unique<Conv2dBiasFollowedByBatchNorm2dPattern>());
  patterns.push_back(std::make_unique<MatMulDimInFP16Pattern>());
  return patterns;
}

EventIndex extra_copy_of(const TidyContext& context, EventIndex to, bool past_memory_events) {
  const EventTree& tree = context.tree;
  if (tree.event(to).name != "aten::to") return kNoEvent;
  const auto last_child = [&](EventIndex index) {
    const std::span<const EventIndex> below = tree.children(index);
    return below.empty() ? kNoEvent : below.back();
  };
  const EventIndex to_copy = last_child(to);
  if (to_copy == kNoEvent || tree.event(to_copy).name != "aten::_to_copy") return kNoEvent;
  const EventIndex copy = last_child(to_copy);
  if (copy == kNoEvent || tree.event(copy).name != "aten::copy_") return kNoEvent;
  const std::vector<std::string>& dtypes = tree.event(copy).input_dtypes;
  if (dtypes.size() < 2 || dtypes[0] != dtypes[1]) return kNoEvent;
  // Up one level, back one sibling, then down through last children to a fill.
  const EventIndex parent = tree.parent(to);
  if (parent == kNoEvent) return kNoEvent;
  EventIndex event = tree.previous(parent);
  while (past_memory_events && event != kNoEvent && tree.event(event).kind == EventKind::memory)
    event = tree.previous(event);
  if (event == kNoEvent) return kNoEvent;
  static const std::string kInitOps[] = {"aten::fill_", "aten::zero_", "aten::normal_", "aten::uniform_"};
  const auto is_init = [&](EventIndex index) {
    return std::find(std::begin(kInitOps), std::end(kInitOps), tree.event(index).name) != std::end(kInitOps);
  };
  for (EventIndex below = last_child(event); below != kNoEvent; below = last_child(below)) {
    // aten::zero_ may be the fill itself (PyTorch skips fill_ there), so any level can end it.
    if (is_init(below)) return copy;
    event = below;
  }
  return is_init(event) ? copy : kNoEvent;
}

bool launched_gpu_work(const TidyContext& context, EventIndex op, bool copy_only) {
  for (const EventIndex below : context.tree.depth_first(context.tree.children(op))) {
    const TraceEvent& event = context.tree.event(below);
    if (!is_gpu_work(event)) continue;
    // A copy: Kineto's gpu_memcpy ("Memcpy HtoD ..."), or the CUDA call that started it (cudaMemcpyAsync).
    if (!copy_only || event.category == "gpu_memcpy" || event.name.starts_with("cudaMemcpy")) return true;
  }
  return false;
}

}  // namespace kiln::tidy
