// Native If, Loop, Scan and SequenceMap: each iteration or branch runs its subgraph's own plan
// (ops/subgraph.h), whose steps the profiler and verbose show under this kernel's step.
#include "ops/control_flow.h"

#include <cstring>
#include <optional>

#include "backends/base/function_kernel.h"
#include "backends/native/native_backend.h"
#include "core/memory_limit.h"
#include "runtime/run_control.h"

namespace kiln::native {
namespace {

// Writes `value` into a planned output (a copy) or hands it over as a run-sized one.
void deliver(const Tensor& value, Tensor& output, const char* what) {
  if (!output.defined()) {
    output = value;
    return;
  }
  KILN_CHECK(!value.is_sequence() && value.shape() == output.shape() && value.dtype() == output.dtype(),
             invalid_argument, what, " is ", value.is_sequence() ? "a sequence" : dtype_name(value.dtype()),
             " ", shape_to_string(value.shape()), " where planning expected ", dtype_name(output.dtype()),
             " ", shape_to_string(output.shape()));
  if (value.nbytes() > 0) std::memcpy(output.raw_data(), value.raw_data(), value.nbytes());
}

template <typename RunFn>
KernelOrReason control_flow_kernel(std::string name, std::span<const TensorInfo> outputs, RunFn run) {
  for (const TensorInfo& output : outputs) {
    if (output.present() && !output.is_static_tensor())
      return make_sizing_kernel(std::move(name), std::move(run));
  }
  return make_kernel(std::move(name), std::move(run));
}

std::vector<Tensor> with_captures(std::vector<Tensor> own, std::span<const Tensor> captures) {
  own.insert(own.end(), captures.begin(), captures.end());
  return own;
}

void expect_outputs(const std::vector<Tensor>& outputs, size_t count, const char* op) {
  KILN_CHECK(outputs.size() == count, invalid_model, op, "'s subgraph returned ", outputs.size(),
             " values, expected ", count);
}

bool truth(const Tensor& value, const char* what) {
  KILN_CHECK(!value.is_sequence() && value.dtype() == DType::boolean && value.numel() == 1, type_mismatch,
             what, " must be one bool, got ", dtype_name(value.dtype()), " ", shape_to_string(value.shape()));
  return value.data<bool>()[0];
}

// The kernel outlives the spec, so it holds its subgraphs by shared pointer.
std::shared_ptr<const Subgraph> shared_subgraph(const OpSpec& spec, std::string_view name) {
  spec.subgraph(name);  // throws naming the attribute when it is missing
  for (const auto& [attribute, graph] : spec.subgraphs) {
    if (attribute == name) return graph;
  }
  return nullptr;
}

KernelOrReason make_if(const OpSpec& spec, std::span<const TensorInfo> outputs) {
  const std::shared_ptr<const Subgraph> then_branch = shared_subgraph(spec, "then_branch");
  const std::shared_ptr<const Subgraph> else_branch = shared_subgraph(spec, "else_branch");
  return control_flow_kernel(
      "native:if", outputs, [=](std::span<const Tensor> inputs, std::span<Tensor> out) {
        const Subgraph& taken = truth(inputs[0], "If's condition") ? *then_branch : *else_branch;
        const std::vector<Tensor> values = taken.run(inputs.subspan(1));
        expect_outputs(values, out.size(), "If");
        for (size_t i = 0; i < out.size(); ++i) deliver(values[i], out[i], "an If output");
      });
}

// Stacks one slice per iteration along a new leading axis.
Tensor stack(const std::vector<Tensor>& slices, DType dtype, size_t index) {
  if (slices.empty()) return Tensor::empty(dtype, {0});
  Shape shape = slices[0].shape();
  for (size_t t = 1; t < slices.size(); ++t) {
    KILN_CHECK(slices[t].shape() == shape && slices[t].dtype() == dtype, invalid_argument,
               "Loop scan output ", index, " is ", shape_to_string(slices[t].shape()), " in iteration ", t,
               " but ", shape_to_string(shape), " in iteration 0: the slices it stacks must agree");
  }
  shape.insert(shape.begin(), static_cast<int64_t>(slices.size()));
  Tensor stacked = Tensor::empty(dtype, shape);
  char* destination = static_cast<char*>(stacked.raw_data());
  for (const Tensor& slice : slices) {
    std::memcpy(destination, slice.raw_data(), slice.nbytes());
    destination += slice.nbytes();
  }
  return stacked;
}

// A loop-carried value the body appends rows to (Subgraph::appended_outputs): kept in a buffer
// that doubles when full, so N appends copy O(N) rows instead of the O(N^2) of a Concat per
// iteration.
class GrowingRows {
 public:
  explicit GrowingRows(const Tensor& initial)
      : buffer_(initial),
        rows_(initial.dim(0)),
        row_shape_(initial.shape().begin() + 1, initial.shape().end()) {}

