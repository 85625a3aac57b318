// Native sequence and optional kernels. A sequence shares its elements (values are immutable), so
// inserting, erasing and constructing copy only what the sequence cannot keep: a tensor stored in
// memory a later step reuses (a run's arena, the caller's buffer), which is cloned on the way in.
#include "ops/sequence.h"

#include <cstring>

#include "backends/base/function_kernel.h"
#include "backends/native/native_backend.h"

namespace kiln::native {
namespace {

// `tensor` as a sequence may keep it: its own storage, or a copy of memory it does not own.
Tensor kept(const Tensor& tensor) {
  return tensor.storage_owners() == 0 ? tensor.clone() : tensor;
}

// A position input in [-length, length] (`end_allowed`: insertion may append) as an index.
size_t position_index(const Tensor& position, size_t length, bool end_allowed, const char* op) {
  const int64_t count = static_cast<int64_t>(length);
  const int64_t value = position.int_at(0);
  const int64_t high = end_allowed ? count : count - 1;
  KILN_CHECK(value >= -count && value <= high, invalid_argument, op, " position ", value,
             " is out of range for a sequence of ", count, " elements (valid: ", -count, "..", high, ")");
  return static_cast<size_t>(value < 0 ? value + count : value);
}

std::vector<Tensor> elements_of(const Tensor& sequence, const char* op) {
  KILN_CHECK(sequence.is_sequence(), type_mismatch, op, " input 0 must be a sequence");
  return {sequence.elements().begin(), sequence.elements().end()};
}

// Writes `value` into `output`: a planned output takes a copy, a run-sized one the value itself.
void deliver(const Tensor& value, Tensor& output, const char* op) {
  if (!output.defined()) {
    // A run-sized output reaches the caller as it is: never the storage of a value it read.
    output = value.is_sequence() ? value : value.clone();
    return;
  }
  KILN_CHECK(value.shape() == output.shape() && value.dtype() == output.dtype(), invalid_argument, op,
             " produced ", dtype_name(value.dtype()), " ", shape_to_string(value.shape()),
             " where planning expected ", dtype_name(output.dtype()), " ", shape_to_string(output.shape()));
  if (value.nbytes() > 0) std::memcpy(output.raw_data(), value.raw_data(), value.nbytes());
}

// A kernel whose outputs planning could size writes into them; otherwise it allocates them.
template <typename RunFn>
KernelOrReason sequence_kernel(std::string name, std::span<const TensorInfo> outputs, RunFn run) {
  for (const TensorInfo& output : outputs) {
    if (!output.is_static_tensor()) return make_sizing_kernel(std::move(name), std::move(run));
  }
  return make_kernel(std::move(name), std::move(run));
}

KernelOrReason make_sequence_empty(const OpSpec& spec, std::span<const TensorInfo>) {
  const DType dtype = dtype_attribute(spec, "dtype", DType::f32);
  return make_sizing_kernel("native:sequence_empty",
                            [dtype](std::span<const Tensor>, std::span<Tensor> outputs) {
                              outputs[0] = Tensor::sequence(dtype, {});
                            });
}

KernelOrReason make_sequence_construct(const OpSpec& spec, std::span<const TensorInfo>) {
  const DType dtype = spec.input(0).dtype;
  return make_sizing_kernel("native:sequence_construct",
                            [dtype](std::span<const Tensor> inputs, std::span<Tensor> outputs) {
                              std::vector<Tensor> elements;
                              for (const Tensor& input : inputs) elements.push_back(kept(input));
                              outputs[0] = Tensor::sequence(dtype, std::move(elements));
                            });
}

KernelOrReason make_sequence_insert(const OpSpec&, std::span<const TensorInfo>) {
  return make_sizing_kernel(
      "native:sequence_insert", [](std::span<const Tensor> inputs, std::span<Tensor> outputs) {
        std::vector<Tensor> elements = elements_of(inputs[0], "SequenceInsert");
        KILN_CHECK(inputs[1].dtype() == inputs[0].dtype() && !inputs[1].is_sequence(), type_mismatch,
                   "SequenceInsert inserts a ", dtype_name(inputs[1].dtype()), " value into a sequence of ",
                   dtype_name(inputs[0].dtype()));
        const size_t at = inputs.size() > 2 && inputs[2].defined()
                              ? position_index(inputs[2], elements.size(), true, "SequenceInsert")
                              : elements.size();
        elements.insert(elements.begin() + static_cast<std::ptrdiff_t>(at), kept(inputs[1]));
        outputs[0] = Tensor::sequence(inputs[0].dtype(), std::move(elements));
      });
}

KernelOrReason make_sequence_at(const OpSpec&, std::span<const TensorInfo> outputs) {
  return sequence_kernel("native:sequence_at", outputs,
                         [](std::span<const Tensor> inputs, std::span<Tensor> out) {
                           const std::vector<Tensor> elements = elements_of(inputs[0], "SequenceAt");
                           deliver(elements[position_index(inputs[1], elements.size(), false, "SequenceAt")],
                                   out[0], "SequenceAt");
                         });
}

KernelOrReason make_sequence_erase(const OpSpec&, std::span<const TensorInfo>) {
  return make_sizing_kernel(
      "native:sequence_erase", [](std::span<const Tensor> inputs, std::span<Tensor> outputs) {
        std::vector<Tensor> elements = elements_of(inputs[0], "SequenceErase");
        KILN_CHECK(!elements.empty(), invalid_argument, "SequenceErase cannot erase from an empty sequence");
        const size_t at = inputs.size() > 1 && inputs[1].defined()
                              ? position_index(inputs[1], elements.size(), false, "SequenceErase")
                              : elements.size() - 1;
        elements.erase(elements.begin() + static_cast<std::ptrdiff_t>(at));
        outputs[0] = Tensor::sequence(inputs[0].dtype(), std::move(elements));
      });
}

KernelOrReason make_sequence_length(const OpSpec&, std::span<const TensorInfo>) {
  return make_kernel("native:sequence_length", [](std::span<const Tensor> inputs, std::span<Tensor> outputs) {
    outputs[0].data<int64_t>()[0] = static_cast<int64_t>(elements_of(inputs[0], "SequenceLength").size());
  });
}

// Rows of `outer` blocks: tensor i contributes `inner_bytes[i]` contiguous bytes per block.
void copy_blocks(const std::vector<const char*>& sources, const std::vector<size_t>& inner_bytes,
                 int64_t outer, char* destination) {
  for (int64_t o = 0; o < outer; ++o) {
    for (size_t i = 0; i < sources.size(); ++i) {
      std::memcpy(destination, sources[i] + static_cast<size_t>(o) * inner_bytes[i], inner_bytes[i]);
      destination += inner_bytes[i];
    }
  }
}

KernelOrReason make_split_to_sequence(const OpSpec& spec, std::span<const TensorInfo>) {
  const int64_t axis = spec.attrs().get_int("axis", 0);
  const bool keepdims = spec.attrs().get_int("keepdims", 1) != 0;
  const Tensor split = spec.has_input(1) ? spec.constant_input(1, "split") : Tensor{};
  return make_sizing_kernel(
      "native:split_to_sequence", [=](std::span<const Tensor> inputs, std::span<Tensor> outputs) {
        const Tensor& input = inputs[0];
        KILN_CHECK(!input.is_sequence() && input.rank() >= 1, invalid_argument,
                   "SplitToSequence splits a tensor of rank 1 or more, got ", shape_to_string(input.shape()));
        const SplitToSequenceParams params = split_to_sequence_params(axis, keepdims, split, input.shape());
        const Shape& shape = input.shape();
        const size_t at = static_cast<size_t>(params.axis);
        const int64_t outer = checked_numel(std::span(shape).first(at));
        const int64_t after = checked_numel(std::span(shape).subspan(at + 1));
        const size_t element = dtype_size(input.dtype());
        const size_t row_bytes = static_cast<size_t>(shape[at] * after) * element;
        std::vector<Tensor> parts;
        int64_t start = 0;
        for (int64_t size : params.sizes) {
          Shape part_shape = shape;
          part_shape[at] = size;
          Tensor part = Tensor::empty(input.dtype(), part_shape);
          const size_t part_bytes = static_cast<size_t>(size * after) * element;
          const char* source =
              static_cast<const char*>(input.raw_data()) + static_cast<size_t>(start * after) * element;
          for (int64_t o = 0; o < outer; ++o) {
            std::memcpy(static_cast<char*>(part.raw_data()) + static_cast<size_t>(o) * part_bytes,
                        source + static_cast<size_t>(o) * row_bytes, part_bytes);
          }
          if (params.drop_axis) part_shape.erase(part_shape.begin() + params.axis);
          parts.push_back(part.reshaped(part_shape));
          start += size;
        }
        outputs[0] = Tensor::sequence(input.dtype(), std::move(parts));
      });
}

KernelOrReason make_concat_from_sequence(const OpSpec& spec, std::span<const TensorInfo>) {
  const int64_t axis_attribute = spec.attrs().require_int("axis");
  const bool new_axis = spec.attrs().get_int("new_axis", 0) != 0;
  return make_sizing_kernel("native:concat_from_sequence", [=](std::span<const Tensor> inputs,
                                                               std::span<Tensor> outputs) {
    const std::vector<Tensor> elements = elements_of(inputs[0], "ConcatFromSequence");
    KILN_CHECK(!elements.empty(), invalid_argument, "ConcatFromSequence needs a non-empty sequence");
    Shape first = elements[0].shape();
    const int64_t rank = static_cast<int64_t>(first.size()) + (new_axis ? 1 : 0);
    const size_t axis = static_cast<size_t>(normalize_axis(axis_attribute, rank, "ConcatFromSequence axis"));
    if (new_axis) first.insert(first.begin() + static_cast<std::ptrdiff_t>(axis), 1);
    Shape result = first;
    result[axis] = 0;
    std::vector<const char*> sources;
    std::vector<size_t> inner_bytes;
    const size_t element = dtype_size(inputs[0].dtype());
    for (size_t i = 0; i < elements.size(); ++i) {
      Shape shape = elements[i].shape();
      if (new_axis) shape.insert(shape.begin() + static_cast<std::ptrdiff_t>(axis), 1);
      for (size_t d = 0; d < shape.size(); ++d) {
        KILN_CHECK(shape.size() == first.size() && (d == axis || shape[d] == first[d]), invalid_argument,
                   "ConcatFromSequence element ", i, " has shape ", shape_to_string(elements[i].shape()),
                   ", element 0 ", shape_to_string(elements[0].shape()), ": they may differ only along axis ",
                   axis);
      }
      result[axis] += shape[axis];
      sources.push_back(static_cast<const char*>(elements[i].raw_data()));
      inner_bytes.push_back(static_cast<size_t>(checked_numel(std::span(shape).subspan(axis))) * element);
    }
    outputs[0] = Tensor::empty(inputs[0].dtype(), result);
    copy_blocks(sources, inner_bytes, checked_numel(std::span(result).first(axis)),
                static_cast<char*>(outputs[0].raw_data()));
  });
}

KernelOrReason make_optional(const OpSpec&, std::span<const TensorInfo>) {
  return make_sizing_kernel("native:optional", [](std::span<const Tensor> inputs, std::span<Tensor> outputs) {
    outputs[0] = inputs.empty() || !inputs[0].defined() ? Tensor{} : kept(inputs[0]);
  });
}

KernelOrReason make_optional_has_element(const OpSpec&, std::span<const TensorInfo>) {
  return make_kernel("native:optional_has_element",
                     [](std::span<const Tensor> inputs, std::span<Tensor> outputs) {
                       outputs[0].data<bool>()[0] = !inputs.empty() && inputs[0].defined();
                     });
}

KernelOrReason make_optional_get_element(const OpSpec&, std::span<const TensorInfo> outputs) {
  return sequence_kernel("native:optional_get_element", outputs,
                         [](std::span<const Tensor> inputs, std::span<Tensor> out) {
                           KILN_CHECK(!inputs.empty() && inputs[0].defined(), invalid_argument,
                                      "OptionalGetElement read an empty optional");
                           deliver(inputs[0], out[0], "OptionalGetElement");
                         });
}

constexpr KernelEntry kKernels[] = {
    {"SequenceEmpty", make_sequence_empty},
    {"SequenceConstruct", make_sequence_construct},
    {"SequenceInsert", make_sequence_insert},
    {"SequenceAt", make_sequence_at},
    {"SequenceErase", make_sequence_erase},
    {"SequenceLength", make_sequence_length},
    {"SplitToSequence", make_split_to_sequence},
    {"ConcatFromSequence", make_concat_from_sequence},
    {"Optional", make_optional},
    {"OptionalHasElement", make_optional_has_element},
    {"OptionalGetElement", make_optional_get_element},
};

}  // namespace

std::span<const KernelEntry> sequence_kernels() {
  return kKernels;
}

}  // namespace kiln::native
