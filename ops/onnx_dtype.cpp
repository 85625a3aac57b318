#include "ops/onnx_dtype.h"

#include <array>

namespace kiln {
namespace {

struct Code {
  int64_t code;
  std::string_view name;
  DType dtype;
};

constexpr std::array kCodes = {
    Code{1, "FLOAT", DType::f32},       Code{2, "UINT8", DType::u8},     Code{3, "INT8", DType::i8},
    Code{4, "UINT16", DType::u16},      Code{5, "INT16", DType::i16},    Code{6, "INT32", DType::i32},
    Code{7, "INT64", DType::i64},       Code{8, "STRING", DType::undefined}, Code{9, "BOOL", DType::boolean},
    Code{10, "FLOAT16", DType::f16},    Code{11, "DOUBLE", DType::f64},  Code{12, "UINT32", DType::u32},
    Code{13, "UINT64", DType::u64},     Code{14, "COMPLEX64", DType::undefined},
    Code{15, "COMPLEX128", DType::undefined}, Code{16, "BFLOAT16", DType::bf16},
};

}  // namespace

DType dtype_from_onnx(int64_t code) {
  for (const Code& entry : kCodes) {
    if (entry.code == code) return entry.dtype;
  }
  return DType::undefined;
}

std::string_view onnx_dtype_name(int64_t code) {
  for (const Code& entry : kCodes) {
    if (entry.code == code) return entry.name;
  }
  return "UNKNOWN";
}

}  // namespace kiln
