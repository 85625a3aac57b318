// Iterates the output of a broadcasting op row by row. Dimensions that broadcast the same way in
// every input are merged first, so [N,C,H,W] + [C,1,1] becomes rows of H*W elements with the
// second operand constant along each row, and equal shapes become one contiguous row.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "runtime/parallel.h"

namespace kiln::native {

class BroadcastLoop {
 public:
  // `inputs` must broadcast to `output` (shape inference checked that).
  BroadcastLoop(const Shape& output, const std::vector<Shape>& inputs);

  int64_t rows() const { return rows_; }
  int64_t row_size() const { return row_size_; }
  // Element stride (0 or 1) of input i along a row.
  int64_t row_stride(size_t input) const { return row_strides_[input]; }
  // Element offset of input i at the start of output row `row`.
  int64_t offset(size_t input, int64_t row) const;

  // Calls fn(row, offsets) for every row in parallel; `offsets` holds one start offset per input.
  template <typename Fn>
  void for_each_row(int64_t cost_per_element, Fn&& fn) const {
    parallel_for(0, rows_, cost_per_element * row_size_, [&](int64_t begin, int64_t end) {
      std::vector<int64_t> offsets(outer_strides_.size());
      for (int64_t row = begin; row < end; ++row) {
        for (size_t i = 0; i < offsets.size(); ++i) offsets[i] = offset(i, row);
        fn(row, offsets.data());
      }
    });
  }

 private:
  int64_t rows_ = 1;
  int64_t row_size_ = 1;
  std::vector<int64_t> row_strides_;
  std::vector<int64_t> outer_shape_;                 // merged dims before the row dim
  std::vector<std::vector<int64_t>> outer_strides_;  // per input, per outer dim
};

}  // namespace kiln::native
