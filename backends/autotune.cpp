#include "backends/autotune.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string_view>

#include "backends/selection.h"
#include "runtime/parallel.h"

namespace kiln {
namespace {

// Runs per candidate after one warm-up; the minimum is kept (noise only ever adds time).
constexpr int kTimedRuns = 3;

std::string describe_attribute(const Attribute& attribute) {
  switch (attribute.type) {
    case Attribute::Type::f:
      return str_cat(attribute.f);
    case Attribute::Type::i:
      return str_cat(attribute.i);
    case Attribute::Type::s:
      return attribute.s;
    case Attribute::Type::floats: {
      std::string text;
      for (float value : attribute.floats) text += str_cat(value, ",");
      return text;
    }
    case Attribute::Type::ints:
      return shape_to_compact_string(attribute.ints);
    default:
      return attribute_type_name(attribute.type).data();  // tensors and graphs: not tuned by value
  }
}

// A 64-bit digest of a constant's bytes, in hex: two weights tensors that differ differ here but
// for a collision (a 2^-64 chance, which would reuse one node's timing for the other's).
std::string content_digest(const Tensor& value) {
  const Tensor contiguous = value.is_contiguous() ? value : value.clone();
  const std::string_view bytes(static_cast<const char*>(contiguous.raw_data()), contiguous.nbytes());
  char text[17];
  std::snprintf(text, sizeof text, "%016zx", std::hash<std::string_view>{}(bytes));
  return text;
}

// Writes `sweep` on every intra-op thread, so the caches (each core's and the shared one, up to the
// sweep's size) hold nothing a kernel about to run had left in them.
void evict_caches(std::span<char> sweep) {
  constexpr int64_t kLine = 64;
  const int64_t lines = static_cast<int64_t>(sweep.size()) / kLine;
  parallel_for(0, lines, kParallelMinWork, [&](int64_t begin, int64_t end) {
    for (int64_t line = begin; line < end; ++line)
      sweep[static_cast<size_t>(line * kLine)] = static_cast<char>(line);
  });
}

double best_run_ms(const Kernel& kernel, std::span<const Tensor> inputs, std::span<Tensor> outputs,
                   std::span<char> sweep = {}) {
  kernel.run(inputs, outputs);  // warm-up: first-touch of scratch and weights
  double best = 0;
  for (int run = 0; run < kTimedRuns; ++run) {
    if (!sweep.empty()) evict_caches(sweep);
    const auto start = std::chrono::steady_clock::now();
    kernel.run(inputs, outputs);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    best = run == 0 ? ms : std::min(best, ms);
  }
  return best;
}

// What the planner's Reorder step converting a float32 value of `shape` from `from` to `to` costs
// (the same kernel the planner would choose; nothing when no backend converts it).
double conversion_ms(const Shape& shape, Layout from, Layout to, const Settings& settings) {
  if (from == to) return 0;
  const std::unique_ptr<Kernel> reorder = select_reorder(shape, DType::f32, from, to, settings).kernel;
  if (reorder == nullptr || reorder->is_view()) return 0;
  const Tensor input = Tensor::zeros(stored_dtype(DType::f32, from), stored_shape(shape, from));
  Tensor output = Tensor::empty(stored_dtype(DType::f32, to), stored_shape(shape, to));
  return best_run_ms(*reorder, std::span(&input, 1), std::span(&output, 1));
}

// The best of a few runs of `kernel` on zero-filled inputs of `spec`'s shapes.
double time_kernel(const Kernel& kernel, const OpSpec& spec, std::span<const TensorInfo> outputs,
                   std::span<char> sweep) {
  std::vector<Tensor> inputs(spec.inputs.size());
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    const TensorInfo& info = spec.inputs[i];
    if (!info.present() || kernel.copied_at_plan_time(i)) continue;
    const Layout layout = kernel.input_layout(i);
    inputs[i] = info.is_constant() && layout == Layout::plain
                    ? info.value
                    : Tensor::zeros(stored_dtype(info.dtype, layout), stored_shape(info.shape, layout));
  }
  std::vector<Tensor> results(outputs.size());
  if (!kernel.is_view()) {
    for (size_t o = 0; o < outputs.size(); ++o) {
      const Layout layout = kernel.output_layout(o);
      results[o] =
          Tensor::empty(stored_dtype(outputs[o].dtype, layout), stored_shape(outputs[o].shape, layout));
    }
  }
  return best_run_ms(kernel, inputs, results, sweep);
}

}  // namespace

double time_candidate(const Kernel& kernel, const KernelRequest& request, std::span<const TensorInfo> outputs,
                      const Kernel& preferred, const Settings& settings, std::span<char> sweep) {
  const OpSpec& spec = request.op;
  double ms = time_kernel(kernel, spec, outputs, sweep);
  // Layouts the candidate reads or writes differently cost Reorder steps around it.
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    const TensorInfo& info = spec.inputs[i];
    if (!info.present() || info.is_constant() || info.dtype != DType::f32) continue;
    ms += conversion_ms(info.shape, request.input_layout(i), kernel.input_layout(i), settings);
  }
  for (size_t o = 0; o < outputs.size() && !kernel.is_view(); ++o) {
    if (outputs[o].dtype != DType::f32) continue;
    ms += conversion_ms(outputs[o].shape, kernel.output_layout(o), preferred.output_layout(o), settings);
  }
  return ms;
}

std::string choice_key(const KernelRequest& request, std::span<const TensorInfo> outputs,
                       const Settings& settings) {
  const OpSpec& spec = request.op;
  // Every setting that changes plans, as the plan key takes them: the thread count among them (kernels
  // are timed at it; another count may favour another kernel).
  std::string key = str_cat(spec.domain, "::", spec.op_type, "/", spec.opset, ";settings:");
  for (const int32_t value : settings.plan_values()) key += str_cat(value, ",");
  if (spec.attributes != nullptr) {
    for (const auto& [name, attribute] : spec.attrs().all())
      key += str_cat(";", name, "=", describe_attribute(attribute));
  }
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    const TensorInfo& input = spec.inputs[i];
    key += str_cat(";in:", dtype_name(input.dtype), shape_to_compact_string(input.shape),
                   layout_name(request.input_layout(i)));
    if (input.is_constant()) key += str_cat(":const:", content_digest(input.value));
  }
  for (const TensorInfo& output : outputs) key += str_cat(";out:", shape_to_compact_string(output.shape));
  for (const PostOp& op : request.post_ops)
    key += str_cat(";post:", post_op_name(op.kind), op.alpha, ",", op.beta, ",", op.input);
  return key;
}

}  // namespace kiln
