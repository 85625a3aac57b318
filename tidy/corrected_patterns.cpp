#include "tidy/corrected_patterns.h"

#include "core/error.h"
#include "tidy/torchtidy_patterns.h"

namespace kiln::tidy {
namespace {

constexpr int kFirstTF32Arch = 80;  // sm_80 (Ampere)

Reason no_gpu_work(const TidyContext& context, const char* consequence) {
  if (context.gpu_activity) return std::nullopt;
  return str_cat("the trace has no GPU work: ", consequence);
}

class FP32MatMulOnTF32GPUPattern final : public Pattern {
 public:
  std::string name() const override { return "FP32 MatMul On TF32 GPU Pattern"; }
  std::string description() const override {
    return "Float32 matrix products ran on a GPU that supports TF32 with TF32 off. Where float32's full "
           "precision is not needed, set 'torch.backends.cuda.matmul.allow_tf32 = True'.";
  }
  std::string url() const override {
    return "https://pytorch.org/docs/stable/notes/cuda.html#tensorfloat-32-tf32-on-ampere-devices";
  }
  Reason skip(const TidyContext& context) const override {
    if (Reason reason =
            no_gpu_work(context, "TF32 is a GPU format (sm_80 and newer), nothing on a CPU uses it"))
      return reason;
    for (const int arch : context.cuda_arches) {
      if (arch < kFirstTF32Arch) return str_cat("the trace's GPUs include sm_", arch, ", which has no TF32");
    }
    if (!context.record_shapes) return "recorded without record_shapes: the products' dtypes are unknown";
    return std::nullopt;
  }
  bool match(const TidyContext& context, EventIndex event) override {
    const TraceEvent& op = context.tree.event(event);
    if (!context.is_torch_op(op)) return false;
    if (op.name != "aten::mm" && op.name != "aten::addmm" && op.name != "aten::bmm" &&
        op.name != "aten::baddbmm")
      return false;
    // The matrices are the last two inputs (addmm and baddbmm take the added term first).
    const size_t matrices = op.name == "aten::addmm" || op.name == "aten::baddbmm" ? 1 : 0;
    if (op.input_dtypes.size() < matrices + 2 || op.input_dtypes[matrices] != "float") return false;
    return !context.allow_tf32_cublas(op) && launched_gpu_work(context, event, false);
  }
  std::string report(const TidyContext&, EventIndex) const override { return description(); }
};

class ExtraHostToDeviceCopyPattern final : public Pattern {
 public:
  std::string name() const override { return "Extra Host To Device Copy Pattern"; }
  std::string description() const override {
    return "Filled a CPU tensor and immediately copied it to a GPU. Please create it on the GPU "
           "(device=...).";
  }
  std::string url() const override {
    return "https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html"
           "#create-tensors-directly-on-the-target-device";
  }
  Reason skip(const TidyContext& context) const override {
    if (Reason reason = no_gpu_work(context, "no copy reaches a device")) return reason;
    if (!context.with_stack || !context.record_shapes)
      return "recorded without with_stack or record_shapes (as TorchTidy's rule, which it refines, needs)";
    return std::nullopt;
  }
  bool match(const TidyContext& context, EventIndex event) override {
    const EventIndex copy = extra_copy_of(context, event, /*past_memory_events=*/true);
    return copy != kNoEvent && launched_gpu_work(context, copy, true);
  }
};

}  // namespace

std::vector<std::unique_ptr<Pattern>> corrected_patterns() {
  std::vector<std::unique_ptr<Pattern>> patterns;
  patterns.push_back(std::make_unique<FP32MatMulOnTF32GPUPattern>());
  patterns.push_back(std::make_unique<ExtraHostToDeviceCopyPattern>());
  return patterns;
}

}  // namespace kiln::tidy
