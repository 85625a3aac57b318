// kiln's C++ API: a header-only layer over the C API (kiln/kiln_c.h), so C++ programs get RAII
// handles and exceptions while the library's ABI stays the C one. Errors throw kiln::Error, which
// carries the C API's status code. Needs C++17.
//
//   kiln::Session session("model.onnx", kiln::Settings().set("precision", "bf16"));
//   std::vector<float> pixels(1 * 3 * 224 * 224);
//   kiln::Tensor input = kiln::Tensor::wrap(pixels.data(), {1, 3, 224, 224});  // no copy
//   std::vector<kiln::Tensor> outputs = session.run({{"input", input}});
//   const float* logits = outputs[0].data<float>();
#ifndef KILN_KILN_HPP
#define KILN_KILN_HPP

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "kiln/kiln_c.h"

namespace kiln {

class Error : public std::runtime_error {
 public:
  Error(kiln_status_code code, const std::string& message) : std::runtime_error(message), code_(code) {}
  kiln_status_code code() const noexcept { return code_; }

 private:
  kiln_status_code code_;
};

namespace detail {

// Throws the status as a kiln::Error (freeing it); nothing for NULL.
inline void check(kiln_status* status) {
  if (status == nullptr) return;
  const kiln_status_code code = kiln_status_get_code(status);
  std::string message = kiln_status_get_message(status);
  kiln_status_free(status);
  throw Error(code, message);
}

inline std::string take_string(char* text) {
  std::string copy = text != nullptr ? text : "";
  kiln_string_free(text);
  return copy;
}

struct Free {
  void operator()(kiln_tensor* p) const { kiln_tensor_free(p); }
  void operator()(kiln_settings* p) const { kiln_settings_free(p); }
  void operator()(kiln_session* p) const { kiln_session_free(p); }
  void operator()(kiln_run_options* p) const { kiln_run_options_free(p); }
};

}  // namespace detail

// The library's version, "MAJOR.MINOR.PATCH".
inline std::string version() { return kiln_version(); }
inline std::string build_info() { return kiln_build_info(); }

// The kiln_dtype of a C++ element type: dtype_of<float>() == KILN_DTYPE_FLOAT32.
template <typename T>
constexpr kiln_dtype dtype_of() {
  if constexpr (std::is_same_v<T, float>) return KILN_DTYPE_FLOAT32;
  else if constexpr (std::is_same_v<T, double>) return KILN_DTYPE_FLOAT64;
  else if constexpr (std::is_same_v<T, int64_t>) return KILN_DTYPE_INT64;
  else if constexpr (std::is_same_v<T, int32_t>) return KILN_DTYPE_INT32;
  else if constexpr (std::is_same_v<T, int16_t>) return KILN_DTYPE_INT16;
  else if constexpr (std::is_same_v<T, int8_t>) return KILN_DTYPE_INT8;
  else if constexpr (std::is_same_v<T, uint64_t>) return KILN_DTYPE_UINT64;
  else if constexpr (std::is_same_v<T, uint32_t>) return KILN_DTYPE_UINT32;
  else if constexpr (std::is_same_v<T, uint16_t>) return KILN_DTYPE_UINT16;
  else if constexpr (std::is_same_v<T, uint8_t>) return KILN_DTYPE_UINT8;
  else if constexpr (std::is_same_v<T, bool>) return KILN_DTYPE_BOOL;
  else static_assert(sizeof(T) == 0, "no kiln_dtype for this type (16-bit floats: use raw_data())");
}

// A dense row-major tensor, owning its handle (move-only).
class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(kiln_tensor* handle) : handle_(handle) {}

  static Tensor zeros(kiln_dtype dtype, const std::vector<int64_t>& shape) {
    kiln_tensor* handle = nullptr;
    detail::check(kiln_tensor_create(dtype, shape.data(), shape.size(), &handle));
    return Tensor(handle);
  }
  // Over the caller's memory, not copied: it must outlive the tensor and every run reading it.
  template <typename T>
  static Tensor wrap(T* data, const std::vector<int64_t>& shape) {
    return wrap(dtype_of<T>(), data, shape);
  }
  static Tensor wrap(kiln_dtype dtype, void* data, const std::vector<int64_t>& shape) {
    int64_t count = 1;
    for (int64_t dim : shape) count *= dim;
    kiln_tensor* handle = nullptr;
    detail::check(kiln_tensor_wrap(dtype, shape.data(), shape.size(), data,
                                   static_cast<size_t>(count < 0 ? 0 : count) * kiln_dtype_size(dtype), &handle));
    return Tensor(handle);
  }

