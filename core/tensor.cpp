#include "core/tensor.h"

#include <cstring>
#include <limits>

#include "core/error.h"

namespace kiln {

std::string shape_to_compact_string(std::span<const int64_t> shape) {
  if (shape.empty()) return "scalar";
  std::string text;
  for (size_t i = 0; i < shape.size(); ++i) {
    // Two appends: `"x" + std::to_string(...)` trips GCC 12's false -Wrestrict warning.
    if (i > 0) text += 'x';
    text += std::to_string(shape[i]);
  }
  return text;
}

int64_t checked_numel(std::span<const int64_t> shape) {
  int64_t count = 1;
  for (int64_t dim : shape) {
    KILN_CHECK(dim >= 0, invalid_argument, "negative dimension ", dim, " in shape ", shape_to_string(shape));
    if (dim != 0 && count > std::numeric_limits<int64_t>::max() / dim) {
      fail(ErrorKind::invalid_argument, "shape ", shape_to_string(shape), " has too many elements");
    }
    count *= dim;
  }
  return count;
}

namespace {

// The stride of the dim before one of `stride` and size `dim`. An empty tensor's other dims may
// multiply past int64 ([0, 2^32, 2^32]); its strides address nothing, so they saturate instead of
// overflowing.
int64_t next_stride(int64_t stride, int64_t dim) {
  dim = std::max<int64_t>(dim, 1);
  return stride > std::numeric_limits<int64_t>::max() / dim ? std::numeric_limits<int64_t>::max()
                                                            : stride * dim;
}

}  // namespace

std::vector<int64_t> contiguous_strides(std::span<const int64_t> shape) {
  std::vector<int64_t> strides(shape.size());
  int64_t stride = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride = next_stride(stride, shape[i]);
  }
  return strides;
}

std::string shape_to_string(std::span<const int64_t> shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) text += ", ";
    text += std::to_string(shape[i]);
  }
  return text + "]";
}

Tensor Tensor::empty(DType dtype, Shape shape, Allocator* allocator) {
  KILN_CHECK(dtype != DType::undefined, invalid_argument, "cannot create a tensor of undefined dtype");
  Tensor tensor;
  tensor.numel_ = checked_numel(shape);
  const size_t element_size = dtype_size(dtype);
  KILN_CHECK(static_cast<uint64_t>(tensor.numel_) <= std::numeric_limits<size_t>::max() / element_size,
             invalid_argument, "tensor of shape ", shape_to_string(shape), " is too large");
  tensor.dtype_ = dtype;
  tensor.strides_ = contiguous_strides(shape);
  tensor.shape_ = std::move(shape);
  Allocator& source = allocator != nullptr ? *allocator : current_allocator();
  const size_t bytes = tensor.nbytes();
  tensor.data_ = source.allocate(bytes);
  note_allocation(static_cast<int64_t>(bytes), "tensor");
  tensor.storage_ = std::shared_ptr<void>(tensor.data_, [&source, bytes](void* pointer) {
    source.deallocate(pointer, bytes);
    note_allocation(-static_cast<int64_t>(bytes), "tensor");
  });
  return tensor;
}

Tensor Tensor::zeros(DType dtype, Shape shape) {
  Tensor tensor = empty(dtype, std::move(shape));
  std::memset(tensor.data_, 0, tensor.nbytes());
  return tensor;
}

Tensor Tensor::wrap(void* data, DType dtype, Shape shape) {
  KILN_CHECK(dtype != DType::undefined, invalid_argument, "cannot wrap memory as undefined dtype");
  Tensor tensor;
  tensor.numel_ = checked_numel(shape);
  tensor.dtype_ = dtype;
  tensor.strides_ = contiguous_strides(shape);
  tensor.shape_ = std::move(shape);
  tensor.data_ = data;
  return tensor;
}

Tensor Tensor::view(std::shared_ptr<const void> owner, const void* data, DType dtype, Shape shape) {
  Tensor tensor = wrap(const_cast<void*>(data), dtype, std::move(shape));
  tensor.storage_ = std::shared_ptr<void>(std::const_pointer_cast<void>(std::move(owner)), tensor.data_);
  return tensor;
}

