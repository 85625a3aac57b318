// Why a kernel did not run a node, as data: who refused, one kind from a fixed catalog, and the
// detail a person reads. Code decides on the kind (tidy's patterns and estimates, tests); only
// printers read the detail, so rewording a backend's message changes nothing but what is printed.
// The catalog follows oneDNN's dispatch messages ("unsupported datatype", "unsupported attribute",
// ...): a refusal says which requirement failed, the detail says how.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace kiln {

enum class RefusalKind : uint8_t {
  // The build, a setting or the machine keeps the backend out. Selection refuses these itself,
  // without asking the backend, except deterministic: the backend is asked first, so one with no
  // kernel for the node says so instead.
  not_built,      // configured out (KILN_WITH_<NAME>=OFF)
  disabled,       // its `<backend>_enabled` setting is off
  not_preferred,  // the op family's prefer_* setting leaves it out
  unavailable,    // this CPU or the library it wraps lacks what it needs
  deterministic,  // deterministic mode: its results may differ between runs or thread counts
  // The backend was asked and refused (excluded_by_setting too: the backend reads the setting).
  no_kernel,              // it implements no kernel for the op type (or none by the name asked for)
  unsupported_dtype,      // an input's or output's element type
  unsupported_shape,      // a rank, a dimension, an empty tensor
  unsupported_attribute,  // an attribute value, an optional input or output it does not take
  unsupported_layout,     // how an input is stored, or the layout asked of an output
  unsupported_fusion,     // the post-ops fused into the node
  not_constant,           // an input it needs at plan time (weights, a bias) varies per run
  above_threshold,        // a size above a limit (blas_threshold, a memory cap)
  above_error_bound,      // its arithmetic's error on these weights exceeds the setting's bound
  predicted_slower,       // its own cost rule predicts it slower than the next candidate (Winograd)
  excluded_by_setting,    // a setting other than the above rules it out (conv_algorithm direct)
  no_alternative,         // autotune asked for an implementation the backend does not have
  library_refused,        // the wrapped library could not create it, or only its reference code
  // The backend offered a kernel that another beat.
  autotune_slower,  // timed by autotune against the chosen kernel
};

// Every kind, in declaration order.
std::span<const RefusalKind> all_refusal_kinds();
// "unsupported_dtype": the stable name traces, JSON and Python carry.
std::string_view refusal_kind_name(RefusalKind kind);
// "not_built, disabled, ...": every kind's name, for messages.
std::string refusal_kind_names();
// The kind named `name`, or nothing for a name this build does not know.
std::optional<RefusalKind> refusal_kind_from_name(std::string_view name);

struct Refusal {
  std::string backend;  // "onednn"; set by kernel selection, not by the backend refusing
  std::string variant;  // the named kernel of the backend that refused (attention's), or empty
  RefusalKind kind = RefusalKind::no_kernel;
  std::string detail;  // for people: "oneDNN Conv here runs float32 only"

  // Who refused, as plans print it: "onednn", or "flash (native)" for a named kernel.
  std::string label() const;
  // "onednn: oneDNN Conv here runs float32 only", as error messages list refusals.
  std::string text() const;
  bool operator==(const Refusal&) const = default;
};

}  // namespace kiln
