// Native random kernels. One generator, Philox4x32-10 (philox.h), keyed per run:
// - with a `seed` attribute, the key is mix64 of the float seed's bits: the same numbers on every
//   run, in every process and at every thread count (two nodes with the same seed draw the same);
// - without one, the key is mix64 of the process's entropy (std::random_device and the clock, read
//   once) combined with a process-wide atomic count of unseeded draws, taken once per kernel run:
//   every run, every node and every concurrent run gets its own stream, and the only state shared
//   between runs is that atomic counter.
// Element i reads only block i / 2 (one half of it, or for a normal pair both halves), so how
// parallel_for splits the work changes nothing.
#include "ops/random.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <limits>
#include <numbers>
#include <random>

#include "backends/base/function_kernel.h"
#include "backends/native/element_math.h"
#include "backends/native/native_backend.h"
#include "backends/native/philox.h"
#include "backends/native/thread_scratch.h"
#include "runtime/parallel.h"

namespace kiln::native {
namespace {

// Rough scalar operations per element (a Philox block is ~40), for parallel_for's threshold.
constexpr int64_t kNormalCost = 60;
constexpr int64_t kUniformCost = 30;

uint64_t process_entropy() {
  static const uint64_t entropy = [] {
    uint64_t value =
        static_cast<uint64_t>(std::chrono::high_resolution_clock::now().time_since_epoch().count());
    try {
      std::random_device device;
      value ^= (uint64_t{device()} << 32) | device();
    } catch (const std::exception&) {
      // No entropy source: the clock alone still differs between processes.
    }
    return mix64(value);
  }();
  return entropy;
}

std::atomic<uint64_t> unseeded_draws{0};

// Where each run's key comes from (see the top of the file).
struct KeySource {
  bool seeded = false;
  uint64_t seeded_key = 0;

