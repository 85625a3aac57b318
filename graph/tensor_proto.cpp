// TensorProto -> Tensor. Sizes are checked against the data actually present (raw bytes, typed
// values, the external file's size) before anything is allocated, so a file cannot make kiln
// allocate more memory than the data it holds.
#include "graph/tensor_proto.h"

#include <onnx/onnx-data_pb.h>  // defines ONNX_API, then includes onnx-ml.pb.h and onnx-data.pb.h

#include <bit>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/mapped_file.h"
#include "graph/onnx_import.h"
#include "ops/onnx_dtype.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

static_assert(std::endian::native == std::endian::little,
              "ONNX raw_data and external data are little-endian");

// protobuf parses at most INT_MAX bytes from one buffer; bigger models keep weights in external data.
constexpr size_t kMaxProtoBytes = static_cast<size_t>(std::numeric_limits<int>::max());
// Files are read in chunks of this size, so a file that grows (or a device) cannot outrun the cap.
constexpr size_t kReadChunkBytes = size_t{1} << 20;

// Where a tensor's bytes live outside the model file (TensorProto.external_data).
struct ExternalData {
  std::string location;  // as written in the file, for messages
  fs::path path;         // resolved, confined to the model's folder
  uint64_t offset = 0;
  std::optional<uint64_t> length;
};

uint64_t parse_external_number(const std::string& key, const std::string& text) {
  uint64_t value = 0;
  const char* end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, value);
  KILN_CHECK(!text.empty() && error == std::errc() && stop == end &&
                 value <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()),
             invalid_model, "external data ", key, " '", text, "' is not a non-negative integer");
  return value;
}

// True when `target` is strictly below `folder`; both must be canonical (absolute, no "..", no links).
bool is_inside(const fs::path& folder, const fs::path& target) {
  auto target_it = target.begin();
  for (const fs::path& part : folder) {
    if (part.empty()) continue;  // a trailing separator yields an empty last component
    if (target_it == target.end() || *target_it != part) return false;
    ++target_it;
  }
  return target_it != target.end();
}

// Resolves an external-data location against `model_dir`. Absolute paths, ".." and symlinks that
// lead out of the folder are rejected: a model must not be able to read arbitrary files.
fs::path resolve_external_path(const std::string& location, const fs::path& model_dir) {
  KILN_CHECK(!model_dir.empty(), invalid_model, "uses external data file '", location,
             "', but the model was not loaded from a file, so there is no folder to read it from");
  KILN_CHECK(!location.empty(), invalid_model, "uses external data but gives no location");
  KILN_CHECK(location.find('\0') == std::string::npos, invalid_model, "external data location '", location,
             "' contains a NUL byte");
  const fs::path relative(location);
  KILN_CHECK(relative.is_relative() && !relative.has_root_name() && !relative.has_root_directory(),
             invalid_model, "external data path '", location,
             "' is absolute; it must be relative to the model's folder");
  std::error_code error;
  const fs::path folder = fs::canonical(model_dir, error);
  KILN_CHECK(!error, invalid_model, "cannot resolve the model's folder '", model_dir.string(), "' (",
             error.message(), ")");
  // weakly_canonical resolves the symlinks of the part that exists and normalizes ".." in the rest.
  const fs::path target = fs::weakly_canonical(folder / relative, error);
  KILN_CHECK(!error, invalid_model, "cannot resolve external data path '", location, "' (", error.message(),
             ")");
  KILN_CHECK(is_inside(folder, target), invalid_model, "external data path '", location,
             "' escapes the model's folder '", folder.string(), "' (it resolves to '", target.string(), "')");
  const fs::file_status status = fs::status(target, error);
  KILN_CHECK(fs::exists(status), invalid_model, "external data file '", location, "' does not exist in '",
             folder.string(), "'");
  KILN_CHECK(fs::is_regular_file(status), invalid_model, "external data path '", location,
             "' is not a regular file");
  return target;
}

