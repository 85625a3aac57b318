// A backend's own settings. Each backend reads the settings it has (Backend::read_options) once per
// plan, into a typed options object; every request of that plan carries the plan's set of them and a
// backend takes its own (options_of). So a setting one backend reads is not a field of every
// request, copied in by the planner: ONNX Runtime hands an execution provider its provider options
// the same way, and oneDNN a primitive its attributes. Backends sit below the settings table
// (backends/setting_table.h), so they read settings by name through SettingValues.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

namespace kiln {

// The plan's settings as a backend reads them: by the settings table's names ("blas_threshold").
class SettingValues {
 public:
  virtual ~SettingValues() = default;
  // A choice setting's value is its index in the row's choices. Throws for a name the table lacks.
  virtual int get(std::string_view name) const = 0;
};

class BackendOptions {
 public:
  virtual ~BackendOptions() = default;
};

// A setting a backend's options hold, and the op types it concerns: what `kiln explain` lists as
// the settings a step's selection consulted.
struct OptionSetting {
  std::string_view setting;
  std::span<const std::string_view> ops;
};

// One plan's options of every backend that has some.
class BackendOptionSet {
 public:
  void add(std::shared_ptr<const BackendOptions> options) {
    if (options != nullptr) options_.push_back(std::move(options));
  }
  template <typename Options>
  const Options* find() const {
    for (const std::shared_ptr<const BackendOptions>& options : options_) {
      if (const auto* typed = dynamic_cast<const Options*>(options.get())) return typed;
    }
    return nullptr;
  }

 private:
  std::vector<std::shared_ptr<const BackendOptions>> options_;
};

// Which algorithm a 3x3 convolution may use (the conv_algorithm setting's choices, in this order):
// auto lets Winograd take a layer where it stays within its error bound and is predicted faster,
// direct never, winograd wherever it can (backends/winograd/winograd_backend.h).
enum class ConvAlgorithm : uint8_t { automatic, direct, winograd };
inline constexpr std::string_view kConvAlgorithmChoices[] = {"auto", "direct", "winograd"};

// The blas_threshold setting's default: where one BLAS thread stops beating oneDNN's per-call
// set-up on this project's machines (bench/blas_crossover.py).
inline constexpr int64_t kDefaultSmallProductLimit = 32 * 32 * 32;

}  // namespace kiln
