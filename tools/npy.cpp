#include "tools/npy.h"

#include <array>
#include <cstring>
#include <fstream>
#include <string>

#include "core/error.h"

namespace kiln {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicSize = 6;
constexpr size_t kMaxHeaderSize = 1 << 20;  // real headers are < 1 KB; refuse anything absurd

struct NpyType {
  const char* descr;
  DType dtype;
};

constexpr std::array kTypes = {
    NpyType{"<f4", DType::f32}, NpyType{"<f8", DType::f64},     NpyType{"<f2", DType::f16},
    NpyType{"<i8", DType::i64}, NpyType{"<i4", DType::i32},     NpyType{"<i2", DType::i16},
    NpyType{"|i1", DType::i8},  NpyType{"<u8", DType::u64},     NpyType{"<u4", DType::u32},
    NpyType{"<u2", DType::u16}, NpyType{"|u1", DType::u8},      NpyType{"|b1", DType::boolean},
};

// The quoted value after `'key':` in a header dict like {'descr': '<f4', 'fortran_order': False, ...}.
std::string header_field(const std::string& header, const std::string& key, const std::filesystem::path& path) {
  const size_t at = header.find("'" + key + "'");
  KILN_CHECK(at != std::string::npos, invalid_argument, "'", path.string(), "' is not a valid .npy file (header has no ",
             key, ")");
  size_t start = header.find(':', at);
  KILN_CHECK(start != std::string::npos, invalid_argument, "'", path.string(), "': malformed .npy header");
  ++start;
  while (start < header.size() && header[start] == ' ') ++start;
  size_t end = start;
  if (start < header.size() && header[start] == '(') {
    end = header.find(')', start);
    KILN_CHECK(end != std::string::npos, invalid_argument, "'", path.string(), "': malformed .npy shape");
    return header.substr(start + 1, end - start - 1);
  }
  if (start < header.size() && header[start] == '\'') {
    end = header.find('\'', start + 1);
    KILN_CHECK(end != std::string::npos, invalid_argument, "'", path.string(), "': malformed .npy header");
    return header.substr(start + 1, end - start - 1);
  }
  end = header.find_first_of(",}", start);
  return header.substr(start, end == std::string::npos ? std::string::npos : end - start);
}

Shape parse_shape(const std::string& text, const std::filesystem::path& path) {
  Shape shape;
  size_t pos = 0;
  while (pos < text.size()) {
    while (pos < text.size() && (text[pos] == ' ' || text[pos] == ',')) ++pos;
    if (pos >= text.size()) break;
    size_t used = 0;
    int64_t dim = -1;
    try {
      dim = std::stoll(text.substr(pos), &used);
    } catch (const std::exception&) {
      used = 0;
    }
    KILN_CHECK(used > 0 && dim >= 0, invalid_argument, "'", path.string(), "': bad .npy shape (", text, ")");
    shape.push_back(dim);
    pos += used;
  }
  return shape;
}

}  // namespace

Tensor read_npy(const std::filesystem::path& path) {
  std::ifstream file(path, std::ios::binary);
  KILN_CHECK(file.good(), invalid_argument, "cannot open '", path.string(), "': ", std::strerror(errno));
  char magic[kMagicSize + 2] = {};
  file.read(magic, sizeof(magic));
  KILN_CHECK(file.good() && std::memcmp(magic, kMagic, kMagicSize) == 0, invalid_argument, "'", path.string(),
             "' is not a .npy file");
  const int major = static_cast<unsigned char>(magic[kMagicSize]);
  KILN_CHECK(major >= 1 && major <= 3, invalid_argument, "'", path.string(), "': unsupported .npy version ", major);
  size_t header_size = 0;
  if (major == 1) {
    unsigned char bytes[2] = {};
    file.read(reinterpret_cast<char*>(bytes), 2);
    header_size = bytes[0] | (bytes[1] << 8);
  } else {
    unsigned char bytes[4] = {};
    file.read(reinterpret_cast<char*>(bytes), 4);
    header_size = bytes[0] | (bytes[1] << 8) | (bytes[2] << 16) | (static_cast<size_t>(bytes[3]) << 24);
  }
  KILN_CHECK(file.good() && header_size <= kMaxHeaderSize, invalid_argument, "'", path.string(),
             "': truncated or oversized .npy header");
  std::string header(header_size, '\0');
  file.read(header.data(), static_cast<std::streamsize>(header_size));
  KILN_CHECK(file.good(), invalid_argument, "'", path.string(), "': truncated .npy header");

  const std::string descr = header_field(header, "descr", path);
  const std::string fortran = header_field(header, "fortran_order", path);
  KILN_CHECK(fortran.find("False") != std::string::npos, not_implemented, "'", path.string(),
             "' is Fortran-ordered; save it with numpy.ascontiguousarray");
  DType dtype = DType::undefined;
  for (const NpyType& type : kTypes) {
    if (descr == type.descr || (descr.size() == 3 && descr[0] == '=' && descr.substr(1) == std::string(type.descr).substr(1))) {
      dtype = type.dtype;
    }
  }
  KILN_CHECK(dtype != DType::undefined, not_implemented, "'", path.string(), "' has numpy dtype '", descr,
             "', which kiln does not read");
  Tensor tensor = Tensor::empty(dtype, parse_shape(header_field(header, "shape", path), path));
  file.read(static_cast<char*>(tensor.raw_data()), static_cast<std::streamsize>(tensor.nbytes()));
  KILN_CHECK(static_cast<size_t>(file.gcount()) == tensor.nbytes(), invalid_argument, "'", path.string(),
             "' holds less data than its shape ", shape_to_string(tensor.shape()), " needs");
  return tensor;
}

void write_npy(const std::filesystem::path& path, const Tensor& tensor) {
  const char* descr = nullptr;
  for (const NpyType& type : kTypes) {
    if (type.dtype == tensor.dtype()) descr = type.descr;
  }
  KILN_CHECK(descr != nullptr, not_implemented, "cannot write ", dtype_name(tensor.dtype()), " tensors to .npy");
  std::string shape;
  for (int64_t dim : tensor.shape()) shape += std::to_string(dim) + ", ";
  if (tensor.rank() > 1) shape.resize(shape.size() - 2);
  if (tensor.rank() == 1) shape.resize(shape.size() - 1);
  std::string header = str_cat("{'descr': '", descr, "', 'fortran_order': False, 'shape': (", shape, "), }");
  // Pad with spaces so that magic + version + length + header + newline is a multiple of 64.
  const size_t prefix = kMagicSize + 2 + 2;
  header.append((64 - (prefix + header.size() + 1) % 64) % 64, ' ');
  header += '\n';
  std::ofstream file(path, std::ios::binary);
  KILN_CHECK(file.good(), invalid_argument, "cannot write '", path.string(), "': ", std::strerror(errno));
  file.write(kMagic, kMagicSize);
  const char version[2] = {1, 0};
  file.write(version, 2);
  const unsigned char length[2] = {static_cast<unsigned char>(header.size() & 0xff),
                                   static_cast<unsigned char>(header.size() >> 8)};
  file.write(reinterpret_cast<const char*>(length), 2);
  file.write(header.data(), static_cast<std::streamsize>(header.size()));
  file.write(static_cast<const char*>(tensor.raw_data()), static_cast<std::streamsize>(tensor.nbytes()));
  KILN_CHECK(file.good(), runtime, "failed writing '", path.string(), "'");
}

}  // namespace kiln