// Validates the external_data entries and that the file holds `bytes` bytes at the offset.
ExternalData locate_external_data(const onnx::TensorProto& proto, const fs::path& model_dir, uint64_t bytes,
                                  const std::string& described) {
  ExternalData data;
  for (const onnx::StringStringEntryProto& entry : proto.external_data()) {
    if (entry.key() == "location") {
      data.location = entry.value();
    } else if (entry.key() == "offset") {
      data.offset = parse_external_number(entry.key(), entry.value());
    } else if (entry.key() == "length") {
      data.length = parse_external_number(entry.key(), entry.value());
    }  // "checksum" and unknown keys do not affect reading
  }
  data.path = resolve_external_path(data.location, model_dir);
  KILN_CHECK(!data.length || *data.length == bytes, invalid_model, "external data '", data.location,
             "' has length ", *data.length, ", expected ", bytes, " bytes for shape ", described);
  std::error_code error;
  const uintmax_t file_size = fs::file_size(data.path, error);
  KILN_CHECK(!error, invalid_model, "cannot get the size of external data file '", data.location, "' (",
             error.message(), ")");
  KILN_CHECK(data.offset <= file_size && bytes <= file_size - data.offset, invalid_model,
             "external data file '", data.location, "' has ", file_size, " bytes, too few for ", bytes,
             " bytes at offset ", data.offset, " (shape ", described, ")");
  return data;
}

void read_external_data(const ExternalData& data, void* dst, uint64_t bytes) {
  if (bytes == 0) return;
  std::ifstream file(data.path, std::ios::binary);
  KILN_CHECK(file.is_open(), invalid_model, "cannot open external data file '", data.location,
             "': ", std::strerror(errno));
  file.seekg(static_cast<std::streamoff>(data.offset));
  file.read(static_cast<char*>(dst), static_cast<std::streamsize>(bytes));
  KILN_CHECK(file && static_cast<uint64_t>(file.gcount()) == bytes, invalid_model, "failed reading ", bytes,
             " bytes at offset ", data.offset, " of external data file '", data.location, "'");
}

// kiln's bool holds exactly 0 or 1; raw bytes from a file may hold anything.
void normalize_bools(Tensor& tensor) {
  uint8_t* values = tensor.data<uint8_t>();
  for (int64_t i = 0; i < tensor.numel(); ++i) values[i] = values[i] != 0 ? 1 : 0;
}

// Copies a typed repeated field into `dst`, checking that each value fits the element type
// (int8 data travels in int32_data, for example).
template <typename Dst, typename Field>
void copy_typed(const Field& field, const char* field_name, DType dtype, Dst* dst) {
  for (int i = 0; i < field.size(); ++i) {
    const auto value = field.Get(i);
    if constexpr (std::is_same_v<Dst, Float16> || std::is_same_v<Dst, BFloat16>) {
      // ONNX stores the 16 bits in an int32; accept them zero- or sign-extended.
      KILN_CHECK(
          value >= std::numeric_limits<int16_t>::min() && value <= std::numeric_limits<uint16_t>::max(),
          invalid_model, field_name, "[", i, "] = ", value, " is not a 16-bit ", dtype_name(dtype),
          " pattern");
      dst[i] = Dst{static_cast<uint16_t>(value)};
    } else if constexpr (std::is_same_v<Dst, bool>) {
      dst[i] = value != 0;
    } else if constexpr (std::is_integral_v<Dst>) {
      KILN_CHECK(std::in_range<Dst>(value), invalid_model, field_name, "[", i, "] = ", value,
                 " does not fit ", dtype_name(dtype));
      dst[i] = static_cast<Dst>(value);
    } else {
      dst[i] = static_cast<Dst>(value);
    }
  }
}

// The repeated field that holds values of `dtype` when raw_data is absent, per onnx.proto.
struct TypedField {
  const char* name;
  int64_t size;
};

