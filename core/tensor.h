// An n-dimensional array: dtype, int64 shape and strides (in elements), and shared storage.
// Copies share storage (like numpy views); clone() copies bytes. Kernels in kiln work on
// contiguous row-major tensors, which is what Tensor::empty creates.
//
// A Tensor is also how kiln passes ONNX's other value kinds between steps: a sequence
// (Tensor::sequence: its elements' dtype, no shape or data of its own, the elements shared) and an
// optional, which is its value when present and an undefined Tensor when empty.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/dtype.h"

namespace kiln {

using Shape = std::vector<int64_t>;

// Product of dims; throws kiln::Error (invalid_argument) on a negative dim or int64 overflow.
int64_t checked_numel(std::span<const int64_t> shape);
// Row-major strides in elements.
std::vector<int64_t> contiguous_strides(std::span<const int64_t> shape);
// "[1, 3, 224, 224]"
std::string shape_to_string(std::span<const int64_t> shape);
// "1x3x224x224" ("scalar" for rank 0): without commas, for comma-separated verbose lines.
std::string shape_to_compact_string(std::span<const int64_t> shape);

class Tensor {
 public:
  Tensor() = default;  // undefined: no dtype, no storage (an absent optional input)

  // Uninitialised contiguous tensor from `allocator` (the current one when null).
  static Tensor empty(DType dtype, Shape shape, Allocator* allocator = nullptr);
  static Tensor zeros(DType dtype, Shape shape);
  // Wraps memory owned by the caller, who keeps it alive while the tensor (or a copy) is in use.
  static Tensor wrap(void* data, DType dtype, Shape shape);
  // Memory kept alive by `owner` (a MappedFile's bytes), shared by the tensor and its copies. The
  // memory may be read-only: the tensor is a constant that nothing writes.
  static Tensor view(std::shared_ptr<const void> owner, const void* data, DType dtype, Shape shape);
  template <typename T>
  static Tensor from_vector(const std::vector<T>& values, Shape shape);
  template <typename T>
  static Tensor scalar(T value) {
    return from_vector(std::vector<T>{value}, {});
  }

  // A sequence of tensors of `element_dtype` (ONNX's seq(tensor)), elements of any shapes.
  static Tensor sequence(DType element_dtype, std::vector<Tensor> elements);

  bool defined() const { return dtype_ != DType::undefined; }
  bool is_sequence() const { return elements_ != nullptr; }
  // A sequence's elements (empty for a tensor).
  std::span<const Tensor> elements() const;
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  const std::vector<int64_t>& strides() const { return strides_; }
  int64_t rank() const { return static_cast<int64_t>(shape_.size()); }
  int64_t dim(int64_t axis) const { return shape_[static_cast<size_t>(axis)]; }
  int64_t numel() const { return numel_; }
  size_t nbytes() const { return static_cast<size_t>(numel_) * dtype_size(dtype_); }
  bool is_contiguous() const;

  void* raw_data() { return data_; }
  const void* raw_data() const { return data_; }
  template <typename T>
  T* data() {
    return static_cast<T*>(data_);
  }
  template <typename T>
  const T* data() const {
    return static_cast<const T*>(data_);
  }
  // Elements as a flat span; the tensor must be contiguous.
  template <typename T>
  std::span<const T> values() const {
    return {data<T>(), static_cast<size_t>(numel_)};
  }

  // How many tensors (and copies) share this tensor's storage; 0 for wrapped memory.
  long storage_owners() const { return storage_.use_count(); }

  // Same storage, new shape with the same element count (contiguous tensors only).
  Tensor reshaped(Shape shape) const;
  // Same storage, the first `count` entries along axis 0 (contiguous tensors of rank >= 1).
  Tensor leading(int64_t count) const;
  // Deep copy into a new contiguous tensor (a sequence: of every element).
  Tensor clone() const;
  // Element i of a tensor of any numeric dtype, converted; for shape/index inputs.
  int64_t int_at(int64_t index) const;
  double double_at(int64_t index) const;
  // All elements of an integer tensor as int64 (shape, axes, pads inputs).
  std::vector<int64_t> to_int64_vector() const;

 private:
  DType dtype_ = DType::undefined;
  Shape shape_;
  std::vector<int64_t> strides_;
  int64_t numel_ = 0;
  void* data_ = nullptr;
  std::shared_ptr<void> storage_;  // owns data_ unless wrapped
  std::shared_ptr<const std::vector<Tensor>> elements_;  // a sequence's elements
};

template <typename T>
Tensor Tensor::from_vector(const std::vector<T>& values, Shape shape) {
  Tensor tensor = empty(dtype_of<T>(), std::move(shape));
  T* dst = tensor.data<T>();
  for (size_t i = 0; i < values.size() && static_cast<int64_t>(i) < tensor.numel(); ++i) dst[i] = values[i];
  return tensor;
}

}  // namespace kiln
