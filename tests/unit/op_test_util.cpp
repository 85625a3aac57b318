#include "op_test_util.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "backends/base/layout.h"
#include "backends/native/native_backend.h"
#include "core/error.h"
#include "ops/op_schema.h"

namespace kiln::testing {
namespace {

// A plain 4-D value's elements in channels-last order (`to_channels_last`) or back.
Tensor convert_layout(const Tensor& value, const Shape& logical, bool to_channels_last) {
  const int64_t channels = logical[1];
  const int64_t positions = logical[2] * logical[3];
  const size_t bytes = dtype_size(value.dtype());
  Tensor converted =
      Tensor::empty(value.dtype(), to_channels_last ? stored_shape(logical, Layout::nhwc) : logical);
  const auto* src = static_cast<const char*>(value.raw_data());
  auto* dst = static_cast<char*>(converted.raw_data());
  for (int64_t n = 0; n < logical[0]; ++n) {
    for (int64_t c = 0; c < channels; ++c) {
      for (int64_t p = 0; p < positions; ++p) {
        const int64_t plain = (n * channels + c) * positions + p;
        const int64_t channels_last = (n * positions + p) * channels + c;
        const int64_t from = to_channels_last ? plain : channels_last;
        const int64_t to = to_channels_last ? channels_last : plain;
        std::memcpy(dst + to * bytes, src + from * bytes, bytes);
      }
    }
  }
  return converted;
}

}  // namespace

std::vector<Tensor> run_op(const OpRun& run) {
  return run_op_on(native_backend(), run);
}

std::vector<Tensor> run_op_on(const Backend& backend, const OpRun& run) {
  const OpSchema* schema = find_op_schema(run.op_type, run.domain);
  KILN_CHECK(schema != nullptr, not_implemented, "unknown op ", run.op_type);
  OpSpec spec;
  spec.op_type = run.op_type;
  spec.domain = run.domain;
  spec.node_name = "test_node";
  spec.opset = run.opset;
  spec.attributes = &run.attributes;
  spec.num_outputs = run.num_outputs;
  for (const Tensor& input : run.inputs) {
    TensorInfo info;
    if (input.defined()) {
      info.dtype = input.dtype();
      info.shape = input.shape();
      if (run.inputs_are_constants) info.value = input;
    }
    spec.inputs.push_back(info);
  }
  std::vector<TensorInfo> output_infos = schema->infer(spec);
  KernelRequest request;
  request.op = spec;
  KernelOrReason selection = backend.create_kernel(request, output_infos);
  KILN_CHECK(selection.kernel != nullptr, not_implemented, "no ", backend.name(),
             " kernel: ", selection.refusal.detail);
  // The test's tensors are plain: convert those the kernel reads or writes channels-last.
  const Kernel& kernel = *selection.kernel;
  std::vector<Tensor> inputs = run.inputs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].defined() && kernel.input_layout(i) == Layout::nhwc)
      inputs[i] = convert_layout(inputs[i], inputs[i].shape(), true);
  }
  std::vector<Tensor> outputs(output_infos.size());
  if (!kernel.is_view()) {
    for (size_t i = 0; i < outputs.size(); ++i) {
      outputs[i] =
          Tensor::empty(output_infos[i].dtype, stored_shape(output_infos[i].shape, kernel.output_layout(i)));
    }
  }
  kernel.run(inputs, outputs);
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (kernel.output_layout(i) == Layout::nhwc)
      outputs[i] = convert_layout(outputs[i], output_infos[i].shape, false);
  }
  return outputs;
}

Attribute int_attr(int64_t value) {
  Attribute attribute;
  attribute.type = Attribute::Type::i;
  attribute.i = value;
  return attribute;
}

Attribute float_attr(float value) {
  Attribute attribute;
  attribute.type = Attribute::Type::f;
  attribute.f = value;
  return attribute;
}

Attribute ints_attr(std::vector<int64_t> values) {
  Attribute attribute;
  attribute.type = Attribute::Type::ints;
  attribute.ints = std::move(values);
  return attribute;
}

Attribute string_attr(std::string value) {
  Attribute attribute;
  attribute.type = Attribute::Type::s;
  attribute.s = std::move(value);
  return attribute;
}

Tensor sample_tensor(const Shape& shape, float low, float high, uint32_t seed) {
  return Tensor::from_vector(sample_values(checked_numel(shape), low, high, seed), shape);
}

std::vector<float> sample_values(int64_t count, float low, float high, uint32_t seed) {
  std::vector<float> values(static_cast<size_t>(count));
  uint32_t state = seed;
  for (float& value : values) {
    state = state * 1664525u + 1013904223u;
    value = low + (high - low) * static_cast<float>(state >> 8) / static_cast<float>(1u << 24);
  }
  return values;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  if (a.dtype() != DType::f32 || b.dtype() != DType::f32 || a.shape() != b.shape()) {
    return std::numeric_limits<double>::infinity();
  }
  double diff = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(a.data<float>()[i]) - b.data<float>()[i]));
  }
  return diff;
}

}  // namespace kiln::testing
