#include "ops/broadcast.h"

#include <algorithm>

#include "core/error.h"

namespace kiln {

Shape broadcast_shapes(std::span<const Shape> shapes) {
  size_t rank = 0;
  for (const Shape& shape : shapes) rank = std::max(rank, shape.size());
  Shape result(rank, 1);
  for (const Shape& shape : shapes) {
    const size_t offset = rank - shape.size();
    for (size_t i = 0; i < shape.size(); ++i) {
      int64_t& out = result[offset + i];
      const int64_t dim = shape[i];
      if (dim == out || dim == 1) continue;
      if (out == 1) {
        out = dim;
        continue;
      }
      std::string all;
      for (const Shape& s : shapes) all += (all.empty() ? "" : " and ") + shape_to_string(s);
      fail(ErrorKind::invalid_argument, "shapes ", all, " cannot be broadcast together (dim ", offset + i, ": ",
           out, " vs ", dim, ")");
    }
  }
  return result;
}

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  const Shape pair[] = {a, b};
  return broadcast_shapes(pair);
}

std::vector<int64_t> broadcast_strides(const Shape& shape, const Shape& target) {
  KILN_ASSERT(shape.size() <= target.size());
  std::vector<int64_t> strides(target.size(), 0);
  const std::vector<int64_t> own = contiguous_strides(shape);
  const size_t offset = target.size() - shape.size();
  for (size_t i = 0; i < shape.size(); ++i) {
    strides[offset + i] = (shape[i] == 1 && target[offset + i] != 1) ? 0 : own[i];
  }
  return strides;
}

}  // namespace kiln
