#include <cmath>
#include <limits>

#include "backends/native/ref/reference.h"

namespace kiln::native::ref {

Values attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                 const AttentionParams& p) {
  Values out;
  out.value.assign(static_cast<size_t>(p.batch * p.l * p.ev), 0.0);
  out.magnitude.assign(out.value.size(), 0.0);
  std::vector<double> scores(static_cast<size_t>(p.s));
  for (int64_t n = 0; n < p.batch; ++n) {
    for (int64_t i = 0; i < p.l; ++i) {
      double maximum = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < p.s; ++j) {
        double dot = 0;
        for (int64_t c = 0; c < p.e; ++c) {
          const double key = p.k_transposed ? k.data<float>()[(n * p.e + c) * p.s + j]
                                            : k.data<float>()[(n * p.s + j) * p.e + c];
          dot += static_cast<double>(q.data<float>()[(n * p.l + i) * p.e + c]) * key;
        }
        double score = p.scale * dot;
        if (p.mask != AttentionMask::none) {
          const int64_t at =
              p.mask_offsets[static_cast<size_t>(n)] + i * p.mask_row_stride + j * p.mask_column_stride;
          if (p.mask == AttentionMask::additive) {
            score += mask.data<float>()[at];
          } else {
            const bool is_true = static_cast<const uint8_t*>(mask.raw_data())[at] != 0;
            if (is_true == (p.mask == AttentionMask::drop)) score = -std::numeric_limits<double>::infinity();
          }
        }
        if (p.causal && j > i) score = -std::numeric_limits<double>::infinity();
        scores[static_cast<size_t>(j)] = score;
        maximum = std::max(maximum, score);
      }
      double sum = 0;
      for (double& score : scores) {
        score = std::exp(score - maximum);
        sum += score;
      }
      for (int64_t c = 0; c < p.ev; ++c) {
        double value = 0;
        double magnitude = 0;
        for (int64_t j = 0; j < p.s; ++j) {
          const double term =
              scores[static_cast<size_t>(j)] / sum * v.data<float>()[(n * p.s + j) * p.ev + c];
          value += term;
          magnitude += std::abs(term);
        }
        out.value[static_cast<size_t>((n * p.l + i) * p.ev + c)] = value;
        out.magnitude[static_cast<size_t>((n * p.l + i) * p.ev + c)] = magnitude;
      }
    }
  }
  return out;
}

}  // namespace kiln::native::ref