Tensor Tensor::sequence(DType element_dtype, std::vector<Tensor> elements) {
  KILN_CHECK(element_dtype != DType::undefined, invalid_argument, "a sequence needs an element dtype");
  for (size_t i = 0; i < elements.size(); ++i) {
    KILN_CHECK(elements[i].dtype() == element_dtype && !elements[i].is_sequence(), invalid_argument,
               "sequence element ", i, " is ", elements[i].is_sequence() ? "a sequence" : "",
               dtype_name(elements[i].dtype()), ", expected a ", dtype_name(element_dtype), " tensor");
  }
  Tensor tensor;
  tensor.dtype_ = element_dtype;
  tensor.elements_ = std::make_shared<const std::vector<Tensor>>(std::move(elements));
  return tensor;
}

std::span<const Tensor> Tensor::elements() const {
  if (elements_ == nullptr) return {};
  return *elements_;
}

bool Tensor::is_contiguous() const {
  // Compared in place: this runs on every input of every run, which must not allocate.
  int64_t expected = 1;
  for (size_t d = shape_.size(); d-- > 0;) {
    if (strides_[d] != expected) return false;
    expected = next_stride(expected, shape_[d]);  // as contiguous_strides computes them
  }
  return true;
}

Tensor Tensor::reshaped(Shape shape) const {
  KILN_ASSERT(is_contiguous());
  KILN_CHECK(checked_numel(shape) == numel_, invalid_argument, "cannot reshape ", shape_to_string(shape_),
             " (", numel_, " elements) to ", shape_to_string(shape));
  Tensor view = *this;
  view.strides_ = contiguous_strides(shape);
  view.shape_ = std::move(shape);
  return view;
}

Tensor Tensor::leading(int64_t count) const {
  KILN_ASSERT(is_contiguous() && rank() >= 1 && count >= 0 && count <= shape_[0]);
  Tensor view = *this;
  view.shape_[0] = count;
  view.numel_ = checked_numel(view.shape_);
  return view;
}

Tensor Tensor::clone() const {
  if (!defined()) return {};
  if (is_sequence()) {
    std::vector<Tensor> copies;
    copies.reserve(elements_->size());
    for (const Tensor& element : *elements_) copies.push_back(element.clone());
    return sequence(dtype_, std::move(copies));
  }
  KILN_ASSERT(is_contiguous());
  Tensor copy = empty(dtype_, shape_);
  if (nbytes() > 0) std::memcpy(copy.data_, data_, nbytes());
  return copy;
}

double Tensor::double_at(int64_t index) const {
  KILN_ASSERT(index >= 0 && index < numel_);
  return visit_dtype(dtype_, [&](auto tag) -> double {
    using T = decltype(tag);
    const T value = data<T>()[index];
    if constexpr (std::is_same_v<T, Float16>) {
      return float16_to_float(value);
    } else if constexpr (std::is_same_v<T, BFloat16>) {
      return bfloat16_to_float(value);
    } else {
      return static_cast<double>(value);
    }
  });
}

int64_t Tensor::int_at(int64_t index) const {
  KILN_ASSERT(index >= 0 && index < numel_);
  return visit_dtype(dtype_, [&](auto tag) -> int64_t {
    using T = decltype(tag);
    if constexpr (std::is_integral_v<T>) {
      return static_cast<int64_t>(data<T>()[index]);
    } else {
      // Out of int64's range (NaN included) the conversion would be undefined behaviour.
      const double value = double_at(index);
      constexpr double kTwoTo63 = 9223372036854775808.0;
      KILN_CHECK(value >= -kTwoTo63 && value < kTwoTo63, invalid_argument, "value ", value, " (element ",
                 index, " of a ", dtype_name(dtype_), " tensor read as an integer) does not fit an int64");
      return static_cast<int64_t>(value);
    }
  });
}

std::vector<int64_t> Tensor::to_int64_vector() const {
  std::vector<int64_t> values(static_cast<size_t>(numel_));
  for (int64_t i = 0; i < numel_; ++i) values[static_cast<size_t>(i)] = int_at(i);
  return values;
}

}  // namespace kiln
