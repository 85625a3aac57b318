#include "backends/native/fft.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <utility>
#include <vector>

namespace kiln::native {
namespace {

// The largest prime factor the mixed-radix transform takes: a radix-p pass costs p complex
// multiply-adds per value, so lengths made of small primes (audio frames of 400, 441 or 480 samples)
// cost a few times a power of two's, where Bluestein would cost ten or more.
constexpr int64_t kMaxRadix = 13;
// Up to this length, a length with a larger prime factor is summed directly: n^2 complex
// multiply-adds stay below Bluestein's three power-of-two FFTs of at least 2n - 1 points (each
// ~5 m log2 m operations) plus its chirp products.
constexpr int64_t kMaxDirectLength = 64;

// a * b without std::complex's operator*, which calls __muldc3 to recover infinities and NaNs
// (C99 Annex G) and is several times slower in these loops; signals are finite, and a NaN in one
// still propagates.
inline FftPlan::Complex multiply(FftPlan::Complex a, FftPlan::Complex b) {
  return {a.real() * b.real() - a.imag() * b.imag(), a.real() * b.imag() + a.imag() * b.real()};
}

bool is_power_of_two(int64_t n) {
  return n > 0 && (n & (n - 1)) == 0;
}

// n's radices for the mixed-radix transform (4s, then a 2, then odd primes), or empty when n has a
// prime factor above kMaxRadix.
std::vector<int64_t> small_factors(int64_t n) {
  std::vector<int64_t> factors;
  while (n % 4 == 0) {
    factors.push_back(4);
    n /= 4;
  }
  for (int64_t p = 2; p <= kMaxRadix && n > 1; ++p) {
    while (n % p == 0) {
      factors.push_back(p);
      n /= p;
    }
  }
  if (n != 1) return {};
  return factors;
}

// e^{-2 pi i k / n}, from k / n reduced to [0, 1) so long transforms keep their twiddles exact.
FftPlan::Complex unit_root(int64_t k, int64_t n) {
  const double angle = -2.0 * std::numbers::pi * static_cast<double>(k % n) / static_cast<double>(n);
  return {std::cos(angle), std::sin(angle)};
}

}  // namespace

FftPlan::FftPlan(int64_t length) : length_(length) {
  if (is_power_of_two(length)) {
    method_ = Method::radix2;
    twiddles_.resize(static_cast<size_t>(length / 2));
    for (int64_t k = 0; k < length / 2; ++k) twiddles_[k] = unit_root(k, length);
  } else if (std::vector<int64_t> factors = small_factors(length); !factors.empty()) {
    method_ = Method::mixed_radix;
    factors_ = std::move(factors);
    scratch_size_ = length;
    twiddles_.resize(static_cast<size_t>(length));
    for (int64_t k = 0; k < length; ++k) twiddles_[k] = unit_root(k, length);
  } else if (length <= kMaxDirectLength) {
    method_ = Method::direct;
    scratch_size_ = length;
    twiddles_.resize(static_cast<size_t>(length));
    for (int64_t k = 0; k < length; ++k) twiddles_[k] = unit_root(k, length);
  } else {
    method_ = Method::bluestein;
    int64_t padded = 1;
    while (padded < 2 * length - 1) padded *= 2;
    convolution_ = std::make_shared<const FftPlan>(padded);
    scratch_size_ = padded;
    // jk = (j^2 + k^2 - (k - j)^2) / 2, so e^{-2 pi i jk / n} = w[j] w[k] conj(w[k - j]) with
    // w[j] = e^{-pi i j^2 / n}; j^2 is reduced mod 2n, the chirp's period, before the angle is taken.
    chirp_.resize(static_cast<size_t>(length));
    for (int64_t j = 0; j < length; ++j) {
      const int64_t square = (j * j) % (2 * length);
      const double angle = -std::numbers::pi * static_cast<double>(square) / static_cast<double>(length);
      chirp_[j] = {std::cos(angle), std::sin(angle)};
    }
    // conj(w[m]) at m and at -m (wrapped to padded - m): the circular convolution then sums k - j over
    // (-n, n) without aliasing, as padded >= 2n - 1.
    chirp_filter_.assign(static_cast<size_t>(padded), Complex(0, 0));
    chirp_filter_[0] = std::conj(chirp_[0]);
    for (int64_t m = 1; m < length; ++m) {
      chirp_filter_[m] = std::conj(chirp_[m]);
      chirp_filter_[padded - m] = std::conj(chirp_[m]);
    }
    convolution_->transform(chirp_filter_.data(), false, nullptr);
  }
}

double FftPlan::table_bytes(int64_t length) {
  const double value = sizeof(Complex);
  if (is_power_of_two(length)) return value * static_cast<double>(length) / 2;
  if (!small_factors(length).empty() || length <= kMaxDirectLength)
    return value * static_cast<double>(length);
  int64_t padded = 1;
  while (padded < 2 * std::min(length, kMaxLength) - 1) padded *= 2;
  return value * static_cast<double>(length + padded) + table_bytes(padded);
}

int64_t FftPlan::cost() const {
  const auto log2_ceil = [](int64_t n) {
    int64_t bits = 0;
    while ((int64_t{1} << bits) < n) ++bits;
    return std::max<int64_t>(bits, 1);
  };
  switch (method_) {
    case Method::radix2:
      return 5 * length_ * log2_ceil(length_);
    case Method::mixed_radix: {
      int64_t passes = 0;
      for (int64_t radix : factors_) passes += radix;
      return 8 * length_ * passes;
    }
    case Method::direct:
      return 8 * length_ * length_;
    case Method::bluestein:
      return 3 * convolution_->cost() + 12 * length_;
  }
  return length_;
}

void FftPlan::transform(Complex* data, bool inverse, Complex* scratch) const {
  // The inverse is the forward transform conjugated on both sides: conj(DFT(conj(x))).
  if (inverse) {
    for (int64_t i = 0; i < length_; ++i) data[i] = std::conj(data[i]);
  }
  forward(data, scratch);
  if (inverse) {
    for (int64_t i = 0; i < length_; ++i) data[i] = std::conj(data[i]);
  }
}

void FftPlan::forward(Complex* data, Complex* scratch) const {
  switch (method_) {
    case Method::radix2:
      radix2_forward(data);
      break;
    case Method::mixed_radix:
      mixed_radix_forward(data, 1, scratch, length_, 0);
      std::copy(scratch, scratch + length_, data);
      break;
    case Method::direct:
      direct_forward(data, scratch);
      break;
    case Method::bluestein:
      bluestein_forward(data, scratch);
      break;
  }
}

void FftPlan::radix2_forward(Complex* data) const {
  const int64_t n = length_;
  for (int64_t i = 1, j = 0; i < n; ++i) {
    int64_t bit = n >> 1;
    for (; j & bit; bit >>= 1) j ^= bit;
    j ^= bit;
    if (i < j) std::swap(data[i], data[j]);
  }
  for (int64_t half = 1; half < n; half *= 2) {
    const int64_t stride = n / (2 * half);  // twiddle k of this stage is twiddles_[k * stride]
    for (int64_t start = 0; start < n; start += 2 * half) {
      for (int64_t k = 0; k < half; ++k) {
        const Complex odd = multiply(data[start + half + k], twiddles_[k * stride]);
        const Complex even = data[start + k];
        data[start + k] = even + odd;
        data[start + half + k] = even - odd;
      }
    }
  }
}

void FftPlan::mixed_radix_forward(const Complex* in, int64_t stride, Complex* out, int64_t count,
                                  size_t level) const {
  // Decimation in time: the p interleaved subsequences in[q], in[q + p], ... (q < p) have DFTs Y_q of
  // length m = count / p, and X[k + r m] = sum_q (W^{qk} Y_q[k]) e^{-2 pi i qr / p}, W = e^{-2 pi i / count}.
  const int64_t radix = factors_[level];
  const int64_t m = count / radix;
  if (m == 1) {
    for (int64_t q = 0; q < radix; ++q) out[q] = in[q * stride];
  } else {
    for (int64_t q = 0; q < radix; ++q)
      mixed_radix_forward(in + q * stride, stride * radix, out + q * m, m, level + 1);
  }
  // Twiddles of this level's length, and of the radix-point DFT, as strides into the full table.
  const int64_t count_step = length_ / count;
  const int64_t radix_step = length_ / radix;
  Complex terms[kMaxRadix];
  for (int64_t k = 0; k < m; ++k) {
    for (int64_t q = 0; q < radix; ++q) terms[q] = multiply(out[q * m + k], twiddles_[q * k * count_step]);
    for (int64_t r = 0; r < radix; ++r) {
      Complex sum = terms[0];
      int64_t index = 0;  // q r mod radix, advanced by r per q
      for (int64_t q = 1; q < radix; ++q) {
        index += r;
        if (index >= radix) index -= radix;
        sum += multiply(terms[q], twiddles_[index * radix_step]);
      }
      out[k + r * m] = sum;
    }
  }
}

void FftPlan::direct_forward(Complex* data, Complex* scratch) const {
  const int64_t n = length_;
  for (int64_t k = 0; k < n; ++k) {
    Complex sum(0, 0);
    int64_t index = 0;  // j * k mod n, advanced by k per j
    for (int64_t j = 0; j < n; ++j) {
      sum += multiply(data[j], twiddles_[index]);
      index += k;
      if (index >= n) index -= n;
    }
    scratch[k] = sum;
  }
  std::copy(scratch, scratch + n, data);
}

void FftPlan::bluestein_forward(Complex* data, Complex* scratch) const {
  const int64_t n = length_;
  const int64_t padded = convolution_->length();
  for (int64_t j = 0; j < n; ++j) scratch[j] = multiply(data[j], chirp_[j]);
  std::fill(scratch + n, scratch + padded, Complex(0, 0));
  convolution_->transform(scratch, false, nullptr);
  for (int64_t i = 0; i < padded; ++i) scratch[i] = multiply(scratch[i], chirp_filter_[i]);
  convolution_->transform(scratch, true, nullptr);
  const double scale = 1.0 / static_cast<double>(padded);
  for (int64_t k = 0; k < n; ++k) data[k] = multiply(scratch[k], chirp_[k]) * scale;
}

}  // namespace kiln::native
