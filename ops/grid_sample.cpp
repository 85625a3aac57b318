// GridSample (opsets 16 and 20): X [N, C, H, W] sampled at the points of grid [N, H_out, W_out, 2]
// (x then y, normalised to [-1, 1]), giving [N, C, H_out, W_out]. Opset 20 renamed the modes and
// allowed any number of spatial dims; kiln samples two.
#include <span>
#include <string>
#include <vector>

#include "core/error.h"
#include "ops/op_schema.h"

namespace kiln {
namespace {

// Each opset accepts only its own spelling: opset 20 renamed bilinear and bicubic to linear and cubic.
void check_mode(const OpSpec& spec) {
  const bool renamed = spec.opset >= 20;
  const std::string mode = spec.attrs().get_string("mode", renamed ? "linear" : "bilinear");
  const bool known = mode == "nearest" || mode == (renamed ? "linear" : "bilinear") ||
                     mode == (renamed ? "cubic" : "bicubic");
  KILN_CHECK(known, invalid_model, "GridSample mode '", mode, "' is not one of ",
             renamed ? "linear, nearest, cubic (opset 20's names)"
                     : "bilinear, nearest, bicubic (opset 16's names)");
}

std::vector<TensorInfo> infer_grid_sample(const OpSpec& spec) {
  expect_inputs(spec, 2, 2);
  const TensorInfo& x = spec.input(0);
  const TensorInfo& grid = spec.input(1);
  const size_t rank = x.shape.size();
  if (spec.opset >= 20) {
    KILN_CHECK(rank >= 3, invalid_argument,
               "GridSample input X must have rank >= 3 (N, C, spatial dims), got shape ",
               shape_to_string(x.shape));
    KILN_CHECK(rank == 4, not_implemented, "GridSample over ", rank - 2,
               " spatial dims is not supported: kiln samples 4-D X (N, C, H, W) only, got shape ",
               shape_to_string(x.shape));
  } else {
    KILN_CHECK(rank == 4, invalid_argument, "GridSample input X must have rank 4 (N, C, H, W), got shape ",
               shape_to_string(x.shape));
  }
  KILN_CHECK(is_floating(grid.dtype), type_mismatch, "GridSample input grid must be floating point, got ",
             dtype_name(grid.dtype));
  KILN_CHECK(grid.shape.size() == 4 && grid.shape[0] == x.shape[0] && grid.shape[3] == 2, invalid_argument,
             "GridSample input grid must have shape [", x.shape[0], ", H_out, W_out, 2] for X of shape ",
             shape_to_string(x.shape), ", got ", shape_to_string(grid.shape));
  check_mode(spec);
  const std::string padding = spec.attrs().get_string("padding_mode", "zeros");
  KILN_CHECK(padding == "zeros" || padding == "border" || padding == "reflection", invalid_model,
             "GridSample padding_mode '", padding, "' is not one of zeros, border, reflection");
  const int64_t align_corners = spec.attrs().get_int("align_corners", 0);
  KILN_CHECK(align_corners == 0 || align_corners == 1, invalid_model, "GridSample align_corners ",
             align_corners, " must be 0 or 1");
  const Shape output = {x.shape[0], x.shape[1], grid.shape[1], grid.shape[2]};
  // Zeros padding samples nothing from an empty X; border and reflection would read its edge.
  const bool produces_values = checked_numel(output) > 0;
  KILN_CHECK(!produces_values || padding == "zeros" || (x.shape[2] > 0 && x.shape[3] > 0), invalid_argument,
             "GridSample input X has an empty spatial dim (shape ", shape_to_string(x.shape),
             "), which padding_mode ", padding, " cannot pad from");
  return {TensorInfo{x.dtype, output, {}}};
}

constexpr OpSchema kSchemas[] = {
    {"GridSample", infer_grid_sample, 16},
};

}  // namespace

std::span<const OpSchema> grid_sample_schemas() { return kSchemas; }

}  // namespace kiln
