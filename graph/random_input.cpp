#include "graph/random_input.h"

#include <type_traits>

#include "core/error.h"

namespace kiln {

Tensor random_input(const ValueInfo& info, int64_t symbolic_size, std::mt19937& rng) {
  KILN_CHECK(info.dtype != DType::undefined, invalid_model, "input '", info.name, "' has no element type");
  if (holds_sequence(info.kind)) {
    ValueInfo element = info;
    element.kind = ValueKind::tensor;
    std::vector<Tensor> elements;
    for (int i = 0; i < kRandomSequenceLength; ++i)
      elements.push_back(random_input(element, symbolic_size, rng));
    return Tensor::sequence(info.dtype, std::move(elements));
  }
  Shape shape;
  for (const Dim& dim : info.shape) shape.push_back(dim.is_known() ? dim.value : symbolic_size);
  Tensor tensor = Tensor::empty(info.dtype, shape);
  std::uniform_real_distribution<float> real(-1.0f, 1.0f);
  std::uniform_int_distribution<int> small_int(0, 9);
  visit_dtype(info.dtype, [&](auto tag) {
    using T = decltype(tag);
    T* data = tensor.data<T>();
    for (int64_t i = 0; i < tensor.numel(); ++i) {
      if constexpr (std::is_same_v<T, Float16>) {
        data[i] = float_to_float16(real(rng));
      } else if constexpr (std::is_same_v<T, BFloat16>) {
        data[i] = float_to_bfloat16(real(rng));
      } else if constexpr (std::is_floating_point_v<T>) {
        data[i] = static_cast<T>(real(rng));
      } else if constexpr (std::is_same_v<T, bool>) {
        data[i] = small_int(rng) % 2 == 0;
      } else {
        data[i] = static_cast<T>(small_int(rng));
      }
    }
  });
  return tensor;
}

RandomInputs random_inputs(const std::vector<ValueInfo>& inputs, int64_t symbolic_size) {
  std::mt19937 rng(kRandomInputSeed);
  RandomInputs result;
  for (const ValueInfo& input : inputs) {
    result.ordered.push_back(random_input(input, symbolic_size, rng));
    result.by_name[input.name] = result.ordered.back();
  }
  return result;
}

RandomInputs random_inputs(const std::vector<ValueInfo>& inputs, const std::vector<Shape>& shapes) {
  KILN_CHECK(shapes.size() == inputs.size(), invalid_argument, "the model has ", inputs.size(),
             " inputs, the shapes given are for ", shapes.size());
  std::mt19937 rng(kRandomInputSeed);
  RandomInputs result;
  for (size_t i = 0; i < inputs.size(); ++i) {
    ValueInfo info = inputs[i];
    info.shape.clear();
    for (const int64_t size : shapes[i]) info.shape.push_back(Dim{size, {}});
    result.ordered.push_back(random_input(info, 1, rng));
    result.by_name[info.name] = result.ordered.back();
  }
  return result;
}

}  // namespace kiln
