// A node's attributes as ONNX defines them: typed values by name. Getters check the type and
// throw kiln::Error naming the attribute, so op code can simply ask for what it needs.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace kiln {

class Graph;  // nested graphs (If/Loop bodies) are kept opaque to the op layer

// A TYPE_PROTO attribute (Optional's `type`): a tensor or a sequence of tensors of `dtype`.
struct ValueType {
  bool sequence = false;
  DType dtype = DType::undefined;
};

struct Attribute {
  enum class Type { f, i, s, t, g, floats, ints, strings, tensors, graphs, type };
  Type type = Type::i;
  float f = 0;
  int64_t i = 0;
  std::string s;
  Tensor t;
  std::shared_ptr<const Graph> g;
  std::vector<float> floats;
  std::vector<int64_t> ints;
  std::vector<std::string> strings;
  std::vector<Tensor> tensors;
  std::vector<std::shared_ptr<const Graph>> graphs;
  ValueType value_type;
};

std::string_view attribute_type_name(Attribute::Type type);

class Attributes {
 public:
  void set(std::string name, Attribute value) { values_[std::move(name)] = std::move(value); }
  // For attributes kiln writes itself (fused forms, kiln's own ops).
  void set_int(std::string name, int64_t value) {
    Attribute attribute;
    attribute.type = Attribute::Type::i;
    attribute.i = value;
    set(std::move(name), std::move(attribute));
  }
  void set_float(std::string name, float value) {
    Attribute attribute;
    attribute.type = Attribute::Type::f;
    attribute.f = value;
    set(std::move(name), std::move(attribute));
  }
  bool has(const std::string& name) const { return values_.count(name) != 0; }
  const std::map<std::string, Attribute>& all() const { return values_; }

  // Each getter returns `fallback` when the attribute is absent and throws when it has another type.
  int64_t get_int(const std::string& name, int64_t fallback) const;
  float get_float(const std::string& name, float fallback) const;
  std::string get_string(const std::string& name, const std::string& fallback) const;
  std::vector<int64_t> get_ints(const std::string& name, std::vector<int64_t> fallback = {}) const;
  std::vector<float> get_floats(const std::string& name, std::vector<float> fallback = {}) const;
  // Required attributes: throw invalid_model when absent.
  int64_t require_int(const std::string& name) const;
  const Tensor& require_tensor(const std::string& name) const;
  // Present attribute of any type, or null.
  const Attribute* find(const std::string& name) const;

 private:
  const Attribute* find_typed(const std::string& name, Attribute::Type type) const;

  std::map<std::string, Attribute> values_;
};

}  // namespace kiln
