// Reading an inference request's JSON into a RapidJSON document with numbers converted by
// std::from_chars rather than by RapidJSON: Debian 12's RapidJSON (1.1.0) reads a long decimal with
// many zeros after the point out of bounds of its power-of-ten table in full-precision mode (a crash
// on a 500-byte request), and its normal-precision mode is not correctly rounded, which FP64 data
// needs. from_chars is exact and bounded.
#pragma once

#include <rapidjson/document.h>

#include <string_view>

namespace kiln::serve {

// Parses `text` (one JSON value; NaN, Inf, Infinity and their negatives read as numbers) into
// `document`. Integers that fit 64 bits read as Int64 or Uint64, other numbers as doubles, correctly
// rounded. Throws invalid_argument on malformed JSON ("malformed JSON at offset N: ...") and on a
// number a double cannot hold (beyond ±1.8e308, or nonzero and below 4.9e-324).
void parse_json_document(std::string_view text, rapidjson::Document& document);

}  // namespace kiln::serve