TypedField typed_field(const onnx::TensorProto& proto, DType dtype) {
  switch (dtype) {
    case DType::f32:
      return {"float_data", proto.float_data_size()};
    case DType::f64:
      return {"double_data", proto.double_data_size()};
    case DType::i64:
      return {"int64_data", proto.int64_data_size()};
    case DType::u32:
    case DType::u64:
      return {"uint64_data", proto.uint64_data_size()};
    default:
      return {"int32_data", proto.int32_data_size()};  // int32 and narrower, bool, float16, bfloat16
  }
}

void copy_typed_data(const onnx::TensorProto& proto, Tensor& tensor) {
  const DType dtype = tensor.dtype();
  const char* field = typed_field(proto, dtype).name;
  switch (dtype) {
    case DType::f32:
      copy_typed(proto.float_data(), field, dtype, tensor.data<float>());
      break;
    case DType::f64:
      copy_typed(proto.double_data(), field, dtype, tensor.data<double>());
      break;
    case DType::i64:
      copy_typed(proto.int64_data(), field, dtype, tensor.data<int64_t>());
      break;
    case DType::u32:
      copy_typed(proto.uint64_data(), field, dtype, tensor.data<uint32_t>());
      break;
    case DType::u64:
      copy_typed(proto.uint64_data(), field, dtype, tensor.data<uint64_t>());
      break;
    case DType::i32:
      copy_typed(proto.int32_data(), field, dtype, tensor.data<int32_t>());
      break;
    case DType::i16:
      copy_typed(proto.int32_data(), field, dtype, tensor.data<int16_t>());
      break;
    case DType::i8:
      copy_typed(proto.int32_data(), field, dtype, tensor.data<int8_t>());
      break;
    case DType::u16:
      copy_typed(proto.int32_data(), field, dtype, tensor.data<uint16_t>());
      break;
    case DType::u8:
      copy_typed(proto.int32_data(), field, dtype, tensor.data<uint8_t>());
      break;
    case DType::boolean:
      copy_typed(proto.int32_data(), field, dtype, tensor.data<bool>());
      break;
    case DType::f16:
      copy_typed(proto.int32_data(), field, dtype, tensor.data<Float16>());
      break;
    case DType::bf16:
      copy_typed(proto.int32_data(), field, dtype, tensor.data<BFloat16>());
      break;
    case DType::undefined:
      KILN_ASSERT(false);
  }
}

// A tensor over `data` (its size checked by the caller): a view when `owner` keeps the bytes alive and
// they sit at an offset the element type allows, else a copy. A copy's source pages in a mapped
// file are released, since nothing reads them again.
Tensor tensor_over(std::span<const uint8_t> data, const std::shared_ptr<const void>& owner, DType dtype,
                   const Shape& shape) {
  const bool aligned = reinterpret_cast<uintptr_t>(data.data()) % dtype_size(dtype) == 0;
  // bools are normalized to 0 or 1, so they are always copied.
  if (owner != nullptr && aligned && dtype != DType::boolean && !data.empty())
    return Tensor::view(owner, data.data(), dtype, shape);
  Tensor tensor = Tensor::empty(dtype, shape);
  if (!data.empty()) std::memcpy(tensor.raw_data(), data.data(), data.size());
  if (owner != nullptr) release_mapped_pages(data.data(), data.size());
  if (dtype == DType::boolean) normalize_bools(tensor);
  return tensor;
}

