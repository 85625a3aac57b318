// Winograd's minimal filtering F(m x m, 3 x 3) (Lavin & Gray, "Fast Algorithms for Convolutional
// Neural Networks", 2016): an m x m block of a 3 x 3 correlation's outputs from an alpha x alpha
// input tile, alpha = m + 2, as
//   Y = A^T [ (G g G^T) (.) (B^T d B) ] A
// with (.) an element-wise product. Summed over input channels, the element-wise stage is alpha^2
// independent matrix products, and each output needs alpha^2 / m^2 of them instead of 9 multiplies:
// 4 / 9 = 0.44 for F(2 x 2), 0.25 for F(4 x 4). The price is accuracy: the transforms' coefficients
// amplify rounding error, the more the larger the tile; F(4)'s interpolation points are chosen to
// keep that small (below).
//
// The 1-D transforms are written out term by term, without the zero coefficients, for any T that
// has +, - and multiplication by a float: a float, or a GCC vector of channels.
#pragma once

#include <array>

namespace kiln::winograd {

// The tiles kiln runs, by their output block size m.
inline constexpr int kTileSizes[] = {4, 2};

template <int kM>
struct Transforms;

// F(2, 3) on the interpolation points 0, 1, -1 and infinity.
template <>
struct Transforms<2> {
  static constexpr int kAlpha = 4;
  // G: the 3 filter taps to alpha values, G g.
  static constexpr std::array<std::array<double, 3>, kAlpha> kG{
      {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}}};

  // o = B^T d.
  template <typename T>
  [[gnu::always_inline]] static void input(const T* d, T* o) {
    o[0] = d[0] - d[2];
    o[1] = d[1] + d[2];
    o[2] = d[2] - d[1];
    o[3] = d[1] - d[3];
  }
  // y = A^T s.
  template <typename T>
  [[gnu::always_inline]] static void output(const T* s, T* y) {
    y[0] = s[0] + s[1] + s[2];
    y[1] = s[1] - s[2] - s[3];
  }
};

// F(4, 3) on the points 0, 2/3, -2/3, 3/2, -3/2 and infinity. The usual points (0, 1, -1, 2, -2)
// put coefficients up to 8 in A^T and 1/24 in G: the transformed inputs and filters then carry terms
// far larger than the outputs they cancel into, and the products' float32 sums round those. Points
// nearer 1 in magnitude balance the two transforms; of the symmetric sets {0, ±a, ±b} over simple
// fractions, this one gave the lowest probe error, about a quarter of the usual points'
// (docs/backends.md, "Winograd", has the per-layer measurements). A pair ±p shares its even and odd
// parts, so the transforms cost no more operations than the usual points'.
template <>
struct Transforms<4> {
  static constexpr int kAlpha = 6;
  static constexpr std::array<std::array<double, 3>, kAlpha> kG{{{1, 0, 0},
                                                                 {-81.0 / 130, -27.0 / 65, -18.0 / 65},
                                                                 {-81.0 / 130, 27.0 / 65, -18.0 / 65},
                                                                 {8.0 / 65, 12.0 / 65, 18.0 / 65},
                                                                 {8.0 / 65, -12.0 / 65, 18.0 / 65},
                                                                 {0, 0, 1}}};

  // Row i of B^T for the point pair ±p is (d4 - d2 / p^2) ± (p d3 - d1 / p); rows 0 and 5 hold
  // 1 / p^2 + 1 / q^2 = 97 / 36 for the two pairs.
  template <typename T>
  [[gnu::always_inline]] static void input(const T* d, T* o) {
    constexpr float kEnds = 97.0f / 36.0f;
    const T even23 = d[4] - 2.25f * d[2];
    const T odd23 = (2.0f / 3.0f) * d[3] - 1.5f * d[1];
    const T even32 = d[4] - (4.0f / 9.0f) * d[2];
    const T odd32 = 1.5f * d[3] - (2.0f / 3.0f) * d[1];
    o[0] = d[0] - kEnds * d[2] + d[4];
    o[1] = even23 + odd23;
    o[2] = even23 - odd23;
    o[3] = even32 + odd32;
    o[4] = even32 - odd32;
    o[5] = d[1] - kEnds * d[3] + d[5];
  }
  // Row r of A^T holds p^r at point p.
  template <typename T>
  [[gnu::always_inline]] static void output(const T* s, T* y) {
    const T sum23 = s[1] + s[2];
    const T diff23 = s[1] - s[2];
    const T sum32 = s[3] + s[4];
    const T diff32 = s[3] - s[4];
    y[0] = s[0] + sum23 + sum32;
    y[1] = (2.0f / 3.0f) * diff23 + 1.5f * diff32;
    y[2] = (4.0f / 9.0f) * sum23 + 2.25f * sum32;
    y[3] = (8.0f / 27.0f) * diff23 + 3.375f * diff32 + s[5];
  }
};

}  // namespace kiln::winograd
