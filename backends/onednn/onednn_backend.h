// The oneDNN backend: convolutions, matmuls, pooling, eltwise, binary, concat, softmax and layer
// normalization on oneDNN's JIT kernels, with channels-last activations and weights prepacked at
// plan time.
#pragma once

#include <memory>

#include "backends/base/backend.h"

namespace kiln {

const Backend& onednn_backend();

// Its options: the rnn_fastpath setting (off: LSTM, GRU and RNN layers are left to the native kernel).
struct OnednnOptions final : BackendOptions {
  bool rnn_fastpath = true;
};

// The ISA oneDNN dispatches up to, as oneDNN names it ("avx2", "avx512_core_bf16", ...), followed by
// why kiln's cap could not be applied where that happened.
std::string onednn_isa();

// The level of oneDNN's own verbose (`onednn_verbose,...` lines on stdout) that the environment
// asks for: ONEDNN_VERBOSE, else DNNL_VERBOSE, read once as oneDNN reads them. kiln's settings
// raise oneDNN's level above it for their scopes (Backend::set_library_verbose), never below.
int environment_verbose_level();

// oneDNN's primitive cache: entries held, the capacity (oneDNN's default 1024), and emptying it.
// Plans keep their primitives either way; the cache speeds up creating identical ones.
int onednn_primitive_cache_size();
int onednn_primitive_cache_capacity();
void set_onednn_primitive_cache_capacity(int capacity);
void clear_onednn_primitive_cache();

}  // namespace kiln