  explicit operator bool() const { return handle_ != nullptr; }
  kiln_dtype dtype() const { return kiln_tensor_dtype(handle_.get()); }
  std::vector<int64_t> shape() const {
    const int64_t* dims = kiln_tensor_shape(handle_.get());
    return std::vector<int64_t>(dims, dims + kiln_tensor_rank(handle_.get()));
  }
  int64_t element_count() const { return kiln_tensor_element_count(handle_.get()); }
  size_t byte_size() const { return kiln_tensor_byte_size(handle_.get()); }
  void* raw_data() const { return kiln_tensor_data(handle_.get()); }
  // The elements as T; throws (KILN_TYPE_MISMATCH) when T is not the tensor's dtype.
  template <typename T>
  T* data() const {
    if (dtype_of<T>() != dtype())
      throw Error(KILN_TYPE_MISMATCH, std::string("the tensor holds ") + kiln_dtype_name(dtype()) + ", not " +
                                          kiln_dtype_name(dtype_of<T>()));
    return static_cast<T*>(raw_data());
  }

  kiln_tensor* get() const { return handle_.get(); }
  kiln_tensor* release() { return handle_.release(); }

 private:
  std::unique_ptr<kiln_tensor, detail::Free> handle_;
};

// A session's setting changes by name, values as text ("threads" = "4", "precision" = "bf16").
class Settings {
 public:
  Settings() {
    kiln_settings* handle = nullptr;
    detail::check(kiln_settings_create(&handle));
    handle_.reset(handle);
  }
  Settings& set(const std::string& name, const std::string& value) {
    detail::check(kiln_settings_set(handle_.get(), name.c_str(), value.c_str()));
    return *this;
  }
  const kiln_settings* get() const { return handle_.get(); }

 private:
  std::unique_ptr<kiln_settings, detail::Free> handle_;
};

// The process's settings: the backend controls every later run uses unless its session changes them.
inline void set_global_setting(const std::string& name, const std::string& value) {
  detail::check(kiln_global_setting_set(name.c_str(), value.c_str()));
}
inline std::string global_setting(const std::string& name) {
  char* value = nullptr;
  detail::check(kiln_global_setting_get(name.c_str(), &value));
  return detail::take_string(value);
}

struct BackendInfo {
  std::string name;
  bool built = false;
  bool available = false;
  std::string version;
};
inline BackendInfo backend_info(const std::string& name) {
  int built = 0;
  int available = 0;
  char* version = nullptr;
  detail::check(kiln_backend_info(name.c_str(), &built, &available, &version));
  return BackendInfo{name, built != 0, available != 0, detail::take_string(version)};
}

// A deadline and a cancel switch for runs; cancel() is safe from any thread.
class RunOptions {
 public:
  RunOptions() {
    kiln_run_options* handle = nullptr;
    detail::check(kiln_run_options_create(&handle));
    handle_.reset(handle);
  }
  template <typename Rep, typename Period>
  RunOptions& set_timeout(std::chrono::duration<Rep, Period> timeout) {
    detail::check(kiln_run_options_set_timeout_ms(
        handle_.get(), std::chrono::duration<double, std::milli>(timeout).count()));
    return *this;
  }
  void cancel() const { kiln_run_options_cancel(handle_.get()); }
  const kiln_run_options* get() const { return handle_.get(); }

 private:
  std::unique_ptr<kiln_run_options, detail::Free> handle_;
};

// A graph input or output: dtype KILN_DTYPE_UNDEFINED and rank -1 where the model does not say;
// -1 for a symbolic dim.
struct ValueInfo {
  std::string name;
  kiln_dtype dtype = KILN_DTYPE_UNDEFINED;
  int64_t rank = -1;
  std::vector<int64_t> dims;
};

// Inputs by name; the tensors are read in place.
using Inputs = std::vector<std::pair<std::string, std::reference_wrapper<const Tensor>>>;

class Session {
 public:
  explicit Session(const std::string& model_path, const Settings& settings = Settings()) {
    kiln_session* handle = nullptr;
    detail::check(kiln_session_create(model_path.c_str(), settings.get(), &handle));
    handle_.reset(handle);
  }
  static Session from_bytes(const void* model, size_t byte_size, const Settings& settings = Settings()) {
    kiln_session* handle = nullptr;
    detail::check(kiln_session_create_from_bytes(model, byte_size, settings.get(), &handle));
    return Session(handle);
  }

  std::vector<ValueInfo> inputs() const { return describe(kiln_session_input_count(handle_.get()), true); }
  std::vector<ValueInfo> outputs() const { return describe(kiln_session_output_count(handle_.get()), false); }

