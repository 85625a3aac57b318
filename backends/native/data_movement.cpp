// Native data-movement kernels. They copy bytes (dtype_size wide), so one kernel serves every dtype.
// Most of them are "copy a strided view of the input into a contiguous output" (Slice, Transpose,
// Tile, DepthToSpace, SpaceToDepth); copy_view simplifies the view and picks the fastest loop.
#include "ops/data_movement.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "backends/base/function_kernel.h"
#include "backends/native/element_math.h"
#include "backends/native/element_visit.h"
#include "backends/native/native_backend.h"
#include "backends/native/strided_copy.h"
#include "core/error.h"
#include "runtime/parallel.h"

namespace kiln::native {
namespace {

// Concat and Split copy in pieces of at most this many bytes when there are too few rows to keep
// every thread busy.
constexpr int64_t kPieceBytes = 64 * 1024;
// With at least this many (row, tensor) blocks, Concat and Split parallelise over rows instead.
constexpr int64_t kMaxPieces = 4096;
// Side of the square tiles of the transpose loop, in elements: two 32x32 tiles of 8-byte elements
// are 16 KiB, inside any L1 cache.
constexpr int64_t kTransposeTile = 32;

// ---- Strided views -------------------------------------------------------------------------------

// A strided view of a source tensor: element (i0, ..., in) is src[offset + sum(ik * strides[k])].
struct View {
  Shape shape;
  std::vector<int64_t> strides;
  int64_t offset = 0;
};

// Drops size-1 dims and merges neighbours that are one run in the source, so the copy loops see
// the fewest, longest dims ([0, 2, 1, 3] on [1, S, H, D] becomes a batched [S, H] row copy).
View simplify(View view) {
  View result;
  result.offset = view.offset;
  for (size_t d = 0; d < view.shape.size(); ++d) {
    if (view.shape[d] == 1) continue;
    if (!result.shape.empty() && result.strides.back() == view.strides[d] * view.shape[d]) {
      result.shape.back() *= view.shape[d];
      result.strides.back() = view.strides[d];
      continue;
    }
    result.shape.push_back(view.shape[d]);
    result.strides.push_back(view.strides[d]);
  }
  return result;
}

// Offset in the source of the row that starts at output row `row` (rows run over all but the last dim).
int64_t row_offset(const View& view, int64_t row) {
  int64_t offset = view.offset;
  for (size_t d = view.shape.size() - 1; d-- > 0;) {
    offset += (row % view.shape[d]) * view.strides[d];
    row /= view.shape[d];
  }
  return offset;
}

// Inner dim contiguous in the source: one memcpy per row. Each chunk finds its first row's offset
// once, then steps an odometer.
void copy_rows(char* dst, const char* src, int64_t element_size, const View& view) {
  const size_t rank = view.shape.size();
  const int64_t row_bytes = view.shape.back() * element_size;
  const int64_t rows = product(view.shape, 0, rank - 1);
  parallel_for(0, rows, copy_cost(row_bytes), [&](int64_t begin, int64_t end) {
    std::vector<int64_t> index(rank, 0);
    int64_t rest = begin;
    for (size_t d = rank - 1; d-- > 0;) {
      index[d] = rest % view.shape[d];
      rest /= view.shape[d];
    }
    int64_t offset = row_offset(view, begin);
    for (int64_t row = begin; row < end; ++row) {
      std::memcpy(dst + row * row_bytes, src + offset * element_size, static_cast<size_t>(row_bytes));
      for (size_t d = rank - 1; d-- > 0;) {
        offset += view.strides[d];
        if (++index[d] < view.shape[d]) break;
        offset -= view.strides[d] * view.shape[d];
        index[d] = 0;
      }
    }
  });
}

// Batched 2-D transpose: the view is [batch..., C, R] with source strides [..., 1, s], i.e. the
// output's rows run across the source's. Square tiles keep both sides in cache.
template <typename U>
void transpose_tiles(U* dst, const U* src, const View& view) {
  const size_t rank = view.shape.size();
  const int64_t cols = view.shape[rank - 2];  // output rows, contiguous in the source
  const int64_t rows = view.shape[rank - 1];  // output columns, strided in the source
  const int64_t src_stride = view.strides[rank - 1];
  const int64_t batches = product(view.shape, 0, rank - 2);
  const int64_t col_tiles = (cols + kTransposeTile - 1) / kTransposeTile;
  const int64_t row_tiles = (rows + kTransposeTile - 1) / kTransposeTile;
  const int64_t tiles_per_batch = col_tiles * row_tiles;
  View batch_view = view;  // the batch dims alone, to find each batch's source offset
  batch_view.shape.resize(rank - 1);
  batch_view.strides.resize(rank - 1);
  batch_view.shape.back() = 1;
  batch_view.offset = 0;  // the caller already moved src to view.offset
  parallel_for(0, batches * tiles_per_batch, kTransposeTile * kTransposeTile,
               [&](int64_t begin, int64_t end) {
                 for (int64_t task = begin; task < end; ++task) {
                   const int64_t batch = task / tiles_per_batch;
                   const int64_t tile = task % tiles_per_batch;
                   const int64_t c0 = (tile / row_tiles) * kTransposeTile;
                   const int64_t r0 = (tile % row_tiles) * kTransposeTile;
                   const int64_t c1 = std::min(cols, c0 + kTransposeTile);
                   const int64_t r1 = std::min(rows, r0 + kTransposeTile);
                   const U* from = src + row_offset(batch_view, batch);
                   U* to = dst + batch * cols * rows;
                   // Writes run along dst rows; the strided reads stay within the tile's source lines.
                   for (int64_t c = c0; c < c1; ++c) {
                     U* dst_row = to + c * rows;
                     const U* src_col = from + c;
                     for (int64_t r = r0; r < r1; ++r) dst_row[r] = src_col[r * src_stride];
                   }
                 }
               });
}

// dst (contiguous, view.shape) = the view of src; the one entry point for strided copies here.
void copy_view(void* dst, const void* src, size_t element_size, const View& full_view) {
  if (checked_numel(full_view.shape) == 0) return;
  const View view = simplify(full_view);
  const auto* src_bytes = static_cast<const char*>(src);
  auto* dst_bytes = static_cast<char*>(dst);
  const int64_t esize = static_cast<int64_t>(element_size);
  const size_t rank = view.shape.size();
  if (rank == 0) {
    std::memcpy(dst_bytes, src_bytes + view.offset * esize, element_size);
    return;
  }
  if (view.strides.back() == 1) {
    if (rank == 1) {  // one contiguous run: split it across threads
      parallel_for(0, view.shape[0], 1, [&](int64_t begin, int64_t end) {
        std::memcpy(dst_bytes + begin * esize, src_bytes + (view.offset + begin) * esize,
                    static_cast<size_t>((end - begin) * esize));
      });
      return;
    }
    copy_rows(dst_bytes, src_bytes, esize, view);
    return;
  }
  if (rank >= 2 && view.strides[rank - 2] == 1) {
    bool done = false;
    visit_element_size(
        element_size,
        [&](auto tag) {
          using U = decltype(tag);
          transpose_tiles(reinterpret_cast<U*>(dst_bytes),
                          reinterpret_cast<const U*>(src_bytes) + view.offset, view);
          done = true;
        },
        [] {});
    if (done) return;
  }
  strided_copy(dst, src, element_size, view.shape, view.strides, view.offset);
}

// ---- Concat and Split ----------------------------------------------------------------------------

// One contiguous copy between the concatenated tensor and a part (an input of Concat, an output of
// Split); offsets are in bytes.
struct CopyPiece {
  size_t part = 0;
  int64_t part_offset = 0;
  int64_t whole_offset = 0;
  int64_t bytes = 0;
};

// Concat and Split see the whole tensor as `outer` rows, each the parts' blocks side by side.
struct PartLayout {
  int64_t outer = 0;
  int64_t row_bytes = 0;
  std::vector<int64_t> block_bytes;  // per part: bytes it holds of each row
  bool by_pieces = false;            // few rows: copy `pieces`, split so every thread gets work
  std::vector<CopyPiece> pieces;
};

PartLayout part_layout(const Shape& whole, size_t axis, size_t element_size,
                       const std::vector<Shape>& parts) {
  PartLayout layout;
  layout.outer = product(whole, 0, axis);
  const int64_t inner_bytes = product(whole, axis + 1, whole.size()) * static_cast<int64_t>(element_size);
  for (const Shape& part : parts) {
    layout.block_bytes.push_back(part[axis] * inner_bytes);
    layout.row_bytes += layout.block_bytes.back();
  }
  // Rows smaller than a piece (a channels-last Concat's pixels) are shared out whole.
  layout.by_pieces =
      layout.outer * static_cast<int64_t>(parts.size()) <= kMaxPieces && layout.row_bytes > kPieceBytes;
  if (!layout.by_pieces) return layout;
  for (int64_t row = 0; row < layout.outer; ++row) {
    int64_t whole_offset = row * layout.row_bytes;
    for (size_t part = 0; part < parts.size(); ++part) {
      const int64_t block = layout.block_bytes[part];
      for (int64_t done = 0; done < block; done += kPieceBytes) {
        const int64_t bytes = std::min(kPieceBytes, block - done);
        layout.pieces.push_back({part, row * block + done, whole_offset + done, bytes});
      }
      whole_offset += block;
    }
  }
  return layout;
}

// Calls copy(piece) for every contiguous copy between the whole tensor and its parts, on threads.
template <typename CopyFn>
void for_each_piece(const PartLayout& layout, const CopyFn& copy) {
  if (layout.by_pieces) {
    parallel_for(0, static_cast<int64_t>(layout.pieces.size()), copy_cost(kPieceBytes),
                 [&](int64_t begin, int64_t end) {
                   for (int64_t i = begin; i < end; ++i) copy(layout.pieces[static_cast<size_t>(i)]);
                 });
    return;
  }
  parallel_for(0, layout.outer, copy_cost(layout.row_bytes), [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      int64_t whole_offset = row * layout.row_bytes;
      for (size_t part = 0; part < layout.block_bytes.size(); ++part) {
        const int64_t block = layout.block_bytes[part];
        if (block > 0) copy(CopyPiece{part, row * block, whole_offset, block});
        whole_offset += block;
      }
    }
  });
}

// Concat's copies: every part's blocks into their places in `whole`.
void concat_parts(const PartLayout& layout, std::span<const Tensor> parts, Tensor& whole) {
  char* to = static_cast<char*>(whole.raw_data());
  for_each_piece(layout, [&](const CopyPiece& piece) {
    std::memcpy(to + piece.whole_offset,
                static_cast<const char*>(parts[piece.part].raw_data()) + piece.part_offset,
                static_cast<size_t>(piece.bytes));
  });
}

KernelOrReason make_concat(const OpSpec& spec, std::span<const TensorInfo> outputs) {
  const Shape& out = outputs[0].shape;
  const size_t axis =
      static_cast<size_t>(normalize_axis(spec.attrs().require_int("axis"), static_cast<int64_t>(out.size())));
  std::vector<Shape> parts;
  for (const TensorInfo& input : spec.inputs) parts.push_back(input.shape);
  const PartLayout layout = part_layout(out, axis, dtype_size(outputs[0].dtype), parts);
  return make_kernel("native:concat", [layout](std::span<const Tensor> inputs, std::span<Tensor> dst) {
    concat_parts(layout, inputs, dst[0]);
  });
}

// Concat of channels-last values, read and written channels-last: each pixel's row of channels is
// the parts' rows side by side (a Concat along H, W or N joins stored rows the same way).
class ChannelsLastConcatKernel final : public Kernel {
 public:
  explicit ChannelsLastConcatKernel(PartLayout layout) : layout_(std::move(layout)) {}
  void run(std::span<const Tensor> inputs, std::span<Tensor> outputs) const override {
    concat_parts(layout_, inputs, outputs[0]);
  }
  std::string_view name() const override { return "native:concat_nhwc"; }
  Layout input_layout(size_t) const override { return Layout::nhwc; }
  Layout output_layout(size_t) const override { return Layout::nhwc; }

