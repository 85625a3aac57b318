#include "backends/onednn/onednn_common.h"

#include <cstring>
#include <memory>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "runtime/threads.h"

namespace kiln::onednn {

const dnnl::engine& engine() {
  static const dnnl::engine instance(dnnl::engine::kind::cpu, 0);
  return instance;
}

dnnl::stream& thread_stream() {
  thread_local dnnl::stream stream(engine());
  return stream;
}

void apply_thread_count() {
#ifdef _OPENMP
  // omp_set_num_threads only sets the calling thread's value, so every thread running kernels
  // applies it; skipping the call when nothing changed keeps the hot path free of it.
  thread_local int applied = 0;
  const int threads = get_num_threads();
  if (threads != applied) {
    omp_set_num_threads(threads);
    applied = threads;
  }
#endif
}

dnnl::memory::desc value_desc(const Shape& shape, Layout layout) {
  if (layout == Layout::nhwc) {
    return dnnl::memory::desc(shape, dnnl::memory::data_type::f32, dnnl::memory::format_tag::nhwc);
  }
  return plain_desc(shape);
}

dnnl::memory::desc plain_desc(const Shape& shape) {
  // A scalar is described as a one-element 1-D value (oneDNN has no rank-0 memory).
  const Shape dims = shape.empty() ? Shape{1} : shape;
  return dnnl::memory::desc(dims, dnnl::memory::data_type::f32, contiguous_strides(dims));
}

std::string implementation_name(const dnnl::primitive_desc_base& pd) { return pd.impl_info_str(); }

dnnl::memory wrap(const dnnl::memory::desc& desc, const Tensor& tensor) {
  return dnnl::memory(desc, engine(), const_cast<void*>(tensor.raw_data()));
}

void copy_residual(const Tensor& residual, Tensor& destination) {
  if (destination.raw_data() != residual.raw_data()) {
    std::memcpy(destination.raw_data(), residual.raw_data(), residual.nbytes());
  }
}

dnnl::memory reorder_constant(const dnnl::memory::desc& from, const Tensor& value, const dnnl::memory::desc& to) {
  dnnl::memory source = wrap(from, value);
  dnnl::memory packed(to, engine());
  dnnl::reorder(source, packed).execute(thread_stream(), source, packed);
  thread_stream().wait();
  return packed;
}

void PrimitiveKernel::execute(std::unordered_map<int, dnnl::memory>& args) const {
  apply_thread_count();
  // Grow-only per-thread scratchpad: primitives run in user scratchpad mode so that one primitive can
  // serve concurrent runs (oneDNN's library mode keeps one scratchpad per primitive).
  struct Scratch {
    std::unique_ptr<char[]> data;
    size_t size = 0;
  };
  thread_local Scratch scratch;
  const size_t needed = scratchpad_desc_.get_size();
  if (needed > 0) {
    if (scratch.size < needed) {
      scratch.data.reset(new char[needed + 64]);
      scratch.size = needed;
    }
    char* aligned = scratch.data.get() + (64 - reinterpret_cast<uintptr_t>(scratch.data.get()) % 64) % 64;
    args.insert_or_assign(DNNL_ARG_SCRATCHPAD, dnnl::memory(scratchpad_desc_, engine(), aligned));
  }
  for (const auto& [key, memory] : constant_args_) args.insert_or_assign(key, memory);
  primitive_.execute(thread_stream(), args);
  thread_stream().wait();
}

}  // namespace kiln::onednn
