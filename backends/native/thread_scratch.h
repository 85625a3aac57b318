// Grow-only scratch memory owned by the calling thread, from the current allocator (64-byte
// aligned): kernels stay stateless (each thread has its own buffer per Tag), and repeated runs
// neither allocate nor fault in fresh pages.
#pragma once

#include <cstddef>

#include "core/allocator.h"

namespace kiln::native {

// `count` elements of a trivial type T for the calling thread, valid until its next call with the
// same Tag and T.
template <typename Tag, typename T>
T* thread_scratch(size_t count) {
  thread_local AllocatedBlock buffer;
  if (buffer.data() == nullptr || buffer.size() < count * sizeof(T)) {
    buffer = AllocatedBlock();
    buffer = AllocatedBlock(count * sizeof(T));
  }
  return static_cast<T*>(buffer.data());
}

template <typename Tag>
float* thread_scratch_floats(size_t count) {
  return thread_scratch<Tag, float>(count);
}

}  // namespace kiln::native