 private:
  PartLayout layout_;
};

KernelOrReason make_channels_last_concat(const OpSpec& spec, std::span<const TensorInfo> outputs) {
  constexpr size_t kStored[] = {0, 3, 1, 2};  // where logical [N, C, H, W] dim d is stored
  const size_t axis = kStored[normalize_axis(spec.attrs().require_int("axis"), 4)];
  std::vector<Shape> parts;
  for (const TensorInfo& input : spec.inputs) parts.push_back(stored_shape(input.shape, Layout::nhwc));
  return {std::make_unique<ChannelsLastConcatKernel>(part_layout(stored_shape(outputs[0].shape, Layout::nhwc),
                                                                 axis, dtype_size(outputs[0].dtype), parts)),
          {},
          {}};
}

KernelOrReason make_split(const OpSpec& spec, std::span<const TensorInfo> outputs) {
  const Shape& in = spec.input(0).shape;
  const size_t axis =
      static_cast<size_t>(normalize_axis(spec.attrs().get_int("axis", 0), static_cast<int64_t>(in.size())));
  std::vector<Shape> parts;
  for (const TensorInfo& output : outputs) parts.push_back(output.shape);
  const PartLayout layout = part_layout(in, axis, dtype_size(spec.input(0).dtype), parts);
  return make_kernel("native:split", [layout](std::span<const Tensor> inputs, std::span<Tensor> dst) {
    const char* whole = static_cast<const char*>(inputs[0].raw_data());
    for_each_piece(layout, [&](const CopyPiece& piece) {
      std::memcpy(static_cast<char*>(dst[piece.part].raw_data()) + piece.part_offset,
                  whole + piece.whole_offset, static_cast<size_t>(piece.bytes));
    });
  });
}

// ---- Slice, Transpose, Tile, DepthToSpace, SpaceToDepth -----------------------------------------

// A kernel copying a fixed view of input 0 into output 0.
KernelOrReason make_view_copy(std::string name, const OpSpec& spec, View view) {
  const size_t element_size = dtype_size(spec.input(0).dtype);
  return make_kernel(std::move(name),
                     [element_size, view](std::span<const Tensor> inputs, std::span<Tensor> dst) {
                       copy_view(dst[0].raw_data(), inputs[0].raw_data(), element_size, view);
                     });
}

KernelOrReason make_slice(const OpSpec& spec, std::span<const TensorInfo> outputs) {
  const SliceParams params = slice_params(spec);
  const std::vector<int64_t> in_strides = contiguous_strides(spec.input(0).shape);
  View view;
  view.shape = outputs[0].shape;
  for (size_t d = 0; d < in_strides.size(); ++d) {
    view.strides.push_back(in_strides[d] * params.steps[d]);
    view.offset += params.starts[d] * in_strides[d];
  }
  return make_view_copy("native:slice", spec, std::move(view));
}

// Slice of a channels-last value, read and written channels-last (ShuffleNet's channel splits): the
// logical slice applied to the stored [N, H, W, C] dims.
class ChannelsLastSliceKernel final : public Kernel {
 public:
  ChannelsLastSliceKernel(size_t element_size, View view)
      : element_size_(element_size), view_(std::move(view)) {}
  void run(std::span<const Tensor> inputs, std::span<Tensor> outputs) const override {
    copy_view(outputs[0].raw_data(), inputs[0].raw_data(), element_size_, view_);
  }
  std::string_view name() const override { return "native:slice_nhwc"; }
  Layout input_layout(size_t index) const override { return index == 0 ? Layout::nhwc : Layout::plain; }
  Layout output_layout(size_t) const override { return Layout::nhwc; }

