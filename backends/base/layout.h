// How a value's elements are stored, an execution concept the op layer never sees. Shapes are always
// logical (ONNX's NCHW); a value stored channels-last holds a 4-D [N, C, H, W] value as a contiguous
// [N, H, W, C] tensor, the layout oneDNN's fastest convolutions read and write. The *_bf16 layouts
// store a float32 value as bfloat16 (reduced precision, see Precision in kernel_request.h): its
// logical dtype stays f32, only the storage changes. Constants, graph inputs and outputs are plain.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/tensor.h"

namespace kiln {

enum class Layout : uint8_t { plain, nhwc, plain_bf16, nhwc_bf16 };

const char* layout_name(Layout layout);
// The shape of the tensor that stores a value of logical `shape` in `layout`.
Shape stored_shape(const Shape& shape, Layout layout);
// The dtype of that tensor: bf16 for the *_bf16 layouts, `dtype` otherwise.
DType stored_dtype(DType dtype, Layout layout);
bool is_channels_last(Layout layout);
bool is_bf16(Layout layout);

}  // namespace kiln