  Tensor value() const { return buffer_.leading(rows_); }

  void append(const Tensor& rows, size_t index) {
    Shape expected = row_shape_;
    expected.insert(expected.begin(), rows.rank() > 0 ? rows.dim(0) : 0);
    KILN_CHECK(!rows.is_sequence() && rows.dtype() == buffer_.dtype() && rows.shape() == expected,
               invalid_argument, "Loop-carried value ", index, " appends ", dtype_name(rows.dtype()), " ",
               shape_to_string(rows.shape()), " to ", dtype_name(buffer_.dtype()), " rows of shape ",
               shape_to_string(row_shape_), ": Concat needs the same dims but the first");
    const int64_t needed = rows_ + rows.dim(0);
    const size_t row_bytes = static_cast<size_t>(checked_numel(row_shape_)) * dtype_size(buffer_.dtype());
    if (!owned_ || needed > buffer_.dim(0)) {
      Shape shape = row_shape_;
      shape.insert(shape.begin(), std::max(needed, 2 * buffer_.dim(0)));
      Tensor grown = Tensor::empty(buffer_.dtype(), shape);
      if (rows_ > 0)
        std::memcpy(grown.raw_data(), buffer_.raw_data(), static_cast<size_t>(rows_) * row_bytes);
      buffer_ = grown;
      owned_ = true;
    }
    if (rows.nbytes() > 0)
      std::memcpy(static_cast<char*>(buffer_.raw_data()) + static_cast<size_t>(rows_) * row_bytes,
                  rows.raw_data(), rows.nbytes());
    rows_ = needed;
  }

 private:
  Tensor buffer_;
  int64_t rows_;
  Shape row_shape_;
  bool owned_ = false;  // the initial value is the caller's: copied before the first append
};

KernelOrReason make_loop(const OpSpec& spec, std::span<const TensorInfo> outputs) {
  const std::shared_ptr<const Subgraph> body = shared_subgraph(spec, "body");
  const size_t own = body->num_inputs();
  const size_t carried = own - 2;
  const size_t scanned = body->num_outputs() - 1 - carried;
  std::vector<DType> scan_dtypes;
  for (size_t k = 0; k < scanned; ++k)
    scan_dtypes.push_back(carried + k < outputs.size() ? outputs[carried + k].dtype : DType::f32);
  return control_flow_kernel(
      "native:loop", outputs, [=](std::span<const Tensor> inputs, std::span<Tensor> out) {
        const bool counted = inputs[0].defined();
        const int64_t trip_count = counted ? inputs[0].int_at(0) : 0;
        KILN_CHECK(trip_count <= kMaxLoopIterations, invalid_argument, "Loop trip count ", trip_count,
                   " exceeds kiln's limit of ", kMaxLoopIterations, " iterations");
        bool condition = inputs[1].defined() ? truth(inputs[1], "Loop's condition") : true;
        std::vector<Tensor> values(inputs.begin() + 2, inputs.begin() + static_cast<std::ptrdiff_t>(own));
        const std::vector<bool>& appended = body->appended_outputs();
        std::vector<std::optional<GrowingRows>> growing(carried);
        for (size_t v = 0; v < carried; ++v) {
          if (1 + v >= appended.size() || !appended[1 + v]) continue;
          KILN_CHECK(!values[v].is_sequence() && values[v].rank() >= 1, invalid_argument,
                     "Loop-carried value ", v,
                     " is concatenated along axis 0, but its initial value has no axis 0");
          growing[v].emplace(values[v]);
        }
        const std::span<const Tensor> captures = inputs.subspan(own);
        std::vector<std::vector<Tensor>> slices(scanned);
        const RunControl* control = current_run_control();
        const uint64_t memory = planning_memory_limit_bytes();
        uint64_t stacked_bytes = 0;
        for (int64_t i = 0; (!counted || i < trip_count) && condition; ++i) {
          KILN_CHECK(i < kMaxLoopIterations, invalid_argument, "Loop ran ", kMaxLoopIterations,
                     " iterations without its condition turning false: kiln's limit");
          if (control != nullptr) control->check("between Loop iterations");
          std::vector<Tensor> body_inputs = {Tensor::scalar<int64_t>(i), Tensor::scalar(condition)};
          body_inputs.insert(body_inputs.end(), values.begin(), values.end());
          std::vector<Tensor> results = body->run(with_captures(std::move(body_inputs), captures));
          expect_outputs(results, 1 + carried + scanned, "Loop");
          condition = truth(results[0], "the Loop body's condition output");
          for (size_t v = 0; v < carried; ++v) {
            if (growing[v]) {
              growing[v]->append(results[1 + v], v);
              values[v] = growing[v]->value();
            } else {
              values[v] = std::move(results[1 + v]);
            }
          }
          for (size_t k = 0; k < scanned; ++k) {
            stacked_bytes += results[1 + carried + k].nbytes();
            slices[k].push_back(std::move(results[1 + carried + k]));
          }
          // Stacking twice what the slices hold must fit: a loop that would not is stopped here, not by
          // the machine running out of memory.
          KILN_CHECK(memory == 0 || 2 * stacked_bytes <= memory, invalid_argument,
                     "Loop's scan outputs reached ", stacked_bytes >> 20, " MiB after ", i + 1,
                     " iterations: stacking them needs more memory than this machine has (", memory >> 20,
                     " MiB)");
        }
        for (size_t o = 0; o < out.size(); ++o) {
          if (o < carried) {
            deliver(values[o], out[o], "a Loop output");
          } else if (o - carried < scanned) {
            deliver(stack(slices[o - carried], scan_dtypes[o - carried], o - carried), out[o],
                    "a Loop scan output");
          }
        }
      });
}

// Element offset arithmetic for taking slice `index` of `tensor` along `axis` (or writing one).
struct AxisBlocks {
  int64_t outer = 1;
  int64_t length = 1;
  size_t inner_bytes = 0;