Tensor convert_tensor(const onnx::TensorProto& proto, const fs::path& model_dir, TensorDataSource source) {
  const DType dtype = checked_dtype_from_onnx(proto.data_type());
  KILN_CHECK(!proto.has_segment(), not_implemented,
             "is a segment of a larger tensor; segments are not supported");
  const Shape shape(proto.dims().begin(), proto.dims().end());
  for (int64_t dim : shape) {
    KILN_CHECK(dim >= 0, invalid_model, "has negative dimension ", dim, " in shape ", shape_to_string(shape));
  }
  // The element count and byte size must fit int64 before anything is compared or allocated.
  int64_t numel = 1;
  for (int64_t dim : shape) {
    if (dim == 0) {
      numel = 0;
      break;
    }
  }
  const int64_t max_numel = std::numeric_limits<int64_t>::max() / static_cast<int64_t>(dtype_size(dtype));
  for (int64_t dim : shape) {
    if (numel == 0) break;
    KILN_CHECK(numel <= max_numel / dim, invalid_model, "shape ", shape_to_string(shape),
               " has too many elements");
    numel *= dim;
  }
  const uint64_t bytes = static_cast<uint64_t>(numel) * dtype_size(dtype);
  const std::string described = str_cat(shape_to_string(shape), " ", dtype_name(dtype));

  if (proto.data_location() == onnx::TensorProto_DataLocation_EXTERNAL) {
    const ExternalData data = locate_external_data(proto, model_dir, bytes, described);
    if (source.map_files && bytes > 0) {
      const std::shared_ptr<const MappedFile> file = MappedFile::open(data.path, "external data file");
      // The size was checked against the file's; a file that changed since is caught here.
      KILN_CHECK(data.offset <= file->bytes().size() && bytes <= file->bytes().size() - data.offset,
                 invalid_model, "external data file '", data.location, "' changed while it was read");
      return tensor_over(file->bytes().subspan(data.offset, bytes), file, dtype, shape);
    }
    Tensor tensor = Tensor::empty(dtype, shape);
    read_external_data(data, tensor.raw_data(), bytes);
    if (dtype == DType::boolean) normalize_bools(tensor);
    return tensor;
  }
  if (source.raw != nullptr || proto.has_raw_data()) {
    const std::span<const uint8_t> raw =
        source.raw != nullptr
            ? source.raw->bytes
            : std::span(reinterpret_cast<const uint8_t*>(proto.raw_data().data()), proto.raw_data().size());
    KILN_CHECK(raw.size() == bytes, invalid_model, "has ", raw.size(), " bytes of data, expected ", bytes,
               " for shape ", described);
    return tensor_over(raw, source.raw != nullptr ? source.raw->owner : nullptr, dtype, shape);
  }
  const TypedField field = typed_field(proto, dtype);
  KILN_CHECK(field.size == numel, invalid_model, "has ", field.size, " values in ", field.name, ", expected ",
             numel, " for shape ", described);
  Tensor tensor = Tensor::empty(dtype, shape);
  copy_typed_data(proto, tensor);
  return tensor;
}

}  // namespace

DType checked_dtype_from_onnx(int64_t code) {
  KILN_CHECK(code != onnx::TensorProto_DataType_UNDEFINED, invalid_model,
             "has no element type (UNDEFINED, 0)");
  const DType dtype = dtype_from_onnx(code);
  KILN_CHECK(dtype != DType::undefined, not_implemented, "has element type ", onnx_dtype_name(code), " (",
             code, "), which kiln does not support");
  return dtype;
}

std::string read_file_bytes(const fs::path& path, std::string_view what) {
  std::error_code error;
  KILN_CHECK(!fs::is_directory(path, error), invalid_argument, "cannot open ", what, " '", path.string(),
             "': it is a folder");
  std::ifstream file(path, std::ios::binary);
  if (!file.is_open()) {
    const int open_error = errno;
    fail(ErrorKind::invalid_argument, "cannot open ", what, " '", path.string(),
         "': ", open_error != 0 ? std::strerror(open_error) : "unknown error");
  }
  std::string bytes;
  const uintmax_t size = fs::file_size(path, error);
  if (!error && size <= kMaxProtoBytes) bytes.reserve(static_cast<size_t>(size));
  std::vector<char> chunk(kReadChunkBytes);
  while (file) {
    file.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    bytes.append(chunk.data(), static_cast<size_t>(file.gcount()));
    KILN_CHECK(
        bytes.size() <= kMaxProtoBytes, not_implemented, what, " '", path.string(),
        "' is larger than 2 GiB, more than protobuf can parse (large weights belong in external data files)");
  }
  KILN_CHECK(!file.bad(), runtime, "failed reading ", what, " '", path.string(), "'");
  return bytes;
}

