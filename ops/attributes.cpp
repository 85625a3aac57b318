#include "ops/attributes.h"

#include "core/error.h"

namespace kiln {

std::string_view attribute_type_name(Attribute::Type type) {
  switch (type) {
    case Attribute::Type::f: return "float";
    case Attribute::Type::i: return "int";
    case Attribute::Type::s: return "string";
    case Attribute::Type::t: return "tensor";
    case Attribute::Type::g: return "graph";
    case Attribute::Type::floats: return "floats";
    case Attribute::Type::ints: return "ints";
    case Attribute::Type::strings: return "strings";
    case Attribute::Type::tensors: return "tensors";
    case Attribute::Type::graphs: return "graphs";
    case Attribute::Type::type:
      return "type";
  }
  return "unknown";
}

const Attribute* Attributes::find(const std::string& name) const {
  auto it = values_.find(name);
  return it == values_.end() ? nullptr : &it->second;
}

const Attribute* Attributes::find_typed(const std::string& name, Attribute::Type type) const {
  const Attribute* attribute = find(name);
  if (attribute != nullptr && attribute->type != type) {
    fail(ErrorKind::invalid_model, "attribute '", name, "' has type ", attribute_type_name(attribute->type),
         ", expected ", attribute_type_name(type));
  }
  return attribute;
}

int64_t Attributes::get_int(const std::string& name, int64_t fallback) const {
  const Attribute* attribute = find_typed(name, Attribute::Type::i);
  return attribute ? attribute->i : fallback;
}

float Attributes::get_float(const std::string& name, float fallback) const {
  const Attribute* attribute = find_typed(name, Attribute::Type::f);
  return attribute ? attribute->f : fallback;
}

std::string Attributes::get_string(const std::string& name, const std::string& fallback) const {
  const Attribute* attribute = find_typed(name, Attribute::Type::s);
  return attribute ? attribute->s : fallback;
}

std::vector<int64_t> Attributes::get_ints(const std::string& name, std::vector<int64_t> fallback) const {
  const Attribute* attribute = find_typed(name, Attribute::Type::ints);
  return attribute ? attribute->ints : fallback;
}

std::vector<float> Attributes::get_floats(const std::string& name, std::vector<float> fallback) const {
  const Attribute* attribute = find_typed(name, Attribute::Type::floats);
  return attribute ? attribute->floats : fallback;
}

int64_t Attributes::require_int(const std::string& name) const {
  const Attribute* attribute = find_typed(name, Attribute::Type::i);
  KILN_CHECK(attribute != nullptr, invalid_model, "required attribute '", name, "' is missing");
  return attribute->i;
}

const Tensor& Attributes::require_tensor(const std::string& name) const {
  const Attribute* attribute = find_typed(name, Attribute::Type::t);
  KILN_CHECK(attribute != nullptr, invalid_model, "required attribute '", name, "' is missing");
  return attribute->t;
}

}  // namespace kiln
