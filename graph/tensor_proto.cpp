// TensorProto -> Tensor. Sizes are checked against the data actually present before anything is
// allocated, so a file cannot make kiln allocate more than it holds.
#include <onnx/onnx_pb.h>  // defines ONNX_API, then includes onnx-ml.pb.h

#include <bit>
#include <cstring>
#include <fstream>
#include <limits>

#include "core/error.h"
#include "graph/onnx_import.h"
#include "ops/onnx_dtype.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

static_assert(std::endian::native == std::endian::little, "ONNX raw data is little-endian");

std::string tensor_label(const onnx::TensorProto& proto) {
  return proto.name().empty() ? std::string("tensor") : str_cat("tensor '", proto.name(), "'");
}

// Resolves an external-data location inside `model_dir`; rejects anything that escapes it.
fs::path resolve_external_path(const std::string& location, const fs::path& model_dir) {
  KILN_CHECK(!model_dir.empty(), invalid_model, "external data '", location,
             "' cannot be used when the model is not loaded from a file");
  KILN_CHECK(!location.empty(), invalid_model, "external data has an empty location");
  const fs::path relative(location);
  KILN_CHECK(relative.is_relative() && !relative.has_root_name(), invalid_model, "external data path '", location,
             "' must be relative to the model's folder");
  std::error_code error;
  const fs::path base = fs::canonical(model_dir, error);
  KILN_CHECK(!error, invalid_model, "cannot resolve the model folder '", model_dir.string(), "'");
  const fs::path target = fs::canonical(base / relative, error);
  KILN_CHECK(!error, invalid_model, "external data file '", location, "' not found next to the model (",
             error.message(), ")");
  // Component-wise prefix check: the resolved file (after symlinks) must stay inside the folder.
  auto base_it = base.begin();
  auto target_it = target.begin();
  for (; base_it != base.end(); ++base_it, ++target_it) {
    KILN_CHECK(target_it != target.end() && *base_it == *target_it, invalid_model, "external data path '", location,
               "' escapes the model's folder");
  }
  KILN_CHECK(fs::is_regular_file(target), invalid_model, "external data '", location, "' is not a regular file");
  return target;
}

void read_external_data(const onnx::TensorProto& proto, const fs::path& model_dir, void* dst, size_t bytes) {
  std::string location;
  int64_t offset = 0;
  int64_t length = -1;
  for (const onnx::StringStringEntryProto& entry : proto.external_data()) {
    const std::string& key = entry.key();
    if (key == "location") {
      location = entry.value();
    } else if (key == "offset" || key == "length") {
      int64_t value = -1;
      try {
        size_t used = 0;
        value = std::stoll(entry.value(), &used);
        if (used != entry.value().size()) value = -1;
      } catch (const std::exception&) {
        value = -1;
      }
      KILN_CHECK(value >= 0, invalid_model, "external data ", key, " '", entry.value(), "' is not a non-negative integer");
      (key == "offset" ? offset : length) = value;
    }
  }
  const fs::path path = resolve_external_path(location, model_dir);
  KILN_CHECK(length < 0 || static_cast<uint64_t>(length) == bytes, invalid_model, "external data '", location,
             "' has length ", length, ", expected ", bytes, " bytes");
  std::error_code error;
  const uintmax_t file_size = fs::file_size(path, error);
  KILN_CHECK(!error, invalid_model, "cannot read external data '", location, "'");
  KILN_CHECK(static_cast<uintmax_t>(offset) <= file_size && bytes <= file_size - static_cast<uintmax_t>(offset),
             invalid_model, "external data '", location, "' is ", file_size, " bytes, too short for ", bytes,
             " bytes at offset ", offset);
  std::ifstream file(path, std::ios::binary);
  file.seekg(offset);
  file.read(static_cast<char*>(dst), static_cast<std::streamsize>(bytes));
  KILN_CHECK(file.good() || bytes == 0, invalid_model, "failed reading external data '", location, "'");
}

// Copies `count` typed values into `dst`, converting from the proto's storage field type.
template <typename Dst, typename Field>
void copy_typed(const Field& field, void* dst) {
  Dst* out = static_cast<Dst*>(dst);
  for (int i = 0; i < field.size(); ++i) {
    if constexpr (std::is_same_v<Dst, Float16> || std::is_same_v<Dst, BFloat16>) {
      out[i] = Dst{static_cast<uint16_t>(field.Get(i))};  // ONNX stores the 16 bits in an int32
    } else {
      out[i] = static_cast<Dst>(field.Get(i));
    }
  }
}

}  // namespace

