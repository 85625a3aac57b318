// The protobuf wire format of an ONNX model, read just deep enough to find the main graph's
// initializer bytes. protobuf copies every bytes field it parses, so parsing a model whole would
// hold its weights twice; kiln parses the model without them and reads each initializer's bytes
// where they lie in the mapped file.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace kiln {

struct SplitModel {
  // The ModelProto with every main-graph initializer's raw_data field removed.
  std::string skeleton;
  // Per main-graph initializer, in the order protobuf lists them: its raw_data bytes (the last one
  // when the field repeats, as protobuf keeps), or nullopt when it has none.
  std::vector<std::optional<std::span<const uint8_t>>> raw_data;
};

// Splits a serialized ModelProto; nullopt when the bytes are not well-formed protobuf along the
// path it walks (a plain parse then reports what is wrong).
std::optional<SplitModel> split_initializer_data(std::span<const uint8_t> model);

}  // namespace kiln
