#include "backends/onednn/onednn_common.h"

#include <cstring>
#include <memory>
#include <mutex>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "core/content_hash.h"
#include "runtime/cpu_info.h"
#include "runtime/threads.h"

namespace kiln::onednn {

namespace {

// oneDNN's ISA for each of kiln's tiers, in Isa order. baseline maps to sse41, oneDNN's lowest JIT
// tier (below it, oneDNN runs its reference code).
constexpr dnnl_cpu_isa_t kOnednnIsa[] = {dnnl_cpu_isa_sse41, dnnl_cpu_isa_avx2, dnnl_cpu_isa_avx512_core,
                                         dnnl_cpu_isa_avx512_core_bf16, dnnl_cpu_isa_avx512_core_amx};

dnnl_cpu_isa_t onednn_isa(Isa isa) {
  return kOnednnIsa[static_cast<size_t>(isa)];
}

// Caps oneDNN at kiln's tier when KILN_ISA or the API lowered it below the CPU's best. oneDNN accepts
// a cap once, before it dispatched anything; it refuses when another library in the process (PyTorch
// links the same libdnnl) used it first. Returns why the cap was not applied, or "".
std::string cap_onednn_isa() {
  const IsaChoice& choice = isa_choice();
  if (choice.isa == cpu_capability().best_isa()) return {};
  if (dnnl_set_max_cpu_isa(onednn_isa(choice.isa)) == dnnl_success) return {};
  return str_cat("oneDNN was not capped at ", isa_name(choice.isa), " (from ", choice.source,
                 "): it had already dispatched in this process");
}

}  // namespace

const std::string& isa_cap_failure() {
  static const std::string failure = cap_onednn_isa();
  return failure;
}

const dnnl::engine& engine() {
  static const dnnl::engine instance = [] {
    isa_cap_failure();  // before the first oneDNN call that dispatches
    return dnnl::engine(dnnl::engine::kind::cpu, 0);
  }();
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
  const int threads = intra_op_threads();
  if (threads != applied) {
    omp_set_num_threads(threads);
    applied = threads;
  }
#endif
}

dnnl::memory::desc value_desc(const Shape& shape, Layout layout) {
  const auto type = is_bf16(layout) ? dnnl::memory::data_type::bf16 : dnnl::memory::data_type::f32;
  if (is_channels_last(layout)) return dnnl::memory::desc(shape, type, dnnl::memory::format_tag::nhwc);
  return plain_desc(shape, type);
}

dnnl::memory::desc value_desc(const Shape& shape, DType dtype, Layout layout) {
  const dnnl::memory::desc desc = value_desc(shape, layout);
  if (dtype == DType::u8) return with_type(desc, dnnl::memory::data_type::u8);
  if (dtype == DType::i8) return with_type(desc, dnnl::memory::data_type::s8);
  if (dtype == DType::i32) return with_type(desc, dnnl::memory::data_type::s32);
  return desc;
}

dnnl::memory::desc plain_desc(const Shape& shape, dnnl::memory::data_type type) {
  // A scalar is described as a one-element 1-D value (oneDNN has no rank-0 memory).
  const Shape dims = shape.empty() ? Shape{1} : shape;
  return dnnl::memory::desc(dims, type, contiguous_strides(dims));
}

dnnl::memory::desc with_type(const dnnl::memory::desc& desc, dnnl::memory::data_type type) {
  dnnl_memory_desc_t data = desc.data;
  data.data_type = static_cast<dnnl_data_type_t>(type);
  return dnnl::memory::desc(data);
}

Layout float32_layout(Layout layout) {
  if (layout == Layout::nhwc_bf16) return Layout::nhwc;
  if (layout == Layout::plain_bf16) return Layout::plain;
  return layout;
}

ImplementationSignature implementation_signature(const dnnl::primitive_desc_base& pd) {
  return {pd.impl_info_str(), pd.query_md(dnnl::query::weights_md), pd.scratchpad_desc()};
}

std::string alternative_suffix(int alternative) {
  return alternative > 0 ? str_cat("#", alternative) : std::string();
}

std::string implementation_name(const dnnl::primitive_desc_base& pd) {
  return pd.impl_info_str();
}

dnnl::primitive_attr primitive_attributes() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

Primitive::Primitive(const dnnl::primitive_desc_base& pd) {
  KILN_CHECK(pd.get_primitive_attr().get_scratchpad_mode() == dnnl::scratchpad_mode::user, runtime,
             "oneDNN primitive ", implementation_name(pd),
             " was described with a library-managed scratchpad; kiln's primitives take their attributes "
             "from primitive_attributes() so that concurrent runs never share a scratchpad");
  primitive_ = dnnl::primitive(pd.get());
  scratchpad_desc_ = pd.scratchpad_desc();
}

void Primitive::execute(std::unordered_map<int, dnnl::memory> args) const {
  // One execution at a time runs on a thread (an execution never waits for other work), so two
  // never share the thread's scratchpad.
  thread_local ScratchBuffer scratch;
  if (scratchpad_bytes() > 0)
    args.insert_or_assign(DNNL_ARG_SCRATCHPAD,
                          dnnl::memory(scratchpad_desc_, engine(), scratch.reserve(scratchpad_bytes())));
  primitive_.execute(thread_stream(), args);
  thread_stream().wait();
}

dnnl::memory wrap(const dnnl::memory::desc& desc, const Tensor& tensor) {
  return dnnl::memory(desc, engine(), const_cast<void*>(tensor.raw_data()));
}

void copy_residual(const Tensor& residual, Tensor& destination) {
  if (destination.raw_data() != residual.raw_data()) {
    std::memcpy(destination.raw_data(), residual.raw_data(), residual.nbytes());
  }
}

dnnl::memory reorder_constant(const dnnl::memory::desc& from, const Tensor& value,
                              const dnnl::memory::desc& to) {
  dnnl::memory source = wrap(from, value);
  dnnl::memory packed(to, engine());
  const Primitive reorder(
      dnnl::reorder::primitive_desc(engine(), from, engine(), to, primitive_attributes()));
  reorder.execute({{DNNL_ARG_FROM, source}, {DNNL_ARG_TO, packed}});
  return packed;
}

namespace {

// Packed constants alive in the process, found by what they were packed from.
struct PackedConstants {
  struct Entry {
    ContentHash source;
    size_t source_bytes;
    dnnl::memory::desc from, to;
    std::weak_ptr<const AllocatedBlock> block;
  };
  std::mutex mutex;
  std::vector<Entry> entries;
};

PackedConstants& packed_constants() {
  static PackedConstants* instance = new PackedConstants;  // kernels may outlive static teardown
  return *instance;
}

}  // namespace

SharedConstant shared_reorder_constant(const dnnl::memory::desc& from, const Tensor& value,
                                       const dnnl::memory::desc& to) {
  const ContentHash source = content_hash(value.raw_data(), value.nbytes());
  PackedConstants& packed = packed_constants();
  std::lock_guard lock(packed.mutex);
  std::erase_if(packed.entries, [](const PackedConstants::Entry& entry) { return entry.block.expired(); });
  for (const PackedConstants::Entry& entry : packed.entries) {
    if (entry.source != source || entry.source_bytes != value.nbytes() || entry.from != from ||
        entry.to != to)
      continue;
    if (std::shared_ptr<const AllocatedBlock> block = entry.block.lock())
      return {dnnl::memory(to, engine(), block->data()), std::move(block)};
  }
  auto block = std::make_shared<const AllocatedBlock>(to.get_size(), "weights");
  dnnl::memory memory(to, engine(), block->data());
  const Primitive reorder(
      dnnl::reorder::primitive_desc(engine(), from, engine(), to, primitive_attributes()));
  reorder.execute({{DNNL_ARG_FROM, wrap(from, value)}, {DNNL_ARG_TO, memory}});
  packed.entries.push_back({source, value.nbytes(), from, to, block});
  return {std::move(memory), std::move(block)};
}

namespace {

// A primitive bound to one context: its memories are created once and only their data handles
// follow the tensors; the argument array is passed straight to oneDNN's C API.
class BoundPrimitive final : public BoundKernel {
 public:
  BoundPrimitive(const PrimitiveKernel& kernel, std::span<const Tensor> inputs,
                 std::span<const Tensor> outputs)
      : kernel_(kernel) {
    for (const PrimitiveKernel::Binding& binding : kernel.bindings()) {
      const Tensor& tensor = binding.is_output ? outputs[binding.index] : inputs[binding.index];
      memories_.emplace_back(binding.desc, engine(),
                             tensor.defined() ? const_cast<void*>(tensor.raw_data()) : nullptr);
    }
    for (size_t i = 0; i < memories_.size(); ++i)
      args_.push_back({kernel.bindings()[i].argument, memories_[i].get()});
    for (const auto& [argument, memory] : kernel.constant_args()) args_.push_back({argument, memory.get()});
    const Primitive& primitive = kernel.primitive();
    if (primitive.scratchpad_bytes() > 0) {
      scratchpad_ =
          dnnl::memory(primitive.scratchpad_desc(), engine(), scratch_.reserve(primitive.scratchpad_bytes()));
      args_.push_back({DNNL_ARG_SCRATCHPAD, scratchpad_.get()});
    }
  }

