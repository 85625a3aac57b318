#include "core/dtype.h"

#include <bit>
#include <cmath>

namespace kiln {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f64:
    case DType::i64:
    case DType::u64: return 8;
    case DType::f32:
    case DType::i32:
    case DType::u32: return 4;
    case DType::f16:
    case DType::bf16:
    case DType::i16:
    case DType::u16: return 2;
    case DType::i8:
    case DType::u8:
    case DType::boolean: return 1;
    case DType::undefined: return 0;
  }
  return 0;
}

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "float32";
    case DType::f64: return "float64";
    case DType::f16: return "float16";
    case DType::bf16: return "bfloat16";
    case DType::i64: return "int64";
    case DType::i32: return "int32";
    case DType::i16: return "int16";
    case DType::i8: return "int8";
    case DType::u64: return "uint64";
    case DType::u32: return "uint32";
    case DType::u16: return "uint16";
    case DType::u8: return "uint8";
    case DType::boolean: return "bool";
    case DType::undefined: return "undefined";
  }
  return "undefined";
}

bool is_floating(DType dtype) {
  return dtype == DType::f32 || dtype == DType::f64 || dtype == DType::f16 || dtype == DType::bf16;
}

bool is_integer(DType dtype) {
  switch (dtype) {
    case DType::i64:
    case DType::i32:
    case DType::i16:
    case DType::i8:
    case DType::u64:
    case DType::u32:
    case DType::u16:
    case DType::u8: return true;
    default: return false;
  }
}

float float16_to_float(Float16 value) {
  const uint32_t sign = static_cast<uint32_t>(value.bits & 0x8000u) << 16;
  const uint32_t exponent = (value.bits >> 10) & 0x1fu;
  const uint32_t mantissa = value.bits & 0x3ffu;
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24.
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 0x1f) {
    return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));  // inf or nan
  }
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

Float16 float_to_float16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs_bits = bits & 0x7fffffffu;
  if (abs_bits >= 0x7f800000u) {  // inf or nan
    return {static_cast<uint16_t>(sign | 0x7c00u | (abs_bits > 0x7f800000u ? 0x200u : 0u))};
  }
  if (abs_bits >= 0x477ff000u) {  // rounds to a value above the largest half: inf
    return {static_cast<uint16_t>(sign | 0x7c00u)};
  }
  if (abs_bits < 0x38800000u) {  // below the smallest normal half: subnormal or zero
    const float magnitude = std::bit_cast<float>(abs_bits);
    const float scaled = std::nearbyint(magnitude * 16777216.0f);  // 2^24, round to nearest even
    return {static_cast<uint16_t>(sign | static_cast<uint16_t>(scaled))};
  }
  // Normal: rebias the exponent and round the 13 dropped mantissa bits to nearest even.
  const uint32_t rebased = abs_bits - (112u << 23);
  const uint32_t round = 0xfffu + ((rebased >> 13) & 1u);
  return {static_cast<uint16_t>(sign | ((rebased + round) >> 13))};
}

float bfloat16_to_float(BFloat16 value) {
  return std::bit_cast<float>(static_cast<uint32_t>(value.bits) << 16);
}

BFloat16 float_to_bfloat16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {
    return {static_cast<uint16_t>((bits >> 16) | 0x40u)};  // keep nan a quiet nan
  }
  const uint32_t round = 0x7fffu + ((bits >> 16) & 1u);
  return {static_cast<uint16_t>((bits + round) >> 16)};
}

}  // namespace kiln