  explicit KeySource(const RandomParams& params) : seeded(params.seeded) {
    // -0 and 0 are the same seed.
    const float seed = params.seed == 0.0f ? 0.0f : params.seed;
    seeded_key = mix64(std::bit_cast<uint32_t>(seed));
  }
  uint64_t key_for_this_run() const {
    if (seeded) return seeded_key;
    return mix64(process_entropy() ^ mix64(unseeded_draws.fetch_add(1, std::memory_order_relaxed)));
  }
};

// The uniform double of element i: the first or second half of block i / 2.
double uniform_of(const PhiloxBlock& block, int64_t i) {
  return (i & 1) == 0 ? unit_interval(block[0], block[1]) : unit_interval(block[2], block[3]);
}

template <typename T>
double as_double(T value) {
  return static_cast<double>(to_compute(value));
}

// The next value of T toward -infinity.
template <typename T>
T next_down(T value) {
  if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) {
    if ((value.bits & 0x7fff) == 0) return T{0x8001};  // from +-0 to the smallest negative subnormal
    const bool negative = (value.bits & 0x8000) != 0;
    return T{static_cast<uint16_t>(negative ? value.bits + 1 : value.bits - 1)};
  } else {
    return std::nextafter(value, -std::numeric_limits<T>::infinity());
  }
}

// low + (high - low) u in T, kept below high when rounding to T would reach it.
template <typename T>
T uniform_value(double u, double low, double high) {
  T value = from_compute<T>(low + (high - low) * u);
  if (high > low) {
    while (as_double(value) >= high) value = next_down(value);
  }
  return value;
}

KernelOrReason rejected_dtype(const std::string& op, DType dtype) {
  return KernelOrReason::rejected(RefusalKind::unsupported_dtype,
                                  str_cat("native ", op, " does not produce ", dtype_name(dtype)));
}

// ---- RandomNormal, RandomNormalLike --------------------------------------------------------------

KernelOrReason make_normal(const OpSpec& spec, std::span<const TensorInfo>) {
  const RandomParams params = random_params(spec);
  const KeySource keys(params);
  return visit_floating(
      params.dtype,
      [&](auto tag) -> KernelOrReason {
        using T = decltype(tag);
        return make_kernel("native:random_normal", [=](std::span<const Tensor>, std::span<Tensor> outputs) {
          const uint64_t key = keys.key_for_this_run();
          T* dst = outputs[0].data<T>();
          const int64_t count = outputs[0].numel();
          parallel_for(0, (count + 1) / 2, 2 * kNormalCost, [&](int64_t begin, int64_t end) {
            for (int64_t b = begin; b < end; ++b) {
              // Box-Muller: two uniforms give two independent normals, r cos(theta) for element 2b and
              // r sin(theta) for 2b + 1; 1 - u is in (0, 1], so the logarithm is finite.
              const PhiloxBlock block = philox_block(key, static_cast<uint64_t>(b));
              const double radius = std::sqrt(-2.0 * std::log(1.0 - unit_interval(block[0], block[1])));
              const double angle = 2.0 * std::numbers::pi * unit_interval(block[2], block[3]);
              dst[2 * b] = from_compute<T>(params.mean + params.scale * radius * std::cos(angle));
              if (2 * b + 1 < count)
                dst[2 * b + 1] = from_compute<T>(params.mean + params.scale * radius * std::sin(angle));
            }
          });
        });
      },
      [&] { return rejected_dtype(spec.op_type, params.dtype); });
}

// ---- RandomUniform, RandomUniformLike ------------------------------------------------------------

KernelOrReason make_uniform(const OpSpec& spec, std::span<const TensorInfo>) {
  const RandomParams params = random_params(spec);
  const KeySource keys(params);
  return visit_floating(
      params.dtype,
      [&](auto tag) -> KernelOrReason {
        using T = decltype(tag);
        return make_kernel("native:random_uniform", [=](std::span<const Tensor>, std::span<Tensor> outputs) {
          const uint64_t key = keys.key_for_this_run();
          T* dst = outputs[0].data<T>();
          const int64_t count = outputs[0].numel();
          parallel_for(0, (count + 1) / 2, 2 * kUniformCost, [&](int64_t begin, int64_t end) {
            for (int64_t b = begin; b < end; ++b) {
              const PhiloxBlock block = philox_block(key, static_cast<uint64_t>(b));
              for (int64_t i = 2 * b; i < std::min(2 * b + 2, count); ++i) {
                dst[i] = uniform_value<T>(uniform_of(block, i), params.low, params.high);
              }
            }
          });
        });
      },
      [&] { return rejected_dtype(spec.op_type, params.dtype); });
}

// ---- Bernoulli -----------------------------------------------------------------------------------

template <typename T>
T zero_or_one(bool one) {
  if constexpr (is_half_v<T>) {
    return from_compute<T>(one ? 1.0f : 0.0f);
  } else {
    return static_cast<T>(one);
  }
}

KernelOrReason make_bernoulli(const OpSpec& spec, std::span<const TensorInfo>) {
  const RandomParams params = random_params(spec);
  const KeySource keys(params);
  const DType input_dtype = spec.input(0).dtype;
  return visit_floating(
      input_dtype,
      [&](auto input_tag) -> KernelOrReason {
        using In = decltype(input_tag);
        return visit_dtype(params.dtype, [&](auto output_tag) -> KernelOrReason {
          using Out = decltype(output_tag);
          return make_kernel(
              "native:bernoulli", [=](std::span<const Tensor> inputs, std::span<Tensor> outputs) {
                const uint64_t key = keys.key_for_this_run();
                const In* src = inputs[0].data<In>();
                Out* dst = outputs[0].data<Out>();
                const int64_t count = outputs[0].numel();
                parallel_for(0, (count + 1) / 2, 2 * kUniformCost, [&](int64_t begin, int64_t end) {
                  for (int64_t b = begin; b < end; ++b) {
                    const PhiloxBlock block = philox_block(key, static_cast<uint64_t>(b));
                    for (int64_t i = 2 * b; i < std::min(2 * b + 2, count); ++i) {
                      const double p = as_double(src[i]);
                      // Also false for NaN.
                      KILN_CHECK(p >= 0 && p <= 1, invalid_argument, "Bernoulli input[", i, "] = ", p,
                                 " is not a probability in [0, 1]");
                      dst[i] = zero_or_one<Out>(uniform_of(block, i) < p);
                    }
                  }
                });
              });
        });
      },
      [&] { return rejected_dtype("Bernoulli", input_dtype); });
}

// ---- Multinomial ---------------------------------------------------------------------------------

struct MultinomialCdfTag {};

KernelOrReason make_multinomial(const OpSpec& spec, std::span<const TensorInfo>) {
  const RandomParams params = random_params(spec);
  const KeySource keys(params);
  const DType input_dtype = spec.input(0).dtype;
  const int64_t classes = spec.input(0).shape[1];
  const int64_t samples = params.sample_size;
  const bool wide = params.dtype == DType::i64;
  return visit_floating(
      input_dtype,
      [&](auto tag) -> KernelOrReason {
        using T = decltype(tag);
        return make_kernel("native:multinomial", [=](std::span<const Tensor> inputs,
                                                     std::span<Tensor> outputs) {
          const uint64_t key = keys.key_for_this_run();
          const T* logits = inputs[0].data<T>();
          const int64_t rows = inputs[0].dim(0);
          parallel_for(0, rows, 30 * classes + kUniformCost * samples, [&](int64_t begin, int64_t end) {
            auto* cdf = reinterpret_cast<double*>(
                thread_scratch_floats<MultinomialCdfTag>(static_cast<size_t>(classes) * 2));
            for (int64_t row = begin; row < end; ++row) {
              // The input holds unnormalised log-probabilities: the class probabilities are their
              // softmax, accumulated as exp(logit - max) so no term overflows.
              const T* line = logits + row * classes;
              double max_logit = -std::numeric_limits<double>::infinity();
              for (int64_t c = 0; c < classes; ++c) {
                const double logit = as_double(line[c]);
                KILN_CHECK(!std::isnan(logit) && logit != std::numeric_limits<double>::infinity(),
                           invalid_argument, "Multinomial input[", row, ", ", c, "] = ", logit,
                           " is not a log-probability (NaN or +inf)");
                max_logit = std::max(max_logit, logit);
              }
              KILN_CHECK(max_logit > -std::numeric_limits<double>::infinity(), invalid_argument,
                         "Multinomial input row ", row, " gives every class probability 0 (all logits -inf)");
              double total = 0;
              for (int64_t c = 0; c < classes; ++c) {
                total += std::exp(as_double(line[c]) - max_logit);
                cdf[c] = total;
              }
              for (int64_t s = 0; s < samples; ++s) {
                const int64_t i = row * samples + s;
                const double target = uniform_of(philox_block(key, static_cast<uint64_t>(i / 2)), i) * total;
                // The first class whose cumulative weight exceeds the target; a target rounded up to
                // the total takes the last class with a nonzero weight.
                int64_t chosen = std::upper_bound(cdf, cdf + classes, target) - cdf;
                if (chosen == classes) {
                  chosen = classes - 1;
                  while (chosen > 0 && cdf[chosen] == cdf[chosen - 1]) --chosen;
                }
                if (wide) {
                  outputs[0].data<int64_t>()[i] = chosen;
                } else {
                  outputs[0].data<int32_t>()[i] = static_cast<int32_t>(chosen);
                }
              }
            }
          });
        });
      },
      [&] { return rejected_dtype("Multinomial", input_dtype); });
}

constexpr KernelEntry kKernels[] = {
    {"RandomNormal", make_normal},       {"RandomNormalLike", make_normal}, {"RandomUniform", make_uniform},
    {"RandomUniformLike", make_uniform}, {"Bernoulli", make_bernoulli},     {"Multinomial", make_multinomial},
};

}  // namespace

std::span<const KernelEntry> random_kernels() {
  return kKernels;
}

}  // namespace kiln::native
