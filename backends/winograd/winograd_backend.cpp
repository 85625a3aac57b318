#include "backends/winograd/winograd_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "backends/winograd/accuracy.h"
#include "backends/winograd/cost_model.h"
#include "backends/winograd/transforms.h"
#include "backends/winograd/winograd_conv.h"
#include "core/content_hash.h"
#include "core/version.h"
#include "ops/conv.h"

namespace kiln {
namespace {

using winograd::ConvShape;
using winograd::OutputStep;
using winograd::TransformedFilters;
using winograd::WinogradConv;

std::string format_error(double error) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1e", error);
  return text;
}

std::string tile_name(int tile) {
  return str_cat("F(", tile, "x", tile, ",3x3)");
}

std::string mebibytes(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return text;
}

class WinogradKernel final : public Kernel {
 public:
  WinogradKernel(std::string name, WinogradConv conv, int residual_input)
      : name_(std::move(name)), conv_(std::move(conv)), residual_input_(residual_input) {}

  void run(std::span<const Tensor> inputs, std::span<Tensor> outputs) const override {
    const float* residual =
        residual_input_ >= 0 ? inputs[static_cast<size_t>(residual_input_)].data<float>() : nullptr;
    conv_.run(inputs[0].data<float>(), residual, outputs[0].data<float>());
  }
  std::string_view name() const override { return name_; }
  Layout input_layout(size_t index) const override {
    return index == 0 || static_cast<int>(index) == residual_input_ ? Layout::nhwc : Layout::plain;
  }
  Layout output_layout(size_t) const override { return Layout::nhwc; }
  int in_place_input() const override { return residual_input_; }
  // The filters were transformed and the bias copied when the kernel was created.
  bool copied_at_plan_time(size_t index) const override { return index == 1 || index == 2; }

 private:
  std::string name_;
  WinogradConv conv_;
  int residual_input_;
};

// Why this backend cannot run the node at all (any tile, any algorithm), or nothing.
std::optional<Refusal> refusal(const KernelRequest& request, const ConvParams& params) {
  const auto refuse = [](RefusalKind kind, std::string detail) {
    return std::optional<Refusal>(Refusal{{}, {}, kind, std::move(detail)});
  };
  const OpSpec& spec = request.op;
  if (request.precision != Precision::fp32)
    return refuse(RefusalKind::unsupported_dtype,
                  "Winograd computes float32 only (bf16 precision runs on oneDNN)");
  if (params.group != 1)
    return refuse(RefusalKind::unsupported_attribute,
                  str_cat("grouped convolution (group = ", params.group, ")"));
  const WindowParams& w = params.window;
  if (w.kernel != std::vector<int64_t>{3, 3})
    return refuse(RefusalKind::unsupported_shape,
                  str_cat("kernel ", w.kernel[0], "x", w.kernel[1], ", not 3x3"));
  if (w.strides != std::vector<int64_t>{1, 1})
    return refuse(RefusalKind::unsupported_attribute,
                  str_cat("stride ", w.strides[0], "x", w.strides[1], ", not 1"));
  if (params.in_channels < winograd::kMinChannels || params.out_channels < winograd::kMinChannels) {
    return refuse(RefusalKind::unsupported_shape,
                  str_cat("too few channels (", params.in_channels, " in, ", params.out_channels,
                          " out; Winograd takes at least ", winograd::kMinChannels, " each)"));
  }
  if (!spec.input(1).is_constant())
    return refuse(RefusalKind::not_constant, "weights are not a plan-time constant");
  if (params.has_bias && !spec.input(2).is_constant())
    return refuse(RefusalKind::not_constant, "bias is not a plan-time constant");
  for (const PostOp& op : request.post_ops) {
    if (!winograd::output_transform_applies(op.kind)) {
      return refuse(RefusalKind::unsupported_fusion,
                    str_cat("fused ", post_op_name(op.kind), " (", op.node_name,
                            ") is not one the output transform applies (relu, leaky_relu, clip, sum)"));
    }
  }
  return std::nullopt;
}

// Transformed filters and probe errors of recent layers. Selection asks for each tile separately,
// and again for a remembered choice, and transforming and probing 512 x 512 filters takes tens of
// milliseconds. Filters are held weakly (a kernel owns them; a dropped plan frees them), so kernels
// of the same weights (two sessions of one model) share them; errors are kept. Both are keyed by
// the weights' shape and contents, wherever they lie.
class FilterCache {
 public:
  std::shared_ptr<const TransformedFilters> filters(int tile, const ConvParams& params,
                                                    const float* weights) {
    const Key key = make_key(tile, params, weights);
    std::lock_guard lock(mutex_);
    for (const auto& [known, filters] : filters_) {
      if (known == key) {
        if (std::shared_ptr<const TransformedFilters> alive = filters.lock()) return alive;
      }
    }
    auto made =
        std::make_shared<const TransformedFilters>(tile, params.in_channels, params.out_channels, weights);
    remember(filters_, key, std::weak_ptr<const TransformedFilters>(made));
    return made;
  }