 private:
  size_t element_size_;
  View view_;
};

KernelOrReason make_channels_last_slice(const OpSpec& spec, std::span<const TensorInfo> outputs) {
  const SliceParams params = slice_params(spec);
  const Shape stored_in = stored_shape(spec.input(0).shape, Layout::nhwc);
  const std::vector<int64_t> in_strides = contiguous_strides(stored_in);
  // Stored dim s holds logical dim kLogical[s]: [N, H, W, C] of [N, C, H, W].
  constexpr size_t kLogical[] = {0, 2, 3, 1};
  View view;
  view.shape = stored_shape(outputs[0].shape, Layout::nhwc);
  for (size_t s = 0; s < stored_in.size(); ++s) {
    const size_t d = kLogical[s];
    view.strides.push_back(in_strides[s] * params.steps[d]);
    view.offset += params.starts[d] * in_strides[s];
  }
  return {
      std::make_unique<ChannelsLastSliceKernel>(dtype_size(spec.input(0).dtype), std::move(view)), {}, {}};
}

// Output dim d reads input dim perm[d].
View permuted_view(const Shape& in, const std::vector<int64_t>& perm) {
  const std::vector<int64_t> in_strides = contiguous_strides(in);
  View view;
  for (int64_t axis : perm) {
    view.shape.push_back(in[static_cast<size_t>(axis)]);
    view.strides.push_back(in_strides[static_cast<size_t>(axis)]);
  }
  return view;
}

KernelOrReason make_transpose(const OpSpec& spec, std::span<const TensorInfo>) {
  return make_view_copy("native:transpose", spec, permuted_view(spec.input(0).shape, transpose_perm(spec)));
}

KernelOrReason make_tile(const OpSpec& spec, std::span<const TensorInfo>) {
  // Output viewed as [r0, d0, r1, d1, ...]: repeats step with stride 0 over the input.
  const Shape& in = spec.input(0).shape;
  const std::vector<int64_t> in_strides = contiguous_strides(in);
  const std::vector<int64_t> repeats = spec.constant_input(1, "repeats").to_int64_vector();
  View view;
  for (size_t d = 0; d < in.size(); ++d) {
    view.shape.push_back(repeats[d]);
    view.strides.push_back(0);
    view.shape.push_back(in[d]);
    view.strides.push_back(in_strides[d]);
  }
  return make_view_copy("native:tile", spec, std::move(view));
}

// DepthToSpace: the input [N, C, H, W] reshaped to 6-D and transposed (ONNX's own definition).
KernelOrReason make_depth_to_space(const OpSpec& spec, std::span<const TensorInfo>) {
  const SpaceDepthParams params = space_depth_params(spec);
  const Shape& in = spec.input(0).shape;
  const int64_t b = params.block;
  const int64_t depth = in[1] / (b * b);
  if (params.column_row_depth) {  // CRD: [N, C', b, b, H, W] -> [N, C', H, b, W, b]
    return make_view_copy("native:depth_to_space", spec,
                          permuted_view({in[0], depth, b, b, in[2], in[3]}, {0, 1, 4, 2, 5, 3}));
  }
  // DCR: [N, b, b, C', H, W] -> [N, C', H, b, W, b]
  return make_view_copy("native:depth_to_space", spec,
                        permuted_view({in[0], b, b, depth, in[2], in[3]}, {0, 3, 4, 1, 5, 2}));
}

// SpaceToDepth: [N, C, H/b, b, W/b, b] -> [N, b, b, C, H/b, W/b].
KernelOrReason make_space_to_depth(const OpSpec& spec, std::span<const TensorInfo>) {
  const int64_t b = space_depth_params(spec).block;
  const Shape& in = spec.input(0).shape;
  return make_view_copy("native:space_to_depth", spec,
                        permuted_view({in[0], in[1], in[2] / b, b, in[3] / b, b}, {0, 3, 5, 1, 2, 4}));
}

// ---- Gather, GatherElements ----------------------------------------------------------------------

// Reads index i of an int32 or int64 tensor.
int64_t index_at(const Tensor& indices, int64_t i) {
  return indices.dtype() == DType::i64 ? indices.data<int64_t>()[i] : indices.data<int32_t>()[i];
}

// Negative indices count from the end; anything else out of range is an error naming the index.
int64_t checked_index(int64_t index, int64_t dim, const char* op) {
  KILN_CHECK(index >= -dim && index < dim, invalid_argument, op, " index ", index,
             " is out of range for a dim of size ", dim);
  return index < 0 ? index + dim : index;
}

KernelOrReason make_gather(const OpSpec& spec, std::span<const TensorInfo>) {
  const Shape& data = spec.input(0).shape;
  const size_t axis =
      static_cast<size_t>(normalize_axis(spec.attrs().get_int("axis", 0), static_cast<int64_t>(data.size())));
  const int64_t outer = product(data, 0, axis);
  const int64_t dim = data[axis];
  const int64_t inner_bytes =
      product(data, axis + 1, data.size()) * static_cast<int64_t>(dtype_size(spec.input(0).dtype));
  return make_kernel("native:gather", [=](std::span<const Tensor> inputs, std::span<Tensor> dst) {
    // Indices are data: every one is checked before any is used.
    const Tensor& indices = inputs[1];
    const int64_t count = indices.numel();
    std::vector<int64_t> resolved(static_cast<size_t>(count));
    for (int64_t j = 0; j < count; ++j)
      resolved[static_cast<size_t>(j)] = checked_index(index_at(indices, j), dim, "Gather");
    if (inner_bytes == 0) return;
    const char* src = static_cast<const char*>(inputs[0].raw_data());
    char* out = static_cast<char*>(dst[0].raw_data());
    parallel_for(0, outer * count, copy_cost(inner_bytes), [&](int64_t begin, int64_t end) {
      for (int64_t k = begin; k < end; ++k) {
        const int64_t o = k / count;
        const int64_t j = k % count;
        std::memcpy(out + k * inner_bytes, src + (o * dim + resolved[static_cast<size_t>(j)]) * inner_bytes,
                    static_cast<size_t>(inner_bytes));
      }
    });
  });
}

template <typename U>
void gather_elements(U* dst, const U* src, const Tensor& indices, const Shape& data, const Shape& out,
                     size_t axis) {
  const size_t rank = out.size();
  const std::vector<int64_t> data_strides = contiguous_strides(data);
  const int64_t row = out.back();  // elements per output row, walked with one odometer step each
  const int64_t rows = product(out, 0, rank - 1);
  parallel_for(0, rows, row, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      // Source offset of this row with index 0 on the gather axis.
      int64_t base = 0;
      int64_t rest = r;
      for (size_t d = rank - 1; d-- > 0;) {
        if (d != axis) base += (rest % out[d]) * data_strides[d];
        rest /= out[d];
      }
      const int64_t first = r * row;
      if (axis == rank - 1) {
        for (int64_t i = 0; i < row; ++i) {
          dst[first + i] =
              src[base + checked_index(index_at(indices, first + i), data[axis], "GatherElements")];
        }
      } else {
        const int64_t axis_stride = data_strides[axis];
        for (int64_t i = 0; i < row; ++i) {
          const int64_t index = checked_index(index_at(indices, first + i), data[axis], "GatherElements");
          dst[first + i] = src[base + i + index * axis_stride];
        }
      }
    }
  });
}

