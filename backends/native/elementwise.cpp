// The native elementwise family's op table; the kernels live in unary.cpp, binary.cpp and cast.cpp.
#include <cctype>

#include "backends/native/elementwise.h"
#include "backends/native/native_backend.h"
#include "core/error.h"

namespace kiln::native {

namespace elementwise {

std::string kernel_name(const OpSpec& spec) {
  std::string name = "native:";
  for (char c : spec.op_type) name += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return name;
}

KernelOrReason unsupported_dtype(const OpSpec& spec, DType dtype) {
  return KernelOrReason::rejected(RefusalKind::unsupported_dtype,
                                  str_cat("native ", spec.op_type, " does not support ", dtype_name(dtype)));
}

}  // namespace elementwise

namespace {

using namespace elementwise;

constexpr KernelEntry kKernels[] = {
    // unary.cpp
    {"Relu", make_relu},
    {"Neg", make_neg},
    {"Abs", make_abs},
    {"Sign", make_sign},
    {"Sigmoid", make_sigmoid},
    {"Tanh", make_tanh},
    {"Erf", make_erf},
    {"Sqrt", make_sqrt},
    {"Exp", make_exp},
    {"Log", make_log},
    {"Reciprocal", make_reciprocal},
    {"Floor", make_floor},
    {"Ceil", make_ceil},
    {"Round", make_round},
    {"Sin", make_sin},
    {"Cos", make_cos},
    {"Tan", make_tan},
    {"Asin", make_asin},
    {"Acos", make_acos},
    {"Atan", make_atan},
    {"Sinh", make_sinh},
    {"Cosh", make_cosh},
    {"Asinh", make_asinh},
    {"Acosh", make_acosh},
    {"Atanh", make_atanh},
    {"Softplus", make_softplus},
    {"Softsign", make_softsign},
    {"LeakyRelu", make_leaky_relu},
    {"Elu", make_elu},
    {"Selu", make_selu},
    {"Celu", make_celu},
    {"HardSigmoid", make_hard_sigmoid},
    {"HardSwish", make_hard_swish},
    {"ThresholdedRelu", make_thresholded_relu},
    {"Shrink", make_shrink},
    {"Not", make_not},
    {"IsNaN", make_is_nan},
    {"IsInf", make_is_inf},
    {"Clip", make_clip},
    // binary.cpp
    {"Add", make_add},
    {"Sub", make_sub},
    {"Mul", make_mul},
    {"Div", make_div},
    {"Mod", make_mod},
    {"Pow", make_pow},
    {"PRelu", make_prelu},
    {"Max", make_max},
    {"Min", make_min},
    {"Sum", make_sum},
    {"Mean", make_mean},
    {"Equal", make_equal},
    {"Less", make_less},
    {"Greater", make_greater},
    {"LessOrEqual", make_less_or_equal},
    {"GreaterOrEqual", make_greater_or_equal},
    {"And", make_and},
    {"Or", make_or},
    {"Xor", make_xor},
    {"BitShift", make_bitshift},
    {"BitwiseAnd", make_bitwise_and},
    {"BitwiseOr", make_bitwise_or},
    {"BitwiseXor", make_bitwise_xor},
    {"BitwiseNot", make_bitwise_not},
    {"Gelu", make_gelu},
    {"Where", make_where},
    // cast.cpp
    {"Cast", make_cast},
    {"CastLike", make_cast},
};

}  // namespace

std::span<const KernelEntry> elementwise_kernels() { return kKernels; }

}  // namespace kiln::native