  double error(int tile, const ConvParams& params, const float* weights) {
    const Key key = make_key(tile, params, weights);
    {
      std::lock_guard lock(mutex_);
      for (const auto& [known, error] : errors_) {
        if (known == key) return error;
      }
    }
    const double error = winograd::probe_error(tile, params.in_channels, params.out_channels, weights);
    std::lock_guard lock(mutex_);
    remember(errors_, key, error);
    return error;
  }

 private:
  static constexpr size_t kEntries = 256;
  struct Key {
    int64_t in_channels, out_channels;
    ContentHash contents;
    int tile;
    bool operator==(const Key&) const = default;
  };
  static Key make_key(int tile, const ConvParams& params, const float* weights) {
    const size_t count = static_cast<size_t>(params.in_channels * params.out_channels * 9);
    return {params.in_channels, params.out_channels, content_hash(weights, count * sizeof(float)), tile};
  }
  template <typename Value>
  static void remember(std::deque<std::pair<Key, Value>>& entries, const Key& key, Value value) {
    entries.emplace_back(key, std::move(value));
    if (entries.size() > kEntries) entries.pop_front();
  }

  std::mutex mutex_;
  std::deque<std::pair<Key, std::weak_ptr<const TransformedFilters>>> filters_;
  std::deque<std::pair<Key, double>> errors_;
};

FilterCache& filter_cache() {
  static FilterCache cache;
  return cache;
}

// A tile this layer may use, what it costs in accuracy and its predicted time.
struct TileChoice {
  int tile = 0;
  double error = -1;  // measured under auto only
  winograd::CostEstimate cost;
};

std::string format_share(double share) {
  char text[16];
  std::snprintf(text, sizeof text, "%.2f", share);
  return text;
}

ConvShape conv_shape(const KernelRequest& request, const ConvParams& params, const TensorInfo& output) {
  const Shape& x = request.op.input(0).shape;
  ConvShape shape;
  shape.batch = x[0];
  shape.in_channels = params.in_channels;
  shape.out_channels = params.out_channels;
  shape.in_h = x[2];
  shape.in_w = x[3];
  shape.out_h = output.shape[2];
  shape.out_w = output.shape[3];
  shape.pad_top = params.window.pads_begin[0];
  shape.pad_left = params.window.pads_begin[1];
  shape.dilation_h = params.window.dilations[0];
  shape.dilation_w = params.window.dilations[1];
  return shape;
}

// What conv_algorithm auto weighs for the error budget: every tile's probe error and predicted
// share of a direct convolution's time; the tile auto takes within its own bound (none: the direct
// kernel runs), and the tiles above the bound predicted faster than that.
ApproximateForms tile_trades(const KernelRequest& request, const ConvParams& params,
                             const TensorInfo& output) {
  const ConvShape shape = conv_shape(request, params, output);
  const float* weights = request.op.input(1).value.data<float>();
  ApproximateForms trades;
  std::vector<ApproximateForm> above_bound;
  // Against native's reference convolution create() takes the cheapest tile within the bound,
  // whatever its share: the baseline starts above every tile.
  if (!request.optimized_candidate_follows) trades.baseline.share = INFINITY;
  for (int tile : winograd::kTileSizes) {
    const winograd::CostEstimate cost = winograd::estimate_cost(shape, tile);
    trades.exact_cost = cost.direct;
    // Against an optimized direct kernel a tile must be predicted at most kAutoMaxShare of its time.
    if (request.optimized_candidate_follows && cost.share() > winograd::kAutoMaxShare) continue;
    const ApproximateForm form{tile_name(tile), filter_cache().error(tile, params, weights), cost.share()};
    if (form.error <= winograd::kAutoErrorBound) {
      if (form.share < trades.baseline.share) trades.baseline = form;
    } else {
      above_bound.push_back(form);
    }
  }
  // No tile within the bound: the reference convolution runs, as the exact kernel.
  if (!std::isfinite(trades.baseline.share)) trades.baseline = ApproximateForm{"exact", 0, 1};
  for (const ApproximateForm& form : above_bound) {
    if (form.share < trades.baseline.share) trades.forms.push_back(form);
  }
  std::sort(trades.forms.begin(), trades.forms.end(),
            [](const ApproximateForm& a, const ApproximateForm& b) { return a.share < b.share; });
  return trades;
}

// The tile the request asks for, or why there is none. Timed (autotune): the request.alternative-th
// tile the layer may use. Otherwise one offer, the tile predicted fastest, which under auto, where an
// optimized direct kernel would run the layer instead, must be predicted at most kAutoMaxShare of
// its time.
KernelOrReason create(const KernelRequest& request, const ConvParams& params, const TensorInfo& output) {
  const OpSpec& spec = request.op;
  const bool automatic = options_of<WinogradOptions>(request).conv_algorithm == ConvAlgorithm::automatic;
  const float* weights = spec.input(1).value.data<float>();
  const ConvShape shape = conv_shape(request, params, output);
  // Under auto, the error this layer may have: Winograd's own bound, or the larger share of the
  // model's error budget planning gave it.
  const double bound = std::max(winograd::kAutoErrorBound, request.max_error);

  std::vector<TileChoice> allowed;
  std::string too_inaccurate;
  std::string every_error;  // each probed tile's, for the note
  for (int tile : winograd::kTileSizes) {
    if (request.timed && static_cast<int>(allowed.size()) > request.alternative) break;
    const winograd::CostEstimate cost = winograd::estimate_cost(shape, tile);
    if (!automatic) {
      allowed.push_back({tile, -1, cost});
      continue;
    }
    const double error = filter_cache().error(tile, params, weights);
    every_error += str_cat(every_error.empty() ? "" : ", ", tile_name(tile), " ", format_error(error));
    if (error <= bound) {
      allowed.push_back({tile, error, cost});
    } else {
      too_inaccurate +=
          str_cat(too_inaccurate.empty() ? "" : ", ", tile_name(tile), " ", format_error(error));
    }
  }
  if (allowed.empty()) {
    return KernelOrReason::rejected(
        RefusalKind::above_error_bound,
        str_cat("conv_algorithm auto: error on this layer's filters above ", format_error(bound),
                " of the output scale (", too_inaccurate, ")"));
  }
  TileChoice choice;
  if (request.timed) {
    if (static_cast<int>(allowed.size()) <= request.alternative)
      return KernelOrReason::rejected(RefusalKind::no_alternative,
                                      str_cat("no Winograd tile ", request.alternative, " for this layer"));
    choice = allowed[static_cast<size_t>(request.alternative)];
  } else if (!request.approximate_form.empty()) {
    // The form the error budget measures, whatever the cost model predicts at this shape.
    const auto named = std::find_if(allowed.begin(), allowed.end(), [&](const TileChoice& c) {
      return tile_name(c.tile) == request.approximate_form;
    });
    if (named == allowed.end())
      return KernelOrReason::rejected(
          RefusalKind::no_alternative,
          str_cat(request.approximate_form, " is not within this layer's error bound"));
    choice = *named;
  } else {
    if (request.alternative > 0)
      return KernelOrReason::rejected(RefusalKind::no_alternative,
                                      "one tile is offered unless autotune times them");
    choice = *std::min_element(allowed.begin(), allowed.end(), [](const TileChoice& a, const TileChoice& b) {
      return a.cost.winograd < b.cost.winograd;
    });
    // Against the reference convolution (oneDNN disabled, not built, or refused in deterministic
    // mode) Winograd takes every layer its bound allows.
    if (automatic && request.optimized_candidate_follows && choice.cost.share() > winograd::kAutoMaxShare) {
      return KernelOrReason::rejected(
          RefusalKind::predicted_slower,
          str_cat("conv_algorithm auto: ", tile_name(choice.tile), " predicted at ",
                  format_share(choice.cost.share()),
                  " of a direct convolution's time on this layer (auto takes it at most ",
                  format_share(winograd::kAutoMaxShare), ")"));
    }
  }
  const int tile = choice.tile;
  std::shared_ptr<const TransformedFilters> filters = filter_cache().filters(tile, params, weights);

  std::vector<float> bias;
  if (params.has_bias) {
    const float* values = spec.input(2).value.data<float>();
    bias.assign(values, values + params.out_channels);
  }
  std::vector<OutputStep> steps;
  int residual_input = -1;
  std::string suffix;
  for (const PostOp& op : request.post_ops) {
    steps.push_back({op.kind, op.alpha, op.beta});
    if (op.kind == PostOp::Kind::sum) residual_input = op.input;
    suffix += str_cat("+", post_op_name(op.kind));
  }
  const int64_t weight_bytes =
      params.out_channels * params.in_channels * 9 * static_cast<int64_t>(sizeof(float));
  std::string note = str_cat(tile_name(tile), ": transformed filters ", mebibytes(filters->bytes()), " (",
                             mebibytes(weight_bytes), " as given)");
  if (shape.dilation_h != 1 || shape.dilation_w != 1) {
    note += str_cat("; dilation ",
                    shape.dilation_h == shape.dilation_w ? str_cat(shape.dilation_h)
                                                         : str_cat(shape.dilation_h, "x", shape.dilation_w),
                    ": tiles over each of the ",
                    winograd::tile_axis(shape.out_h, shape.dilation_h, tile).phases *
                        winograd::tile_axis(shape.out_w, shape.dilation_w, tile).phases,
                    " phases");
  }
  if (choice.error >= 0) {
    note += str_cat("; probe error ", format_error(choice.error), " of the output scale (", every_error,
                    "; auto's bound ", format_error(winograd::kAutoErrorBound),
                    bound > winograd::kAutoErrorBound
                        ? str_cat(", the model's error budget allows ", format_error(bound), " here")
                        : std::string(),
                    ")");
  }
  if (!request.timed)
    note += str_cat("; predicted at ", format_share(choice.cost.share()), " of a direct convolution's time");
  std::string name = str_cat("winograd:f", tile, "x", tile, "_3x3:", winograd::transforms_isa(), suffix);
  KernelOrReason offer{
      std::make_unique<WinogradKernel>(
          std::move(name), WinogradConv(std::move(filters), shape, std::move(bias), std::move(steps)),
          residual_input),
      {},
      std::move(note)};
  offer.cold_caches = true;
  return offer;
}

class WinogradBackend final : public Backend {
 public:
  std::string_view name() const override { return "winograd"; }
  bool is_available() const override { return true; }
  std::string version() const override { return std::string(kiln_version()); }
  std::shared_ptr<const BackendOptions> read_options(const SettingValues& settings) const override {
    auto options = std::make_shared<WinogradOptions>();
    options->conv_algorithm = static_cast<ConvAlgorithm>(settings.get("conv_algorithm"));
    return options;
  }
  std::span<const OptionSetting> option_settings() const override {
    static constexpr std::string_view kConv[] = {"Conv"};
    static constexpr OptionSetting kSettings[] = {{"conv_algorithm", kConv}};
    return kSettings;
  }
  KernelOrReason create_kernel(const KernelRequest& request,
                               std::span<const TensorInfo> outputs) const override {
    std::variant<ConvParams, Refusal> checked = check(request);
    if (Refusal* refused = std::get_if<Refusal>(&checked))
      return KernelOrReason::rejected(std::move(*refused));
    return create(request, std::get<ConvParams>(checked), outputs[0]);
  }
  ApproximateForms approximate_forms(const KernelRequest& request,
                                     std::span<const TensorInfo> outputs) const override {
    if (options_of<WinogradOptions>(request).conv_algorithm != ConvAlgorithm::automatic || request.timed)
      return {};
    std::variant<ConvParams, Refusal> checked = check(request);
    if (std::holds_alternative<Refusal>(checked)) return {};
    return tile_trades(request, std::get<ConvParams>(checked), outputs[0]);
  }