KernelOrReason make_gather_elements(const OpSpec& spec, std::span<const TensorInfo> outputs) {
  const Shape data = spec.input(0).shape;
  const size_t axis =
      static_cast<size_t>(normalize_axis(spec.attrs().get_int("axis", 0), static_cast<int64_t>(data.size())));
  const Shape out = outputs[0].shape;
  const size_t element_size = dtype_size(spec.input(0).dtype);
  bool supported = false;
  visit_element_size(
      element_size, [&](auto) { supported = true; }, [] {});
  if (!supported)
    return KernelOrReason::rejected(RefusalKind::unsupported_dtype,
                                    "native GatherElements needs 1, 2, 4 or 8-byte elements");
  return make_kernel("native:gather_elements", [=](std::span<const Tensor> inputs, std::span<Tensor> dst) {
    if (dst[0].numel() == 0) return;
    visit_element_size(
        element_size,
        [&](auto tag) {
          using U = decltype(tag);
          gather_elements(dst[0].data<U>(), inputs[0].data<U>(), inputs[1], data, out, axis);
        },
        [] {});
  });
}

// ---- Pad -----------------------------------------------------------------------------------------

enum class PadMode { constant, reflect, edge, wrap };

PadMode pad_mode(const std::string& mode) {
  if (mode == "reflect") return PadMode::reflect;
  if (mode == "edge") return PadMode::edge;
  if (mode == "wrap") return PadMode::wrap;
  return PadMode::constant;
}

