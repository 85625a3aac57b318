#include "backends/winograd/cost_model.h"

#include "runtime/cpu_info.h"

namespace kiln::winograd {
namespace {

// Fitted constants (cost_model.h says what each is; docs/performance.md, "Winograd's cost model", the
// layers and the fit). kElementCost is per ISA tier: a filter element read from memory, in direct
// multiply-adds. avx2's are fitted to every benchmark layer on an AVX2 EPYC; avx512's element cost to
// four resnet18 layers timed on an AVX-512 machine, with avx2's other two. kStreamCost is a filter
// element read again from memory by a later block of tiles, fitted to the large-filter layers of
// vgg16 and fcn_resnet50 timed against the direct kernel, interleaved, on an AVX-512 machine at its
// own tier and at KILN_ISA=avx2.
constexpr double kProductEfficiency = 1.38;
constexpr double kTransformCost = 11.0;
constexpr double kElementCostAvx2 = 60.0;
constexpr double kElementCostAvx512 = 100.0;
constexpr double kStreamCostAvx2 = 15.0;
constexpr double kStreamCostAvx512 = 40.0;

}  // namespace

CostEstimate estimate_cost(const ConvShape& shape, int tile) {
  const bool avx512 = isa_in_effect() >= Isa::avx512;
  const double element = avx512 ? kElementCostAvx512 : kElementCostAvx2;
  const double stream = avx512 ? kStreamCostAvx512 : kStreamCostAvx2;
  const double alpha2 = static_cast<double>((tile + 2) * (tile + 2));
  const double c = static_cast<double>(shape.in_channels);
  const double k = static_cast<double>(shape.out_channels);
  const double pixels = static_cast<double>(shape.batch * shape.out_h * shape.out_w);
  const double tiles =
      static_cast<double>(shape.batch * tile_axis(shape.out_h, shape.dilation_h, tile).tiles() *
                          tile_axis(shape.out_w, shape.dilation_w, tile).tiles());
  CostEstimate cost;
  cost.direct = 9 * c * k * pixels + element * 9 * c * k;
  cost.winograd = alpha2 * c * k * tiles / kProductEfficiency + kTransformCost * alpha2 * tiles * (c + k) +
                  element * alpha2 * c * k;
  const TileBlocking blocking = tile_blocking(shape, tile);
  if (blocking.filters_from_memory)
    cost.winograd += stream * alpha2 * c * k * static_cast<double>(blocking.blocks - 1);
  return cost;
}

}  // namespace kiln::winograd
