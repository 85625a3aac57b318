// A node fused into a plan step (its activation, the sum it feeds, the nodes of a matched pattern),
// as plans, traces and tidy carry it: data, not the text explain prints.
#pragma once

#include <string>

#include "core/error.h"

namespace kiln {

struct FusedNode {
  std::string op_type;
  std::string node;  // its name in the model

  std::string text() const { return str_cat(op_type, " '", node, "'"); }  // "Relu 'name'", as printed
  bool operator==(const FusedNode&) const = default;
};

}  // namespace kiln