// The source coordinate for output coordinate `c` shifted by the begin pad (c may lie outside
// [0, dim)), or -1 when constant padding fills it.
int64_t pad_source(int64_t c, int64_t dim, PadMode mode) {
  if (c >= 0 && c < dim) return c;
  switch (mode) {
    case PadMode::constant:
      return -1;
    case PadMode::edge:
      return c < 0 ? 0 : dim - 1;
    case PadMode::reflect:
      return c < 0 ? -c : 2 * (dim - 1) - c;  // pads < dim, checked at plan time
    case PadMode::wrap:
      return ((c % dim) + dim) % dim;
  }
  return -1;
}

// The fill value of constant Pad as one element of `dtype`: opset 11+ reads input 2 at run time,
// older opsets the float `value` attribute.
Tensor pad_attribute_value(const OpSpec& spec) {
  const float value = spec.opset < 11 ? spec.attrs().get_float("value", 0.0f) : 0.0f;
  return visit_dtype(spec.input(0).dtype, [value](auto tag) {
    using T = decltype(tag);
    return Tensor::scalar<T>(from_compute<T>(value));
  });
}

template <typename U>
void pad_rows(U* dst, const U* src, U fill, const Shape& in, const Shape& out,
              const std::vector<int64_t>& pads, PadMode mode) {
  const size_t rank = out.size();
  const std::vector<int64_t> in_strides = contiguous_strides(in);
  const int64_t out_row = out.back();
  const int64_t in_row = in.back();
  const int64_t begin_pad = pads[rank - 1];
  // Output columns [copy_begin, copy_end) come straight from the source row.
  const int64_t copy_begin = std::clamp<int64_t>(begin_pad, 0, out_row);
  const int64_t copy_end = std::clamp<int64_t>(begin_pad + in_row, copy_begin, out_row);
  const int64_t rows = product(out, 0, rank - 1);
  parallel_for(0, rows, out_row, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      U* to = dst + r * out_row;
      int64_t offset = 0;
      bool filled = false;
      int64_t rest = r;
      for (size_t d = rank - 1; d-- > 0;) {
        const int64_t source = pad_source(rest % out[d] - pads[d], in[d], mode);
        rest /= out[d];
        if (source < 0) {
          filled = true;
          break;
        }
        offset += source * in_strides[d];
      }
      if (filled) {
        std::fill(to, to + out_row, fill);
        continue;
      }
      const U* from = src + offset;
      for (int64_t c = 0; c < copy_begin; ++c) {
        const int64_t source = pad_source(c - begin_pad, in_row, mode);
        to[c] = source < 0 ? fill : from[source];
      }
      if (copy_end > copy_begin) {
        std::memcpy(to + copy_begin, from + (copy_begin - begin_pad),
                    static_cast<size_t>(copy_end - copy_begin) * sizeof(U));
      }
      for (int64_t c = copy_end; c < out_row; ++c) {
        const int64_t source = pad_source(c - begin_pad, in_row, mode);
        to[c] = source < 0 ? fill : from[source];
      }
    }
  });
}

