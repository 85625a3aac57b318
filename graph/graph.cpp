#include "graph/graph.h"

namespace kiln {

std::string dims_to_string(const std::vector<Dim>& dims) {
  std::string text = "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i > 0) text += ", ";
    text +=
        dims[i].is_known() ? std::to_string(dims[i].value) : (dims[i].symbol.empty() ? "?" : dims[i].symbol);
  }
  return text + "]";
}

int64_t Model::default_opset() const {
  auto it = opsets.find("");
  return it == opsets.end() ? 0 : it->second;
}

}  // namespace kiln
