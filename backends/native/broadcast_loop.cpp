#include "backends/native/broadcast_loop.h"

#include "ops/broadcast.h"

namespace kiln::native {

BroadcastLoop::BroadcastLoop(const Shape& output, const std::vector<Shape>& inputs) {
  const size_t count = inputs.size();
  std::vector<std::vector<int64_t>> strides;
  for (const Shape& shape : inputs) strides.push_back(broadcast_strides(shape, output));
  // Merge dim d into d+1 (from the right) when, for every input, stepping over dim d equals
  // stepping over the whole block of d+1.
  std::vector<int64_t> dims;
  std::vector<std::vector<int64_t>> merged(count);
  for (size_t d = 0; d < output.size(); ++d) {
    if (output[d] == 1) continue;  // size-1 dims never move an index
    bool can_merge = !dims.empty();
    for (size_t i = 0; i < count && can_merge; ++i) {
      can_merge = merged[i].back() == strides[i][d] * output[d];
    }
    if (can_merge) {
      dims.back() *= output[d];
      for (size_t i = 0; i < count; ++i) merged[i].back() = strides[i][d];
    } else {
      dims.push_back(output[d]);
      for (size_t i = 0; i < count; ++i) merged[i].push_back(strides[i][d]);
    }
  }
  row_strides_.assign(count, 0);
  outer_strides_.assign(count, {});
  if (dims.empty()) return;  // a single element
  row_size_ = dims.back();
  for (size_t i = 0; i < count; ++i) {
    row_strides_[i] = merged[i].back();
    outer_strides_[i].assign(merged[i].begin(), merged[i].end() - 1);
  }
  outer_shape_.assign(dims.begin(), dims.end() - 1);
  for (int64_t dim : outer_shape_) rows_ *= dim;
}

int64_t BroadcastLoop::offset(size_t input, int64_t row) const {
  int64_t result = 0;
  const std::vector<int64_t>& strides = outer_strides_[input];
  for (size_t d = outer_shape_.size(); d-- > 0;) {
    const int64_t index = row % outer_shape_[d];
    row /= outer_shape_[d];
    result += index * strides[d];
  }
  return result;
}

}  // namespace kiln::native