KernelOrReason make_pad(const OpSpec& spec, std::span<const TensorInfo> outputs) {
  const PadParams params = pad_params(spec);
  const PadMode mode = pad_mode(params.mode);
  Shape in = spec.input(0).shape;
  Shape out = outputs[0].shape;
  std::vector<int64_t> pads = params.pads;
  if (in.empty()) {  // a scalar pads nothing; treat it as one element in one dim
    in = out = {1};
    pads = {0, 0};
  }
  const size_t element_size = dtype_size(spec.input(0).dtype);
  const bool value_input = spec.opset >= 11 && spec.has_input(2);
  const Tensor attribute_value = pad_attribute_value(spec);
  bool supported = false;
  visit_element_size(
      element_size, [&](auto) { supported = true; }, [] {});
  if (!supported)
    return KernelOrReason::rejected(RefusalKind::unsupported_dtype,
                                    "native Pad needs 1, 2, 4 or 8-byte elements");
  return make_kernel("native:pad", [=](std::span<const Tensor> inputs, std::span<Tensor> dst) {
    const Tensor* value = &attribute_value;
    if (value_input && inputs.size() > 2 && inputs[2].defined()) {
      KILN_CHECK(inputs[2].numel() == 1, invalid_argument,
                 "Pad constant_value must have one element, got shape ", shape_to_string(inputs[2].shape()));
      value = &inputs[2];
    }
    if (dst[0].numel() == 0) return;
    visit_element_size(
        element_size,
        [&](auto tag) {
          using U = decltype(tag);
          U fill;
          std::memcpy(&fill, value->raw_data(), sizeof(U));
          pad_rows(dst[0].data<U>(), inputs[0].data<U>(), fill, in, out, pads, mode);
        },
        [] {});
  });
}