 private:
  // The node's convolution, or why Winograd cannot run it at all.
  static std::variant<ConvParams, Refusal> check(const KernelRequest& request) {
    const OpSpec& spec = request.op;
    const auto refuse = [](RefusalKind kind, std::string detail) {
      return std::variant<ConvParams, Refusal>(Refusal{{}, {}, kind, std::move(detail)});
    };
    if (!is_default_domain(spec.domain) || spec.op_type != "Conv")
      return refuse(RefusalKind::no_kernel, "Winograd runs Conv only");
    if (options_of<WinogradOptions>(request).conv_algorithm == ConvAlgorithm::direct)
      return refuse(RefusalKind::excluded_by_setting, "conv_algorithm is direct");
    if (spec.input(0).dtype != DType::f32)
      return refuse(RefusalKind::unsupported_dtype, "Winograd runs float32 only");
    if (spec.input(0).shape.size() != 4)
      return refuse(RefusalKind::unsupported_shape, "Winograd runs 2-D convolutions only");
    // Conv's own inputs are X, W, B; a fused residual follows them.
    OpSpec conv_spec = spec;
    conv_spec.inputs.resize(std::min<size_t>(conv_spec.inputs.size(), 3));
    ConvParams params = conv_params(conv_spec);
    if (std::optional<Refusal> refused = refusal(request, params)) return std::move(*refused);
    return params;
  }
};

}  // namespace

const Backend& winograd_backend() {
  static const WinogradBackend instance;
  return instance;
}

}  // namespace kiln
