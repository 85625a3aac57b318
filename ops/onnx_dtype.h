// ONNX's TensorProto.DataType codes, used by model files and by attributes such as Cast's `to`.
#pragma once

#include <cstdint>
#include <string_view>

#include "core/dtype.h"

namespace kiln {

// kiln's dtype for an ONNX code, or DType::undefined for codes kiln does not support (STRING,
// COMPLEX64, COMPLEX128, unknown numbers).
DType dtype_from_onnx(int64_t code);
// ONNX's name for a code ("FLOAT", "STRING", ...), or "UNKNOWN".
std::string_view onnx_dtype_name(int64_t code);

}  // namespace kiln
