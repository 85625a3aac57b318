// Einsum: the equation (parse_einsum) and the op's schema. The contraction order is in
// ops/einsum_path.cpp, the kernel in backends/native/einsum.cpp.
#include "ops/einsum.h"

#include <algorithm>

#include "core/error.h"
#include "ops/op_schema.h"

namespace kiln {
namespace {

constexpr std::string_view kEllipsis = "...";

int letter_label(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return 26 + (c - 'a');
  return -1;
}

// One term's letters (-1 where "..." stands) as written.
struct Term {
  std::vector<int> letters;
  bool has_ellipsis = false;
};

Term parse_term(std::string_view text, std::string_view equation, const std::string& where) {
  Term term;
  for (size_t i = 0; i < text.size();) {
    if (text.substr(i, kEllipsis.size()) == kEllipsis) {
      KILN_CHECK(!term.has_ellipsis, invalid_model, "Einsum equation '", equation, "': ", where,
                 " has '...' twice");
      term.has_ellipsis = true;
      term.letters.push_back(-1);
      i += kEllipsis.size();
      continue;
    }
    const int label = letter_label(text[i]);
    KILN_CHECK(label >= 0, invalid_model, "Einsum equation '", equation, "': ", where, " has '", text[i],
               "' (labels are letters a-z, A-Z, and '...')");
    term.letters.push_back(label);
    ++i;
  }
  return term;
}

std::string without_spaces(std::string_view equation) {
  std::string compact;
  for (char c : equation) {
    if (c != ' ' && c != '\t') compact += c;
  }
  return compact;
}

}  // namespace

LabelSet EinsumEquation::labels_of(size_t operand) const {
  LabelSet set = 0;
  for (int label : operands.at(operand)) set |= LabelSet{1} << label;
  return set;
}

LabelSet EinsumEquation::output_labels() const {
  LabelSet set = 0;
  for (int label : output) set |= LabelSet{1} << label;
  return set;
}

std::string EinsumEquation::label_name(int label) const {
  if (label < 26) return std::string(1, static_cast<char>('A' + label));
  if (label < kEinsumLetterLabels) return std::string(1, static_cast<char>('a' + label - 26));
  return str_cat("...", label - kEinsumLetterLabels);
}

std::string EinsumEquation::term(const std::vector<int>& labels) const {
  std::string text;
  for (int label : labels) {
    // A "..." dim as a digit: 0 for the first.
    text += label < kEinsumLetterLabels
                ? label_name(label)
                : std::string(1, static_cast<char>('0' + label - kEinsumLetterLabels));
  }
  return text;
}

EinsumEquation parse_einsum(std::string_view written, const std::vector<Shape>& shapes) {
  const std::string equation = without_spaces(written);
  KILN_CHECK(!equation.empty(), invalid_model, "Einsum has an empty equation");
  const size_t arrow = equation.find("->");
  KILN_CHECK(arrow == std::string::npos || equation.find("->", arrow + 2) == std::string::npos, invalid_model,
             "Einsum equation '", written, "' has '->' twice");
  const std::string_view inputs = std::string_view(equation).substr(0, arrow);

  std::vector<Term> terms;
  for (size_t start = 0;;) {
    const size_t comma = inputs.find(',', start);
    const std::string_view text =
        inputs.substr(start, comma == std::string_view::npos ? inputs.npos : comma - start);
    terms.push_back(parse_term(text, written, str_cat("operand ", terms.size())));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  KILN_CHECK(terms.size() == shapes.size(), invalid_model, "Einsum equation '", written, "' has ",
             terms.size(), " operand term(s) but the node has ", shapes.size(), " input(s)");
  KILN_CHECK(shapes.size() <= static_cast<size_t>(kMaxEinsumOperands), not_implemented, "Einsum with ",
             shapes.size(), " operands: kiln takes at most ", kMaxEinsumOperands);

  EinsumEquation parsed;
  // How many dims "..." stands for in each operand; the equation's count is the largest.
  std::vector<int> ellipsis_dims(terms.size(), 0);
  for (size_t i = 0; i < terms.size(); ++i) {
    const int64_t rank = static_cast<int64_t>(shapes[i].size());
    const int64_t letters = static_cast<int64_t>(terms[i].letters.size()) - (terms[i].has_ellipsis ? 1 : 0);
    KILN_CHECK(terms[i].has_ellipsis ? letters <= rank : letters == rank, invalid_model, "Einsum equation '",
               written, "': operand ", i, " has ", letters, " label(s)",
               terms[i].has_ellipsis ? " and '...'" : "", " but input ", i, " has rank ", rank, " (shape ",
               shape_to_string(shapes[i]), ")");
    ellipsis_dims[i] = static_cast<int>(rank - letters);
    parsed.ellipsis_dims = std::max(parsed.ellipsis_dims, ellipsis_dims[i]);
  }
  KILN_CHECK(kEinsumLetterLabels + parsed.ellipsis_dims <= kMaxEinsumLabels, invalid_model,
             "Einsum equation '", written, "': '...' stands for ", parsed.ellipsis_dims, " dims, more than ",
             kMaxEinsumLabels - kEinsumLetterLabels, " are not supported");

  parsed.sizes.assign(static_cast<size_t>(kEinsumLetterLabels + parsed.ellipsis_dims), -1);
  std::vector<int> uses(parsed.sizes.size(), 0);
  for (size_t i = 0; i < terms.size(); ++i) {
    std::vector<int>& labels = parsed.operands.emplace_back();
    for (int letter : terms[i].letters) {
      if (letter >= 0) {
        labels.push_back(letter);
        continue;
      }
      // Right-aligned: an operand with fewer "..." dims broadcasts over the leading ones.
      for (int d = 0; d < ellipsis_dims[i]; ++d)
        labels.push_back(kEinsumLetterLabels + parsed.ellipsis_dims - ellipsis_dims[i] + d);
    }
    std::vector<int64_t> in_this_operand(parsed.sizes.size(), -1);
    for (size_t d = 0; d < labels.size(); ++d) {
      const int label = labels[d];
      const int64_t size = shapes[i][d];
      KILN_CHECK(size >= 0, invalid_model, "Einsum input ", i, " has a negative dim (shape ",
                 shape_to_string(shapes[i]), ")");
      ++uses[static_cast<size_t>(label)];
      // Within one operand a repeated label is a diagonal: its dims must be equal.
      int64_t& mine = in_this_operand[static_cast<size_t>(label)];
      KILN_CHECK(mine < 0 || mine == size, invalid_model, "Einsum equation '", written, "': operand ", i,
                 " repeats label '", parsed.label_name(label), "' over dims of different sizes (shape ",
                 shape_to_string(shapes[i]), ")");
      mine = size;
      int64_t& known = parsed.sizes[static_cast<size_t>(label)];
      KILN_CHECK(known < 0 || known == size || known == 1 || size == 1, invalid_model, "Einsum equation '",
                 written, "': label '", parsed.label_name(label), "' is ", known,
                 " in an earlier operand but ", size, " in operand ", i, " (shape ",
                 shape_to_string(shapes[i]), ")");
      if (known < 0 || known == 1) known = size;
    }
  }

  if (arrow == std::string::npos) {
    // Implicit output: the "..." dims, then every letter used once, in ASCII order.
    for (int d = 0; d < parsed.ellipsis_dims; ++d) parsed.output.push_back(kEinsumLetterLabels + d);
    for (int label = 0; label < kEinsumLetterLabels; ++label) {
      if (uses[static_cast<size_t>(label)] == 1) parsed.output.push_back(label);
    }
    return parsed;
  }
  const Term output = parse_term(std::string_view(equation).substr(arrow + 2), written, "the output");
  KILN_CHECK(output.has_ellipsis || parsed.ellipsis_dims == 0, invalid_model, "Einsum equation '", written,
             "': the operands' '...' stands for ", parsed.ellipsis_dims,
             " dim(s) but the output has no '...' to put them in");
  for (int letter : output.letters) {
    if (letter < 0) {
      for (int d = 0; d < parsed.ellipsis_dims; ++d) parsed.output.push_back(kEinsumLetterLabels + d);
      continue;
    }
    KILN_CHECK(uses[static_cast<size_t>(letter)] > 0, invalid_model, "Einsum equation '", written,
               "': output label '", parsed.label_name(letter), "' is in no operand");
    KILN_CHECK(std::count(parsed.output.begin(), parsed.output.end(), letter) == 0, invalid_model,
               "Einsum equation '", written, "': output label '", parsed.label_name(letter), "' is repeated");
    parsed.output.push_back(letter);
  }
  return parsed;
}

EinsumEquation einsum_equation(const OpSpec& spec) {
  KILN_CHECK(spec.num_inputs() >= 1, invalid_model, "Einsum expects at least 1 input, got 0");
  const std::string equation = spec.attrs().get_string("equation", "");
  KILN_CHECK(!equation.empty(), invalid_model, "Einsum requires the 'equation' attribute");
  std::vector<Shape> shapes;
  for (int i = 0; i < spec.num_inputs(); ++i) shapes.push_back(spec.input(i).shape);
  return parse_einsum(equation, shapes);
}

namespace {

std::vector<TensorInfo> infer_einsum(const OpSpec& spec) {
  const EinsumEquation equation = einsum_equation(spec);
  const DType dtype = spec.input(0).dtype;
  KILN_CHECK(dtype == DType::f32 || dtype == DType::f64 || dtype == DType::i32 || dtype == DType::i64,
             invalid_model, "Einsum input 0 must be float32, float64, int32 or int64, got ",
             dtype_name(dtype));
  for (int i = 1; i < spec.num_inputs(); ++i) expect_dtype(spec, i, dtype);
  Shape shape;
  for (int label : equation.output) shape.push_back(equation.sizes[static_cast<size_t>(label)]);
  return {TensorInfo{dtype, shape, {}}};
}

constexpr OpSchema kSchemas[] = {
    {"Einsum", infer_einsum, 12},
};

}  // namespace

std::span<const OpSchema> einsum_schemas() {
  return kSchemas;
}

}  // namespace kiln
