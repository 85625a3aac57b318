#include "tidy/options.h"

#include "core/error.h"

namespace kiln::tidy {

const TidyOptionRow& find_tidy_option(std::string_view name) {
  std::string known;
  for (const TidyOptionRow& row : kTidyOptions) {
    if (row.name == name || row.cli == name) return row;
    known += str_cat(known.empty() ? "" : ", ", row.name);
  }
  fail(ErrorKind::invalid_argument, "unknown tidy option '", name, "' (known: ", known, ")");
}

int64_t checked_tidy_option(const TidyOptionRow& row, int64_t value) {
  KILN_CHECK(row.type == TidyOptionType::integer, invalid_argument, "tidy option '", row.name,
             "' is not an integer");
  KILN_CHECK(value >= row.min && value <= row.max, invalid_argument, row.name, " must be ", row.min, "..",
             row.max, ", got ", value);
  return value;
}

}  // namespace kiln::tidy
