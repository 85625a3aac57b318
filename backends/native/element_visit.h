// Helpers for kernels that move whole elements without looking at their values (data movement,
// indexing, nearest-neighbour resizing): one kernel serves every dtype of the same width.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace kiln::native {

// The number of elements in dims [begin, end) of `shape`.
inline int64_t product(const Shape& shape, size_t begin, size_t end) {
  int64_t result = 1;
  for (size_t d = begin; d < end; ++d) result *= shape[d];
  return result;
}

// Calls fn(U{}) with an unsigned integer type as wide as one element (1, 2, 4 or 8 bytes), so a
// copy loop moves whole elements; other widths reach fallback().
template <typename Fn, typename Fallback>
void visit_element_size(size_t element_size, Fn&& fn, Fallback&& fallback) {
  switch (element_size) {
    case 1:
      fn(uint8_t{});
      break;
    case 2:
      fn(uint16_t{});
      break;
    case 4:
      fn(uint32_t{});
      break;
    case 8:
      fn(uint64_t{});
      break;
    default:
      fallback();
      break;
  }
}

// True when visit_element_size has a type for `element_size`.
inline bool is_visitable_element_size(size_t element_size) {
  return element_size == 1 || element_size == 2 || element_size == 4 || element_size == 8;
}

}  // namespace kiln::native
