// Tensors: created by kiln, wrapped over the caller's memory, or handed over by a run.
#include "capi/handles.h"

namespace kiln::capi {
namespace {

Shape shape_from_c(const int64_t* shape, size_t rank) {
  KILN_CHECK(rank == 0 || shape != nullptr, invalid_argument, "shape is NULL for rank ", rank);
  KILN_CHECK(rank <= 64, invalid_argument, "rank ", rank, " is above kiln's limit of 64");
  Shape dims(shape, shape + rank);
  checked_numel(dims);  // rejects negative dims and overflow, naming them
  return dims;
}

}  // namespace

kiln_tensor* new_tensor_handle(Tensor tensor) {
  if (!tensor.is_contiguous()) tensor = tensor.clone();
  return new kiln_tensor{std::move(tensor)};
}

}  // namespace kiln::capi

using namespace kiln;
using capi::guarded;
using capi::required;

extern "C" {

kiln_status* kiln_tensor_create(kiln_dtype dtype, const int64_t* shape, size_t rank, kiln_tensor** out) {
  return guarded([&] {
    required(out, "out");
    *out = nullptr;
    *out = capi::new_tensor_handle(Tensor::zeros(capi::dtype_from_c(dtype), capi::shape_from_c(shape, rank)));
  });
}

kiln_status* kiln_tensor_wrap(kiln_dtype dtype, const int64_t* shape, size_t rank, void* data, size_t byte_size,
                              kiln_tensor** out) {
  return guarded([&] {
    required(out, "out");
    *out = nullptr;
    const DType type = capi::dtype_from_c(dtype);
    Shape dims = capi::shape_from_c(shape, rank);
    const size_t expected = static_cast<size_t>(checked_numel(dims)) * dtype_size(type);
    KILN_CHECK(byte_size == expected, invalid_argument, "byte_size is ", byte_size, " but a ",
               dtype_name(type), " tensor of shape ", shape_to_string(dims), " takes ", expected, " bytes");
    KILN_CHECK(data != nullptr || expected == 0, invalid_argument, "data is NULL for ", expected, " bytes");
    KILN_CHECK(reinterpret_cast<uintptr_t>(data) % dtype_size(type) == 0, invalid_argument,
               "data is not aligned to its ", dtype_size(type), "-byte elements");
    *out = new kiln_tensor{Tensor::wrap(data, type, std::move(dims))};
  });
}

void kiln_tensor_free(kiln_tensor* tensor) { delete tensor; }

kiln_dtype kiln_tensor_dtype(const kiln_tensor* tensor) {
  return tensor ? capi::dtype_to_c(tensor->tensor.dtype()) : KILN_DTYPE_UNDEFINED;
}

size_t kiln_tensor_rank(const kiln_tensor* tensor) { return tensor ? tensor->tensor.shape().size() : 0; }

const int64_t* kiln_tensor_shape(const kiln_tensor* tensor) {
  return tensor ? tensor->tensor.shape().data() : nullptr;
}

int64_t kiln_tensor_element_count(const kiln_tensor* tensor) { return tensor ? tensor->tensor.numel() : 0; }

size_t kiln_tensor_byte_size(const kiln_tensor* tensor) { return tensor ? tensor->tensor.nbytes() : 0; }

void* kiln_tensor_data(kiln_tensor* tensor) { return tensor ? tensor->tensor.raw_data() : nullptr; }

}  // extern "C"
