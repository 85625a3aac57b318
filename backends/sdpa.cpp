#include "backends/sdpa.h"

#include <algorithm>
#include <cmath>
#include <mutex>

#include "backends/selection.h"
#include "core/error.h"
#include "ops/attention.h"
#include "runtime/cpu_info.h"
#include "runtime/threads.h"

namespace kiln::backends::sdpa {
namespace {

const SettingSlot& kernels_slot() {
  static const SettingSlot& slot = find_setting("sdpa_kernels");
  return slot;
}

int choice_of(std::string_view kernel) {
  const std::span<const std::string_view> names = registry_data::kSdpaKernels;
  const auto found = std::find(names.begin(), names.end(), kernel);
  if (found == names.end()) sdpa_kernel_backend(kernel);  // throws, listing the known names
  return static_cast<int>(found - names.begin());
}

// The default list's order, restricted to `chosen`.
std::vector<int> in_default_order(const std::vector<int>& chosen) {
  std::vector<int> ordered;
  for (int choice : priority_list(kernels_slot().row->default_value)) {
    if (std::count(chosen.begin(), chosen.end(), choice)) ordered.push_back(choice);
  }
  return ordered;
}

// An attention request for `params` (a kernel's question) with its output.
struct Question {
  Attributes attributes;
  KernelRequest request;
  std::vector<TensorInfo> outputs;
};

// Fills `q` in place: its request points at its attributes.
void ask(const Params& params, Question& q) {
  const float scale = params.scale.value_or(
      params.query.empty() ? 1.0f
                           : static_cast<float>(1.0 / std::sqrt(static_cast<double>(params.query.back()))));
  const AttentionMask mask = !params.mask                          ? AttentionMask::none
                             : params.mask_dtype == DType::boolean ? AttentionMask::keep
                                                                   : AttentionMask::additive;
  q.attributes = attention_attributes(scale, false, params.is_causal, mask);
  q.request.op.op_type = std::string(kAttentionOp);
  q.request.op.node_name = "scaled_dot_product_attention";
  q.request.op.opset = 1;
  q.request.op.attributes = &q.attributes;
  for (const Shape* shape : {&params.query, &params.key, &params.value})
    q.request.op.inputs.push_back(TensorInfo{params.dtype, *shape, {}});
  if (params.mask) q.request.op.inputs.push_back(TensorInfo{params.mask_dtype, *params.mask, {}});
  // As the planner does: bf16 only where the ISA tier in effect has bf16 dot products.
  q.request.precision = isa_in_effect() >= Isa::avx512_bf16 ? current_settings().precision("matmul_precision")
                                                            : Precision::fp32;
  q.outputs = {TensorInfo{params.dtype, attention_params(q.request.op).output, {}}};
}

}  // namespace

std::vector<std::string> kernels() {
  std::vector<std::string> names;
  for (int choice : priority_list(current_settings().get("sdpa_kernels")))
    names.emplace_back(registry_data::kSdpaKernels[choice]);
  return names;
}

Settings kernels_setting(std::span<const std::string_view> kernels, bool set_priority) {
  std::vector<int> chosen;
  for (std::string_view kernel : kernels) {
    const int choice = choice_of(kernel);
    KILN_CHECK(std::count(chosen.begin(), chosen.end(), choice) == 0, invalid_argument, "attention kernel '",
               kernel, "' is listed twice");
    chosen.push_back(choice);
  }
  return Settings().set(kernels_slot().slot,
                        priority_list_value(set_priority ? chosen : in_default_order(chosen)));
}

void set_enabled(std::string_view kernel, bool enabled) {
  const int choice = choice_of(kernel);
  // The list is read, changed and written back: one change at a time, so two threads switching
  // different kernels both take effect.
  static std::mutex changing;
  const std::lock_guard lock(changing);
  std::vector<int> list = priority_list(global_settings().get("sdpa_kernels"));
  const auto found = std::find(list.begin(), list.end(), choice);
  if (!enabled && found != list.end()) list.erase(found);
  if (enabled && found == list.end()) {
    // Back at its default place: before the first listed kernel that follows it there.
    const std::vector<int> order = priority_list(kernels_slot().row->default_value);
    const auto after = std::find(order.begin(), order.end(), choice);
    auto at = list.end();
    for (auto it = list.begin(); it != list.end(); ++it) {
      if (std::find(after, order.end(), *it) != order.end()) {
        at = it;
        break;
      }
    }
    list.insert(at, choice);
  }
  set_settings(Settings().set(kernels_slot().slot, priority_list_value(list)));
}

bool enabled(std::string_view kernel) {
  const std::vector<int> list = priority_list(current_settings().get("sdpa_kernels"));
  return std::count(list.begin(), list.end(), choice_of(kernel)) > 0;
}

std::vector<std::string> why_not(std::string_view kernel, const Params& params) {
  const int choice = choice_of(kernel);
  Question q;
  try {
    ask(params, q);
  } catch (const Error& error) {
    return {error.what()};
  }
  // Asked alone: the selection's checks (enabled, built, available, deterministic) for this kernel.
  Settings settings = current_settings();
  settings.set(kernels_slot().slot, priority_list_value(std::vector<int>{choice}));
  settings.set(SettingKey("autotune"), 0);  // one kernel asked: nothing to time
  const ScopedIntraOpThreads threads(settings.threads());
  KernelSelection selection = find_kernel(q.request, q.outputs, settings);
  std::vector<std::string> reasons;
  if (selection.kernel == nullptr) {
    for (const Refusal& refusal : selection.decision.refusals) reasons.push_back(refusal.detail);
  }
  return reasons;
}

Tensor attention(const Tensor& query, const Tensor& key, const Tensor& value, const Tensor& mask,
                 bool is_causal, std::optional<float> scale, std::string* kernel) {
  Params params{.query = query.shape(), .key = key.shape(), .value = value.shape(), .dtype = query.dtype()};
  KILN_CHECK(key.dtype() == query.dtype() && value.dtype() == query.dtype(), invalid_argument,
             "attention: query, key and value must have one dtype, got ", dtype_name(query.dtype()), ", ",
             dtype_name(key.dtype()), " and ", dtype_name(value.dtype()));
  if (mask.defined()) {
    params.mask = mask.shape();
    params.mask_dtype = mask.dtype();
  }
  params.is_causal = is_causal;
  params.scale = scale;
  Question q;
  ask(params, q);
  // A call has no plan to remember autotune's choice in: the list's order decides.
  Settings settings = current_settings();
  settings.set(SettingKey("autotune"), 0);
  const ScopedIntraOpThreads threads(settings.threads());
  KernelSelection selection = find_kernel(q.request, q.outputs, settings);
  KILN_CHECK(selection.kernel != nullptr, not_implemented, "no attention kernel of sdpa_kernels (",
             setting_value_text(kernels_slot(), settings.get("sdpa_kernels")),
             ") can run it: ", selection.decision.refusals_text());
  std::vector<Tensor> inputs;
  for (const Tensor* input : {&query, &key, &value, &mask}) {
    if (!input->defined()) continue;
    Tensor contiguous = input->is_contiguous() ? *input : input->clone();
    // Under bf16 precision a kernel may read its operands as bf16 (a plan's Reorder steps make them).
    if (selection.kernel->input_layout(inputs.size()) == Layout::plain_bf16) {
      Tensor converted = Tensor::empty(DType::bf16, contiguous.shape());
      const float* from = contiguous.data<float>();
      BFloat16* to = converted.data<BFloat16>();
      for (int64_t i = 0; i < contiguous.numel(); ++i) to[i] = float_to_bfloat16(from[i]);
      contiguous = converted;
    }
    inputs.push_back(contiguous);
  }
  Tensor output = Tensor::empty(q.outputs[0].dtype, q.outputs[0].shape);
  selection.kernel->run(inputs, std::span(&output, 1));
  if (kernel != nullptr) *kernel = std::string(selection.kernel->name());
  return output;
}

}  // namespace kiln::backends::sdpa