Tensor tensor_from_proto_labeled(const onnx::TensorProto& proto, const fs::path& model_dir,
                                 const std::string& label, TensorDataSource source) {
  if (label.empty()) return convert_tensor(proto, model_dir, source);
  return with_context(label, [&] { return convert_tensor(proto, model_dir, source); });
}

Tensor tensor_from_proto(const onnx::TensorProto& proto, const fs::path& model_dir) {
  return tensor_from_proto_labeled(
      proto, model_dir,
      proto.name().empty() ? std::string("tensor") : str_cat("tensor '", proto.name(), "'"));
}

Tensor load_tensor_file(const fs::path& path) {
  const std::string bytes = read_file_bytes(path, "tensor file");
  onnx::TensorProto proto;
  KILN_CHECK(proto.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())), invalid_model, "'",
             path.string(), "' is not a valid serialized ONNX TensorProto (protobuf parse failed)");
  const fs::path folder = path.has_parent_path() ? path.parent_path() : fs::path(".");
  return tensor_from_proto_labeled(proto, folder, str_cat("tensor file '", path.string(), "'"));
}

namespace {

Tensor sequence_from_proto(const onnx::SequenceProto& proto, DType dtype, const fs::path& folder) {
  KILN_CHECK(
      proto.elem_type() == onnx::SequenceProto_DataType_TENSOR ||
          (proto.elem_type() == onnx::SequenceProto_DataType_UNDEFINED && proto.tensor_values_size() == 0),
      not_implemented, "holds a sequence of element type ", proto.elem_type(),
      "; kiln reads sequences of tensors");
  std::vector<Tensor> elements;
  for (int i = 0; i < proto.tensor_values_size(); ++i)
    elements.push_back(tensor_from_proto_labeled(proto.tensor_values(i), folder, str_cat("element ", i)));
  return Tensor::sequence(dtype, std::move(elements));
}

}  // namespace

Tensor load_value_file(const fs::path& path, ValueKind kind, DType dtype) {
  if (kind == ValueKind::tensor) return load_tensor_file(path);
  const std::string bytes = read_file_bytes(path, "value file");
  const fs::path folder = path.has_parent_path() ? path.parent_path() : fs::path(".");
  return with_context(str_cat("value file '", path.string(), "'"), [&]() -> Tensor {
    if (kind == ValueKind::sequence) {
      onnx::SequenceProto proto;
      KILN_CHECK(proto.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())), invalid_model,
                 "is not a valid serialized ONNX SequenceProto (protobuf parse failed)");
      return sequence_from_proto(proto, dtype, folder);
    }
    onnx::OptionalProto proto;
    KILN_CHECK(proto.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())), invalid_model,
               "is not a valid serialized ONNX OptionalProto (protobuf parse failed)");
    switch (proto.elem_type()) {
      case onnx::OptionalProto_DataType_UNDEFINED:
        return Tensor{};
      case onnx::OptionalProto_DataType_TENSOR:
        return proto.has_tensor_value()
                   ? tensor_from_proto_labeled(proto.tensor_value(), folder, "its tensor")
                   : Tensor{};
      case onnx::OptionalProto_DataType_SEQUENCE:
        return proto.has_sequence_value() ? sequence_from_proto(proto.sequence_value(), dtype, folder)
                                          : Tensor{};
      default:
        fail(ErrorKind::not_implemented, "holds an optional of element type ", proto.elem_type(),
             "; kiln reads optional tensors and sequences");
    }
  });
}

}  // namespace kiln