constexpr KernelEntry kKernels[] = {
    {"Concat", make_concat},
    {"Split", make_split},
    {"Slice", make_slice},
    {"Transpose", make_transpose},
    {"Gather", make_gather},
    {"GatherElements", make_gather_elements},
    {"Tile", make_tile},
    {"Pad", make_pad},
    {"CenterCropPad", make_pad},
    {"DepthToSpace", make_depth_to_space},
    {"SpaceToDepth", make_space_to_depth},
};

}  // namespace

std::span<const KernelEntry> data_movement_kernels() {
  return kKernels;
}

KernelOrReason create_channels_last_kernel(const KernelRequest& request,
                                           std::span<const TensorInfo> outputs) {
  const OpSpec& spec = request.op;
  if (!is_default_domain(spec.domain) || spec.input(0).shape.size() != 4)
    return KernelOrReason::rejected(RefusalKind::unsupported_layout, "channels-last values are [N, C, H, W]");
  if (spec.op_type == "Slice") return make_channels_last_slice(spec, outputs);
  if (spec.op_type == "Concat") return make_channels_last_concat(spec, outputs);
  return KernelOrReason::rejected(RefusalKind::unsupported_layout,
                                  str_cat("no native kernel reads ", spec.op_type, " channels-last"));
}

}  // namespace kiln::native
