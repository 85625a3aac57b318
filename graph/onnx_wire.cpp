#include "graph/onnx_wire.h"

namespace kiln {
namespace {

// Field numbers of onnx.proto walked on the way to the weights.
constexpr uint32_t kModelGraph = 7;          // ModelProto.graph
constexpr uint32_t kGraphInitializer = 5;    // GraphProto.initializer
constexpr uint32_t kTensorRawData = 9;       // TensorProto.raw_data
constexpr uint32_t kLengthDelimited = 2;     // the wire type of messages and bytes

// One field of a message: its tag, and for length-delimited fields the payload.
struct Field {
  uint32_t number = 0;
  uint32_t wire_type = 0;
  std::span<const uint8_t> whole;    // tag through payload, as it appears in the input
  std::span<const uint8_t> payload;  // length-delimited fields only
};

class Reader {
 public:
  explicit Reader(std::span<const uint8_t> bytes) : bytes_(bytes) {}
  bool done() const { return position_ == bytes_.size(); }

  // The next field, or nullopt when the bytes are malformed (groups included: ONNX has none).
  std::optional<Field> next() {
    const size_t start = position_;
    const std::optional<uint64_t> tag = varint();
    if (!tag || (*tag >> 3) == 0 || (*tag >> 3) > 0x1fffffff) return std::nullopt;
    Field field;
    field.number = static_cast<uint32_t>(*tag >> 3);
    field.wire_type = static_cast<uint32_t>(*tag & 7);
    switch (field.wire_type) {
      case 0:
        if (!varint()) return std::nullopt;
        break;
      case 1:
        if (!skip(8)) return std::nullopt;
        break;
      case 5:
        if (!skip(4)) return std::nullopt;
        break;
      case kLengthDelimited: {
        const std::optional<uint64_t> length = varint();
        if (!length || *length > bytes_.size() - position_) return std::nullopt;
        field.payload = bytes_.subspan(position_, static_cast<size_t>(*length));
        position_ += static_cast<size_t>(*length);
        break;
      }
      default:
        return std::nullopt;
    }
    field.whole = bytes_.subspan(start, position_ - start);
    return field;
  }

 private:
  std::optional<uint64_t> varint() {
    uint64_t value = 0;
    for (int shift = 0; shift < 64 && position_ < bytes_.size(); shift += 7) {
      const uint8_t byte = bytes_[position_++];
      value |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if ((byte & 0x80) == 0) return value;
    }
    return std::nullopt;
  }
  bool skip(size_t count) {
    if (count > bytes_.size() - position_) return false;
    position_ += count;
    return true;
  }

  std::span<const uint8_t> bytes_;
  size_t position_ = 0;
};

void append(std::string& out, std::span<const uint8_t> bytes) {
  out.append(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

void append_varint(std::string& out, uint64_t value) {
  while (value >= 0x80) {
    out.push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
}

void append_message(std::string& out, uint32_t number, const std::string& payload) {
  append_varint(out, (static_cast<uint64_t>(number) << 3) | kLengthDelimited);
  append_varint(out, payload.size());
  out += payload;
}

// Copies `message`'s fields to `out`, rewriting each length-delimited field numbered `number` with
// `rewrite` (which returns false on malformed bytes).
template <typename Rewrite>
bool copy_rewriting(std::span<const uint8_t> message, uint32_t number, std::string& out, Rewrite rewrite) {
  Reader reader(message);
  while (!reader.done()) {
    const std::optional<Field> field = reader.next();
    if (!field) return false;
    if (field->number != number || field->wire_type != kLengthDelimited) {
      append(out, field->whole);
      continue;
    }
    std::string rewritten;
    if (!rewrite(field->payload, rewritten)) return false;
    append_message(out, number, rewritten);
  }
  return true;
}

}  // namespace

std::optional<SplitModel> split_initializer_data(std::span<const uint8_t> model) {
  SplitModel split;
  const auto strip_tensor = [&](std::span<const uint8_t> tensor, std::string& out) {
    std::optional<std::span<const uint8_t>> raw;
    Reader reader(tensor);
    while (!reader.done()) {
      const std::optional<Field> field = reader.next();
      if (!field) return false;
      if (field->number == kTensorRawData && field->wire_type == kLengthDelimited) {
        raw = field->payload;
      } else {
        append(out, field->whole);
      }
    }
    split.raw_data.push_back(raw);
    return true;
  };
  const auto strip_graph = [&](std::span<const uint8_t> graph, std::string& out) {
    return copy_rewriting(graph, kGraphInitializer, out, strip_tensor);
  };
  if (!copy_rewriting(model, kModelGraph, split.skeleton, strip_graph)) return std::nullopt;
  return split;
}

}  // namespace kiln