  AxisBlocks(const Shape& shape, int64_t axis, DType dtype)
      : outer(checked_numel(std::span(shape).first(static_cast<size_t>(axis)))),
        length(shape[static_cast<size_t>(axis)]),
        inner_bytes(
            static_cast<size_t>(checked_numel(std::span(shape).subspan(static_cast<size_t>(axis) + 1))) *
            dtype_size(dtype)) {}

  void read(const char* source, int64_t index, char* slice) const {
    for (int64_t o = 0; o < outer; ++o)
      std::memcpy(slice + static_cast<size_t>(o) * inner_bytes,
                  source + static_cast<size_t>(o * length + index) * inner_bytes, inner_bytes);
  }
  void write(const char* slice, int64_t index, char* destination) const {
    for (int64_t o = 0; o < outer; ++o)
      std::memcpy(destination + static_cast<size_t>(o * length + index) * inner_bytes,
                  slice + static_cast<size_t>(o) * inner_bytes, inner_bytes);
  }
};

Shape without_axis(Shape shape, int64_t axis) {
  shape.erase(shape.begin() + axis);
  return shape;
}

KernelOrReason make_scan(const OpSpec& spec, std::span<const TensorInfo> outputs) {
  ScanParams params = scan_params(spec, {});
  const int64_t extra = params.batched ? 1 : 0;
  const int64_t first = params.batched ? 1 : 0;
  for (int64_t k = 0;
       k < params.num_scan_outputs && params.num_states + k < static_cast<int64_t>(outputs.size()); ++k) {
    const int64_t rank =
        static_cast<int64_t>(outputs[static_cast<size_t>(params.num_states + k)].shape.size()) - extra;
    params.output_axes[static_cast<size_t>(k)] =
        normalize_axis(params.output_axes[static_cast<size_t>(k)], rank, "Scan scan_output_axes") + extra;
  }
  const std::shared_ptr<const Subgraph> body = shared_subgraph(spec, "body");
  const size_t own = static_cast<size_t>(first + params.num_states + params.num_scan_inputs);
  return make_kernel("native:scan", [=](std::span<const Tensor> inputs, std::span<Tensor> out) {
    const std::span<const Tensor> captures = inputs.subspan(own);
    const size_t states = static_cast<size_t>(params.num_states);
    for (int64_t b = 0; b < params.batch; ++b) {
      // One batch entry of a value (opset 8), or the value itself.
      const auto entry = [&](const Tensor& value) {
        if (!params.batched) return value;
        const Shape shape(value.shape().begin() + 1, value.shape().end());
        const size_t bytes = static_cast<size_t>(checked_numel(shape)) * dtype_size(value.dtype());
        return Tensor::wrap(const_cast<char*>(static_cast<const char*>(value.raw_data())) + b * bytes,
                            value.dtype(), shape);
      };
      std::vector<Tensor> state_values;
      for (size_t s = 0; s < states; ++s)
        state_values.push_back(entry(inputs[static_cast<size_t>(first) + s]));
      for (int64_t t = 0; t < params.trip_count; ++t) {
        std::vector<Tensor> body_inputs = state_values;
        for (int64_t j = 0; j < params.num_scan_inputs; ++j) {
          const Tensor source = entry(inputs[static_cast<size_t>(first + params.num_states + j)]);
          const int64_t axis = params.input_axes[static_cast<size_t>(j)] - extra;
          const int64_t index = params.input_reverse[static_cast<size_t>(j)] ? params.trip_count - 1 - t : t;
          Tensor slice = Tensor::empty(source.dtype(), without_axis(source.shape(), axis));
          AxisBlocks(source.shape(), axis, source.dtype())
              .read(static_cast<const char*>(source.raw_data()), index, static_cast<char*>(slice.raw_data()));
          body_inputs.push_back(slice);
        }
        std::vector<Tensor> results = body->run(with_captures(std::move(body_inputs), captures));
        expect_outputs(results, static_cast<size_t>(params.num_states + params.num_scan_outputs), "Scan");
        for (size_t s = 0; s < states; ++s) state_values[s] = results[s];
        for (int64_t k = 0; k < params.num_scan_outputs && states + static_cast<size_t>(k) < out.size();
             ++k) {
          const Tensor& slice = results[states + static_cast<size_t>(k)];
          Tensor destination = entry(out[states + static_cast<size_t>(k)]);
          const int64_t axis = params.output_axes[static_cast<size_t>(k)] - extra;
          KILN_CHECK(slice.shape() == without_axis(destination.shape(), axis) &&
                         slice.dtype() == destination.dtype(),
                     invalid_argument, "Scan output ", k, " is ", shape_to_string(slice.shape()),
                     " in iteration ", t, ", planned as ",
                     shape_to_string(without_axis(destination.shape(), axis)));
          const int64_t index = params.output_reverse[static_cast<size_t>(k)] ? params.trip_count - 1 - t : t;
          AxisBlocks(destination.shape(), axis, slice.dtype())
              .write(static_cast<const char*>(slice.raw_data()), index,
                     static_cast<char*>(destination.raw_data()));
        }
      }
      for (size_t s = 0; s < states && s < out.size(); ++s) {
        Tensor destination = entry(out[s]);
        deliver(state_values[s], destination, "a Scan state");
      }
    }
  });
}

KernelOrReason make_sequence_map(const OpSpec& spec, std::span<const TensorInfo> outputs) {
  const std::shared_ptr<const Subgraph> body = shared_subgraph(spec, "body");
  const size_t own = body->num_inputs();
  std::vector<DType> dtypes;
  for (const TensorInfo& output : outputs) dtypes.push_back(output.dtype);
  return make_sizing_kernel(
      "native:sequence_map", [=](std::span<const Tensor> inputs, std::span<Tensor> out) {
        const size_t length = inputs[0].elements().size();
        for (size_t j = 1; j < own; ++j) {
          KILN_CHECK(!inputs[j].is_sequence() || inputs[j].elements().size() == length, invalid_argument,
                     "SequenceMap input ", j, " has ", inputs[j].elements().size(), " elements, input 0 has ",
                     length);
        }
        std::vector<std::vector<Tensor>> results(out.size());
        for (size_t i = 0; i < length; ++i) {
          std::vector<Tensor> body_inputs;
          for (size_t j = 0; j < own; ++j)
            body_inputs.push_back(inputs[j].is_sequence() ? inputs[j].elements()[i] : inputs[j]);
          std::vector<Tensor> values = body->run(with_captures(std::move(body_inputs), inputs.subspan(own)));
          expect_outputs(values, out.size(), "SequenceMap");
          for (size_t o = 0; o < out.size(); ++o) results[o].push_back(std::move(values[o]));
        }
        for (size_t o = 0; o < out.size(); ++o) out[o] = Tensor::sequence(dtypes[o], std::move(results[o]));
      });
}

// kiln's own op for the nodes planning left to the run (graph/passes/deferred.cpp): the body reads
// only the step's inputs.
KernelOrReason make_deferred_region(const OpSpec& spec, std::span<const TensorInfo>) {
  const std::shared_ptr<const Subgraph> body = shared_subgraph(spec, "body");
  return make_sizing_kernel("native:deferred_region",
                            [=](std::span<const Tensor> inputs, std::span<Tensor> out) {
                              std::vector<Tensor> values = body->run(inputs);
                              expect_outputs(values, out.size(), "a deferred region");
                              for (size_t o = 0; o < out.size(); ++o) out[o] = std::move(values[o]);
                            });
}

constexpr KernelEntry kKernels[] = {
    {"DeferredRegion", make_deferred_region}, {"If", make_if}, {"Loop", make_loop}, {"Scan", make_scan},
    {"SequenceMap", make_sequence_map},
};

}  // namespace

std::span<const KernelEntry> control_flow_kernels() {
  return kKernels;
}

}  // namespace kiln::native
