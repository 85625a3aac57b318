// Kernels written as a callable: the factory computes what it can at plan time and captures it in
// the lambda that runs. Any backend may use them (native and BLAS do).
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "backends/base/kernel.h"

namespace kiln {

// A kernel whose run() is a callable capturing what the factory computed at plan time.
template <typename RunFn>
class FunctionKernel final : public Kernel {
 public:
  FunctionKernel(std::string name, RunFn run, bool is_view)
      : name_(std::move(name)), run_(std::move(run)), is_view_(is_view) {}
  void run(std::span<const Tensor> inputs, std::span<Tensor> outputs) const override {
    run_(inputs, outputs);
  }
  std::string_view name() const override { return name_; }
  bool is_view() const override { return is_view_; }

 private:
  std::string name_;
  RunFn run_;
  bool is_view_;
};

// make_kernel("native:relu", [=](auto inputs, auto outputs) { ... }) -> KernelOrReason
template <typename RunFn>
KernelOrReason make_kernel(std::string name, RunFn run) {
  return {std::make_unique<FunctionKernel<RunFn>>(std::move(name), std::move(run), false), {}, {}};
}

// A kernel that assigns views of its inputs to its outputs instead of writing into them.
template <typename RunFn>
KernelOrReason make_view_kernel(std::string name, RunFn run) {
  return {std::make_unique<FunctionKernel<RunFn>>(std::move(name), std::move(run), true), {}, {}};
}

}  // namespace kiln