  // One tensor per model output, in order; kiln hands over what it computed (no copy).
  std::vector<Tensor> run(const Inputs& inputs, const RunOptions* options = nullptr) {
    std::vector<Tensor> outputs(kiln_session_output_count(handle_.get()));
    run_into(inputs, outputs, options);
    return outputs;
  }
  // Into `outputs` (one per model output): empty ones are filled with kiln's tensors, the caller's
  // are written (their dtype and shape must match).
  void run_into(const Inputs& inputs, std::vector<Tensor>& outputs, const RunOptions* options = nullptr) {
    std::vector<const char*> names;
    std::vector<kiln_tensor*> tensors;
    for (const auto& [name, tensor] : inputs) {
      names.push_back(name.c_str());
      tensors.push_back(tensor.get().get());
    }
    std::vector<kiln_tensor*> handles;
    for (const Tensor& output : outputs) handles.push_back(output.get());
    detail::check(kiln_session_run(handle_.get(), options ? options->get() : nullptr, names.data(), tensors.data(),
                                   tensors.size(), handles.data(), handles.size()));
    for (size_t i = 0; i < outputs.size(); ++i) {
      if (!outputs[i]) outputs[i] = Tensor(handles[i]);
    }
  }
  // A run on kiln's inter-op pool; the future holds the outputs or the kiln::Error. The input
  // tensors' memory must stay valid until the future is ready.
  std::future<std::vector<Tensor>> run_async(const Inputs& inputs, const RunOptions* options = nullptr) {
    std::vector<const char*> names;
    std::vector<kiln_tensor*> tensors;
    for (const auto& [name, tensor] : inputs) {
      names.push_back(name.c_str());
      tensors.push_back(tensor.get().get());
    }
    auto promise = std::make_unique<std::promise<std::vector<Tensor>>>();
    std::future<std::vector<Tensor>> future = promise->get_future();
    detail::check(kiln_session_run_async(handle_.get(), options ? options->get() : nullptr, names.data(),
                                         tensors.data(), tensors.size(), &deliver, promise.get()));
    promise.release();  // the callback owns it now
    return future;
  }

  kiln_session* get() const { return handle_.get(); }

 private:
  explicit Session(kiln_session* handle) : handle_(handle) {}

  static void deliver(void* user_data, kiln_status* status, kiln_tensor** outputs, size_t count) {
    std::unique_ptr<std::promise<std::vector<Tensor>>> promise(static_cast<std::promise<std::vector<Tensor>>*>(user_data));
    try {
      std::vector<Tensor> tensors;
      for (size_t i = 0; i < count; ++i) tensors.emplace_back(outputs[i]);
      detail::check(status);
      promise->set_value(std::move(tensors));
    } catch (...) {
      promise->set_exception(std::current_exception());
    }
  }

  std::vector<ValueInfo> describe(size_t count, bool inputs) const {
    std::vector<ValueInfo> infos;
    for (size_t i = 0; i < count; ++i) {
      const char* name = nullptr;
      ValueInfo info;
      const int64_t* dims = nullptr;
      detail::check(inputs ? kiln_session_input_info(handle_.get(), i, &name, &info.dtype, &info.rank, &dims)
                           : kiln_session_output_info(handle_.get(), i, &name, &info.dtype, &info.rank, &dims));
      info.name = name;
      if (info.rank > 0) info.dims.assign(dims, dims + info.rank);
      infos.push_back(std::move(info));
    }
    return infos;
  }

  std::unique_ptr<kiln_session, detail::Free> handle_;
};

// The profiler: records every run in the process from start() until stop() writes a Chrome trace.
namespace profiler {
inline void start() { detail::check(kiln_profiler_start()); }
inline void stop(const std::string& trace_path) { detail::check(kiln_profiler_stop(trace_path.c_str())); }
inline void discard() { detail::check(kiln_profiler_stop(nullptr)); }
// The table `kiln profile --load TRACE` prints, grouped by "op", "kernel", "backend", "node" or "shape".
inline std::string summary(const std::string& trace_path, const std::string& group_by = "op") {
  char* table = nullptr;
  detail::check(kiln_trace_summary(trace_path.c_str(), group_by.c_str(), &table));
  return detail::take_string(table);
}
}  // namespace profiler

// kiln tidy's report on a kiln or PyTorch trace file: text, or JSON.
inline std::string tidy_report(const std::string& trace_path, bool json = false) {
  char* report = nullptr;
  detail::check(kiln_tidy_report(trace_path.c_str(), json ? 1 : 0, &report));
  return detail::take_string(report);
}

}  // namespace kiln

#endif  // KILN_KILN_HPP
