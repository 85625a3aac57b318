// Kernels written as a callable: the factory computes what it can at plan time and captures it in
// the lambda that runs. Any backend may use them (native and BLAS do).
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "backends/base/kernel.h"

namespace kiln {

// A kernel whose run() is a callable capturing what the factory computed at plan time.
// How a function kernel's outputs come to exist (Kernel::is_view, Kernel::sizes_outputs).
enum class OutputStorage { given, views, sized_by_kernel };

template <typename RunFn>
class FunctionKernel final : public Kernel {
 public:
  FunctionKernel(std::string name, RunFn run, OutputStorage storage)
      : name_(std::move(name)), run_(std::move(run)), storage_(storage) {}
  void run(std::span<const Tensor> inputs, std::span<Tensor> outputs) const override {
    run_(inputs, outputs);
  }
  std::string_view name() const override { return name_; }
  bool is_view() const override { return storage_ == OutputStorage::views; }
  bool sizes_outputs() const override { return storage_ == OutputStorage::sized_by_kernel; }

 private:
  std::string name_;
  RunFn run_;
  OutputStorage storage_;
};

// make_kernel("native:relu", [=](auto inputs, auto outputs) { ... }) -> KernelOrReason
template <typename RunFn>
KernelOrReason make_kernel(std::string name, RunFn run) {
  return {std::make_unique<FunctionKernel<RunFn>>(std::move(name), std::move(run), OutputStorage::given), {}, {}};
}

// A kernel that assigns views of its inputs to its outputs instead of writing into them.
template <typename RunFn>
KernelOrReason make_view_kernel(std::string name, RunFn run) {
  return {std::make_unique<FunctionKernel<RunFn>>(std::move(name), std::move(run), OutputStorage::views), {}, {}};
}

// A kernel whose output sizes depend on its input values: it allocates its outputs itself.
template <typename RunFn>
KernelOrReason make_sizing_kernel(std::string name, RunFn run) {
  return {std::make_unique<FunctionKernel<RunFn>>(std::move(name), std::move(run), OutputStorage::sized_by_kernel),
          {},
          {}};
}

}  // namespace kiln
