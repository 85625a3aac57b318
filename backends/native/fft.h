// A discrete Fourier transform of one length, planned once and applied to many signals: DFT and
// STFT plan theirs when their kernel is created and transform every line with it at run time.
// Computed in double whatever the tensors' dtype: an audio frame's sums lose no precision that way,
// and it costs little next to the memory traffic of float32 data.
#pragma once

#include <complex>
#include <cstdint>
#include <memory>
#include <vector>

namespace kiln::native {

class FftPlan {
 public:
  using Complex = std::complex<double>;

  // The longest transform planned: 2^40 points would need 16 TiB of tables, and Bluestein's padded
  // length (a power of two >= 2n - 1) overflows int64 near 2^62.
  static constexpr int64_t kMaxLength = int64_t{1} << 40;

  // 1 <= length <= kMaxLength.
  explicit FftPlan(int64_t length);
  // The bytes a plan of `length` holds (its tables and Bluestein's inner plan), before making it.
  static double table_bytes(int64_t length);

  int64_t length() const { return length_; }
  // Complex values of scratch transform() needs (0 for powers of two).
  int64_t scratch_size() const { return scratch_size_; }
  // Rough count of scalar operations per transform, for parallel_for's inline threshold.
  int64_t cost() const;
  // Replaces data[0, length) by its DFT, X[k] = sum_j x[j] e^{-2 pi i jk / n}, or with e^{+2 pi i jk / n}
  // when inverse (unscaled: the caller divides by n). `scratch` holds scratch_size() values.
  void transform(Complex* data, bool inverse, Complex* scratch) const;

 private:
  enum class Method {
    radix2,       // powers of two: iterative in-place Cooley-Tukey, n log2 n
    mixed_radix,  // lengths whose prime factors are all small (400 = 4 4 5 5): recursive Cooley-Tukey
    direct,       // short lengths with a large prime factor: the O(n^2) sum over the n twiddles
    bluestein,    // longer ones: a convolution of chirps through a power-of-two FFT
  };

  void forward(Complex* data, Complex* scratch) const;
  void radix2_forward(Complex* data) const;
  // The DFT of the `count` values in[0], in[stride], ... into out[0, count), by factors_[level...].
  void mixed_radix_forward(const Complex* in, int64_t stride, Complex* out, int64_t count,
                           size_t level) const;
  void direct_forward(Complex* data, Complex* scratch) const;
  void bluestein_forward(Complex* data, Complex* scratch) const;

  int64_t length_ = 0;
  Method method_ = Method::radix2;
  int64_t scratch_size_ = 0;
  // radix2: e^{-2 pi i k / n} for k < n / 2; mixed_radix and direct: for k < n.
  std::vector<Complex> twiddles_;
  // mixed_radix: the radices, their product n (4s first, then 2, 3, 5, ...).
  std::vector<int64_t> factors_;
  // Bluestein: the chirp w[j] = e^{-pi i j^2 / n} (j < n), the FFT of the padded conjugate chirp the
  // signal is convolved with, and the power-of-two plan of that convolution.
  std::vector<Complex> chirp_;
  std::vector<Complex> chirp_filter_;
  std::shared_ptr<const FftPlan> convolution_;
};

}  // namespace kiln::native
