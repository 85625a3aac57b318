// Element types a Tensor can hold. The numbering is kiln's own; ONNX's TensorProto codes are mapped
// in ops/onnx_dtype.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace kiln {

enum class DType : uint8_t {
  undefined,
  f32,
  f64,
  f16,
  bf16,
  i64,
  i32,
  i16,
  i8,
  u64,
  u32,
  u16,
  u8,
  boolean,  // one byte per element, 0 or 1
};

// Bytes per element (0 for undefined).
size_t dtype_size(DType dtype);
// Short lowercase name as numpy spells it: "float32", "int64", "bool", ...
std::string_view dtype_name(DType dtype);
bool is_floating(DType dtype);  // f32, f64, f16, bf16
bool is_integer(DType dtype);   // signed or unsigned integers, not bool

// 16-bit floating point storage types; arithmetic happens in float.
struct Float16 {
  uint16_t bits = 0;
};
struct BFloat16 {
  uint16_t bits = 0;
};

float float16_to_float(Float16 value);
Float16 float_to_float16(float value);  // round to nearest even
float bfloat16_to_float(BFloat16 value);
BFloat16 float_to_bfloat16(float value);  // round to nearest even

// Maps a C++ element type to its DType: dtype_of<float>() == DType::f32.
template <typename T>
constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<double>() { return DType::f64; }
template <> constexpr DType dtype_of<Float16>() { return DType::f16; }
template <> constexpr DType dtype_of<BFloat16>() { return DType::bf16; }
template <> constexpr DType dtype_of<int64_t>() { return DType::i64; }
template <> constexpr DType dtype_of<int32_t>() { return DType::i32; }
template <> constexpr DType dtype_of<int16_t>() { return DType::i16; }
template <> constexpr DType dtype_of<int8_t>() { return DType::i8; }
template <> constexpr DType dtype_of<uint64_t>() { return DType::u64; }
template <> constexpr DType dtype_of<uint32_t>() { return DType::u32; }
template <> constexpr DType dtype_of<uint16_t>() { return DType::u16; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::u8; }
template <> constexpr DType dtype_of<bool>() { return DType::boolean; }

// Calls fn(T{}) with the C++ type of `dtype`. DType::undefined has no type and gets fn(float{}), so
// callers check dtypes first. Use it to write a kernel once as a template over its element type.
template <typename Fn>
decltype(auto) visit_dtype(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::f32: return fn(float{});
    case DType::f64: return fn(double{});
    case DType::f16: return fn(Float16{});
    case DType::bf16: return fn(BFloat16{});
    case DType::i64: return fn(int64_t{});
    case DType::i32: return fn(int32_t{});
    case DType::i16: return fn(int16_t{});
    case DType::i8: return fn(int8_t{});
    case DType::u64: return fn(uint64_t{});
    case DType::u32: return fn(uint32_t{});
    case DType::u16: return fn(uint16_t{});
    case DType::u8: return fn(uint8_t{});
    case DType::boolean: return fn(bool{});
    case DType::undefined: break;
  }
  return fn(float{});  // unreachable for defined dtypes; callers validate dtypes first
}

}  // namespace kiln
