#include "ops/window.h"

#include "core/error.h"

namespace kiln {
namespace {

std::vector<int64_t> per_dim(const OpSpec& spec, const char* name, size_t rank, int64_t fallback) {
  std::vector<int64_t> values = spec.attrs().get_ints(name, std::vector<int64_t>(rank, fallback));
  KILN_CHECK(values.size() == rank, invalid_model, spec.op_type, " attribute '", name, "' has ", values.size(),
             " values for ", rank, " spatial dims");
  for (int64_t value : values) {
    KILN_CHECK(value >= 1, invalid_model, spec.op_type, " attribute '", name, "' must be >= 1, got ", value);
  }
  return values;
}

}  // namespace

WindowParams window_params(const OpSpec& spec, const std::vector<int64_t>& spatial, std::vector<int64_t> kernel,
                           bool ceil_mode) {
  const size_t rank = spatial.size();
  WindowParams params;
  KILN_CHECK(kernel.size() == rank, invalid_model, spec.op_type, " kernel has ", kernel.size(), " dims for ", rank,
             " spatial dims");
  for (int64_t k : kernel) KILN_CHECK(k >= 1, invalid_model, spec.op_type, " kernel dims must be >= 1, got ", k);
  params.kernel = std::move(kernel);
  params.strides = per_dim(spec, "strides", rank, 1);
  params.dilations = per_dim(spec, "dilations", rank, 1);
  const std::string auto_pad = spec.attrs().get_string("auto_pad", "NOTSET");
  params.pads_begin.assign(rank, 0);
  params.pads_end.assign(rank, 0);
  params.output.assign(rank, 0);
  if (auto_pad == "NOTSET") {
    const std::vector<int64_t> pads = spec.attrs().get_ints("pads", std::vector<int64_t>(2 * rank, 0));
    KILN_CHECK(pads.size() == 2 * rank, invalid_model, spec.op_type, " attribute 'pads' has ", pads.size(),
               " values, expected ", 2 * rank);
    for (size_t d = 0; d < rank; ++d) {
      KILN_CHECK(pads[d] >= 0 && pads[d + rank] >= 0, invalid_model, spec.op_type, " pads must be >= 0");
      params.pads_begin[d] = pads[d];
      params.pads_end[d] = pads[d + rank];
    }
  } else {
    KILN_CHECK(auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER" || auto_pad == "VALID", invalid_model,
               spec.op_type, " auto_pad must be NOTSET, SAME_UPPER, SAME_LOWER or VALID, got '", auto_pad, "'");
  }
  for (size_t d = 0; d < rank; ++d) {
    const int64_t extent = (params.kernel[d] - 1) * params.dilations[d] + 1;
    const int64_t stride = params.strides[d];
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      const int64_t out = (spatial[d] + stride - 1) / stride;
      const int64_t total = std::max<int64_t>(0, (out - 1) * stride + extent - spatial[d]);
      params.pads_begin[d] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      params.pads_end[d] = total - params.pads_begin[d];
      params.output[d] = out;
      continue;
    }
    const int64_t padded = spatial[d] + params.pads_begin[d] + params.pads_end[d];
    KILN_CHECK(padded >= extent, invalid_argument, spec.op_type, " window of size ", extent, " (kernel ",
               params.kernel[d], ", dilation ", params.dilations[d], ") does not fit spatial dim ", d, " of size ",
               spatial[d], " with pads ", params.pads_begin[d], "+", params.pads_end[d]);
    int64_t out = ceil_mode ? (padded - extent + stride - 1) / stride + 1 : (padded - extent) / stride + 1;
    // With ceil_mode the last window must start inside the input or its begin padding.
    if (ceil_mode && (out - 1) * stride >= spatial[d] + params.pads_begin[d]) --out;
    params.output[d] = out;
  }
  return params;
}

}  // namespace kiln
