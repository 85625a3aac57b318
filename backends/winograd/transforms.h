// Winograd's minimal filtering F(m x m, 3 x 3) (Lavin & Gray, "Fast Algorithms for Convolutional
// Neural Networks", 2016): an m x m block of a 3 x 3 correlation's outputs from an alpha x alpha
// input tile, alpha = m + 2, as
//   Y = A^T [ (G g G^T) (.) (B^T d B) ] A
// with (.) an element-wise product. Summed over input channels, the element-wise stage is alpha^2
// independent matrix products, and each output needs alpha^2 / m^2 of them instead of 9 multiplies:
// 4 / 9 = 0.44 for F(2 x 2), 0.25 for F(4 x 4). The price is accuracy: the transforms' coefficients
// (up to 8 in F(4)'s A, 1/24 in its G) amplify rounding error.
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

// F(4, 3) on the points 0, 1, -1, 2, -2 and infinity.
template <>
struct Transforms<4> {
  static constexpr int kAlpha = 6;
  static constexpr std::array<std::array<double, 3>, kAlpha> kG{{{1.0 / 4, 0, 0},
                                                                 {-1.0 / 6, -1.0 / 6, -1.0 / 6},
                                                                 {-1.0 / 6, 1.0 / 6, -1.0 / 6},
                                                                 {1.0 / 24, 1.0 / 12, 1.0 / 6},
                                                                 {1.0 / 24, -1.0 / 12, 1.0 / 6},
                                                                 {0, 0, 1}}};

  template <typename T>
  [[gnu::always_inline]] static void input(const T* d, T* o) {
    o[0] = 4.0f * d[0] - 5.0f * d[2] + d[4];
    o[1] = d[3] + d[4] - 4.0f * (d[1] + d[2]);
    o[2] = d[4] - d[3] + 4.0f * (d[1] - d[2]);
    o[3] = d[4] - d[2] + 2.0f * (d[3] - d[1]);
    o[4] = d[4] - d[2] + 2.0f * (d[1] - d[3]);
    o[5] = 4.0f * d[1] - 5.0f * d[3] + d[5];
  }
  template <typename T>
  [[gnu::always_inline]] static void output(const T* s, T* y) {
    const T sum12 = s[1] + s[2];
    const T diff12 = s[1] - s[2];
    const T sum34 = s[3] + s[4];
    const T diff34 = s[3] - s[4];
    y[0] = s[0] + sum12 + sum34;
    y[1] = diff12 + 2.0f * diff34;
    y[2] = sum12 + 4.0f * sum34;
    y[3] = diff12 + 8.0f * diff34 + s[5];
  }
};

}  // namespace kiln::winograd
