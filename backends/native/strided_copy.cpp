#include "backends/native/strided_copy.h"

#include <cstring>

#include "runtime/parallel.h"

namespace kiln::native {
namespace {

template <typename T>
void copy_row(T* dst, const T* src, int64_t count, int64_t stride) {
  for (int64_t i = 0; i < count; ++i) dst[i] = src[i * stride];
}

}  // namespace

void strided_copy(void* dst, const void* src, size_t element_size, const Shape& shape,
                  const std::vector<int64_t>& src_strides, int64_t src_offset) {
  const int64_t numel = checked_numel(shape);
  if (numel == 0) return;
  if (shape.empty()) {
    std::memcpy(dst, static_cast<const char*>(src) + src_offset * static_cast<int64_t>(element_size), element_size);
    return;
  }
  const size_t rank = shape.size();
  const int64_t row = shape.back();
  const int64_t inner_stride = src_strides.back();
  const int64_t rows = numel / row;
  const auto* src_bytes = static_cast<const char*>(src);
  auto* dst_bytes = static_cast<char*>(dst);
  const int64_t esize = static_cast<int64_t>(element_size);
  parallel_for(0, rows, copy_cost(row * esize), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      // Offset of this row's first element in src, from its multi-index over the outer dims.
      int64_t rest = r;
      int64_t offset = src_offset;
      for (size_t d = rank - 1; d-- > 0;) {
        offset += (rest % shape[d]) * src_strides[d];
        rest /= shape[d];
      }
      const char* from = src_bytes + offset * esize;
      char* to = dst_bytes + r * row * esize;
      if (inner_stride == 1) {
        std::memcpy(to, from, static_cast<size_t>(row * esize));
        continue;
      }
      switch (element_size) {
        case 1:
          copy_row(reinterpret_cast<uint8_t*>(to), reinterpret_cast<const uint8_t*>(from), row, inner_stride);
          break;
        case 2:
          copy_row(reinterpret_cast<uint16_t*>(to), reinterpret_cast<const uint16_t*>(from), row,
                   inner_stride);
          break;
        case 4:
          copy_row(reinterpret_cast<uint32_t*>(to), reinterpret_cast<const uint32_t*>(from), row,
                   inner_stride);
          break;
        default:
          copy_row(reinterpret_cast<uint64_t*>(to), reinterpret_cast<const uint64_t*>(from), row,
                   inner_stride);
          break;
      }
    }
  });
}

}  // namespace kiln::native