Tensor tensor_from_proto(const onnx::TensorProto& proto, const fs::path& model_dir) {
  return with_context(tensor_label(proto), [&]() -> Tensor {
    const DType dtype = dtype_from_onnx(proto.data_type());
    KILN_CHECK(dtype != DType::undefined, not_implemented, "element type ", onnx_dtype_name(proto.data_type()),
               " (", proto.data_type(), ") is not supported");
    KILN_CHECK(!proto.has_segment(), not_implemented, "segmented tensors are not supported");
    Shape shape(proto.dims().begin(), proto.dims().end());
    for (int64_t dim : shape) {
      KILN_CHECK(dim >= 0, invalid_model, "has negative dimension in shape ", shape_to_string(shape));
    }
    const int64_t numel = with_context("shape", [&] { return checked_numel(shape); });
    const size_t element_size = dtype_size(dtype);
    KILN_CHECK(static_cast<uint64_t>(numel) <= std::numeric_limits<int64_t>::max() / element_size, invalid_model,
               "shape ", shape_to_string(shape), " is too large");
    const size_t bytes = static_cast<size_t>(numel) * element_size;
    const std::string described = str_cat(shape_to_string(shape), " ", dtype_name(dtype));

    if (proto.data_location() == onnx::TensorProto_DataLocation_EXTERNAL) {
      Tensor tensor = Tensor::empty(dtype, shape);
      read_external_data(proto, model_dir, tensor.raw_data(), bytes);
      return tensor;
    }
    if (proto.has_raw_data()) {
      KILN_CHECK(proto.raw_data().size() == bytes, invalid_model, "has ", proto.raw_data().size(),
                 " bytes of data, expected ", bytes, " for shape ", described);
      Tensor tensor = Tensor::empty(dtype, shape);
      if (bytes > 0) std::memcpy(tensor.raw_data(), proto.raw_data().data(), bytes);
      return tensor;
    }
    // Typed storage: which repeated field holds the values depends on the element type.
    int64_t available = 0;
    switch (dtype) {
      case DType::f32: available = proto.float_data_size(); break;
      case DType::f64: available = proto.double_data_size(); break;
      case DType::i64: available = proto.int64_data_size(); break;
      case DType::u32:
      case DType::u64: available = proto.uint64_data_size(); break;
      default: available = proto.int32_data_size(); break;
    }
    KILN_CHECK(available == numel, invalid_model, "has ", available, " values, expected ", numel, " for shape ",
               described);
    Tensor tensor = Tensor::empty(dtype, shape);
    void* dst = tensor.raw_data();
    switch (dtype) {
      case DType::f32: copy_typed<float>(proto.float_data(), dst); break;
      case DType::f64: copy_typed<double>(proto.double_data(), dst); break;
      case DType::i64: copy_typed<int64_t>(proto.int64_data(), dst); break;
      case DType::u32: copy_typed<uint32_t>(proto.uint64_data(), dst); break;
      case DType::u64: copy_typed<uint64_t>(proto.uint64_data(), dst); break;
      case DType::i32: copy_typed<int32_t>(proto.int32_data(), dst); break;
      case DType::i16: copy_typed<int16_t>(proto.int32_data(), dst); break;
      case DType::i8: copy_typed<int8_t>(proto.int32_data(), dst); break;
      case DType::u16: copy_typed<uint16_t>(proto.int32_data(), dst); break;
      case DType::u8: copy_typed<uint8_t>(proto.int32_data(), dst); break;
      case DType::boolean: copy_typed<bool>(proto.int32_data(), dst); break;
      case DType::f16: copy_typed<Float16>(proto.int32_data(), dst); break;
      case DType::bf16: copy_typed<BFloat16>(proto.int32_data(), dst); break;
      case DType::undefined: break;
    }
    return tensor;
  });
}

Tensor load_tensor_file(const fs::path& path) {
  std::ifstream file(path, std::ios::binary);
  KILN_CHECK(file.good(), invalid_argument, "cannot open tensor file '", path.string(), "'");
  const std::string bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  onnx::TensorProto proto;
  KILN_CHECK(bytes.size() <= static_cast<size_t>(std::numeric_limits<int>::max()) &&
                 proto.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())),
             invalid_model, "'", path.string(), "' is not a valid serialized TensorProto");
  return with_context(str_cat("'", path.string(), "'"), [&] { return tensor_from_proto(proto, path.parent_path()); });
}

}  // namespace kiln
