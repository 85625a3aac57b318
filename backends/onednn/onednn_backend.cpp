#include "backends/onednn/onednn_backend.h"

#include <algorithm>
#include <array>
#include <cstdlib>

#include "backends/onednn/onednn_common.h"

// Exported by libdnnl 2.6 (as used by its own tests) but declared in no public header.
namespace dnnl::impl {
dnnl_status_t get_primitive_cache_size(int* size);
}

namespace kiln {
namespace {

constexpr std::array<FamilyTable<KernelRequest>, 12> kFamilies = {
    onednn::conv_kernels,          onednn::conv_transpose_kernels, onednn::pool_kernels,
    onednn::matmul_kernels,        onednn::elementwise_kernels,    onednn::concat_kernels,
    onednn::normalization_kernels, onednn::softmax_kernels,        onednn::reorder_kernels,
    onednn::attention_kernels,     onednn::recurrent_kernels,      onednn::quantize_kernels};

class OnednnBackend final : public Backend {
 public:
  std::string_view name() const override { return "onednn"; }
  bool is_available() const override { return true; }  // oneDNN dispatches to what the CPU has
  std::string version() const override {
    const dnnl_version_t* v = dnnl_version();
    return str_cat(v->major, ".", v->minor, ".", v->patch);
  }
  std::shared_ptr<const BackendOptions> read_options(const SettingValues& settings) const override {
    auto options = std::make_shared<OnednnOptions>();
    options->rnn_fastpath = settings.get("rnn_fastpath") != 0;
    return options;
  }
  std::span<const OptionSetting> option_settings() const override {
    static constexpr std::string_view kRecurrent[] = {"LSTM", "GRU", "RNN"};
    static constexpr OptionSetting kSettings[] = {{"rnn_fastpath", kRecurrent}};
    return kSettings;
  }

  KernelOrReason create_kernel(const KernelRequest& request,
                               std::span<const TensorInfo> outputs) const override {
    const OpSpec& spec = request.op;
    if (!is_default_domain(spec.domain))
      return KernelOrReason::rejected(RefusalKind::no_kernel, "not an ONNX-domain op");
    // Autotune's alternatives exist for the primitives with several implementations per shape.
    if (request.alternative > 0 && spec.op_type != "Conv" && spec.op_type != "MatMul" &&
        spec.op_type != "Gemm")
      return KernelOrReason::rejected(RefusalKind::no_alternative,
                                      "oneDNN has one implementation of " + spec.op_type + " here");
    if (auto create = find_kernel_factory<KernelRequest>(kFamilies, spec.op_type)) {
      return create(request, outputs);
    }
    return KernelOrReason::rejected(RefusalKind::no_kernel, "no oneDNN kernel for " + spec.op_type);
  }

  void set_library_verbose(int level) const override {
    // libdnnl 2.6 has no getter, and a dnnl_set_verbose call made before oneDNN first reads its
    // environment replaces what the environment asked for: so kiln reads the variables the way
    // oneDNN does, once, and never goes below that level.
    level = std::max(level, environment_verbose_level());
    dnnl::error::wrap_c_api(dnnl_set_verbose(level), "could not set oneDNN's verbose level");
  }
};

}  // namespace

const Backend& onednn_backend() {
  static const OnednnBackend instance;
  return instance;
}

namespace {

const char* onednn_isa_name(dnnl_cpu_isa_t isa) {
  switch (isa) {
    case dnnl_cpu_isa_sse41:
      return "sse41";
    case dnnl_cpu_isa_avx:
      return "avx";
    case dnnl_cpu_isa_avx2:
      return "avx2";
    case dnnl_cpu_isa_avx2_vnni:
      return "avx2_vnni";
    case dnnl_cpu_isa_avx512_core:
      return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx:
      return "avx512_core_amx";
    default:
      return "other";
  }
}

}  // namespace

std::string onednn_isa() {
  onednn::engine();  // applies kiln's cap first: querying oneDNN's ISA fixes it
  const char* name = onednn_isa_name(dnnl_get_effective_cpu_isa());
  const std::string& failure = onednn::isa_cap_failure();
  return failure.empty() ? name : str_cat(name, " (", failure, ")");
}

int environment_verbose_level() {
  static const int level = [] {
    const char* text = std::getenv("ONEDNN_VERBOSE");
    if (text == nullptr) text = std::getenv("DNNL_VERBOSE");
    return text == nullptr ? 0 : std::max(0, std::atoi(text));  // oneDNN parses it with atoi too
  }();
  return level;
}

int onednn_primitive_cache_size() {
  int size = 0;
  dnnl::error::wrap_c_api(dnnl::impl::get_primitive_cache_size(&size), "could not query the primitive cache");
  return size;
}

int onednn_primitive_cache_capacity() {
  return dnnl::get_primitive_cache_capacity();
}

void set_onednn_primitive_cache_capacity(int capacity) {
  KILN_CHECK(capacity >= 0, invalid_argument, "the primitive cache capacity must be >= 0, got ", capacity);
  dnnl::set_primitive_cache_capacity(capacity);
}

void clear_onednn_primitive_cache() {
  // oneDNN has no clear(): shrinking the capacity to 0 evicts every entry.
  const int capacity = onednn_primitive_cache_capacity();
  dnnl::set_primitive_cache_capacity(0);
  dnnl::set_primitive_cache_capacity(capacity);
}

}  // namespace kiln