  void run(std::span<const Tensor> inputs, std::span<Tensor> outputs) override {
    apply_thread_count();
    kernel_.prepare_outputs(inputs, outputs);
    for (size_t i = 0; i < memories_.size(); ++i) {
      const PrimitiveKernel::Binding& binding = kernel_.bindings()[i];
      void* data = const_cast<void*>(binding.is_output ? outputs[binding.index].raw_data()
                                                       : inputs[binding.index].raw_data());
      if (memories_[i].get_data_handle() != data) memories_[i].set_data_handle(data);
    }
    dnnl::stream& stream = thread_stream();
    dnnl::error::wrap_c_api(dnnl_primitive_execute(kernel_.primitive().get().get(), stream.get(),
                                                   static_cast<int>(args_.size()), args_.data()),
                            "could not execute a primitive");
    stream.wait();
  }

 private:
  const PrimitiveKernel& kernel_;
  std::vector<dnnl::memory> memories_;
  std::vector<dnnl_exec_arg_t> args_;
  ScratchBuffer scratch_;
  dnnl::memory scratchpad_;
};

}  // namespace

void* ScratchBuffer::reserve(size_t bytes) {
  if (bytes > block_.size() || block_.data() == nullptr) {
    block_ = AllocatedBlock();  // the old block goes back before the new one is taken
    block_ = AllocatedBlock(bytes);
  }
  return block_.data();
}

void PrimitiveKernel::run(std::span<const Tensor> inputs, std::span<Tensor> outputs) const {
  apply_thread_count();
  prepare_outputs(inputs, outputs);
  std::unordered_map<int, dnnl::memory> args = constant_args_;
  for (const Binding& binding : bindings_) {
    args.insert_or_assign(binding.argument, wrap(binding.desc, binding.is_output ? outputs[binding.index]
                                                                                 : inputs[binding.index]));
  }
  primitive_.execute(std::move(args));
}

std::unique_ptr<BoundKernel> PrimitiveKernel::bind(std::span<const Tensor> inputs,
                                                   std::span<const Tensor> outputs) const {
  return std::make_unique<BoundPrimitive>(*this, inputs, outputs);
}

}  // namespace kiln::onednn
