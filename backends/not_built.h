// The stand-in for a backend left out at configure time (KILN_WITH_<NAME>=OFF): its registry row,
// settings and name stay, is_built() and is_available() are false and it refuses every node.
// CMake generates the backend's entry point returning one (backends/not_built_entry.cpp.in).
#pragma once

#include <string>

#include "backends/base/backend.h"

namespace kiln {

class NotBuiltBackend final : public Backend {
 public:
  explicit NotBuiltBackend(std::string name) : name_(std::move(name)) {}
  std::string_view name() const override { return name_; }
  bool is_built() const override { return false; }
  bool is_available() const override { return false; }
  std::string version() const override { return {}; }
  KernelOrReason create_kernel(const KernelRequest&, std::span<const TensorInfo>) const override {
    return KernelOrReason::rejected(RefusalKind::not_built, "kiln was built without this backend");
  }

 private:
  std::string name_;
};

}  // namespace kiln
