// Sessions: loading, describing inputs and outputs, and running, at once or on the inter-op pool.
#include <cmath>
#include <cstring>

#include "capi/handles.h"
#include "graph/onnx_import.h"
#include "runtime/interop.h"

namespace kiln::capi {
namespace {

std::vector<std::vector<int64_t>> dims_of(const std::vector<ValueInfo>& values) {
  std::vector<std::vector<int64_t>> dims(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    for (const Dim& dim : values[i].shape) dims[i].push_back(dim.is_known() ? dim.value : -1);
  }
  return dims;
}

kiln_session* new_session(std::shared_ptr<Session> session) {
  auto handle = std::make_unique<kiln_session>();
  handle->input_dims = dims_of(session->inputs());
  handle->output_dims = dims_of(session->outputs());
  handle->session = std::move(session);
  return handle.release();
}

Settings settings_of(const kiln_settings* settings) { return settings ? settings->settings : Settings(); }

void describe_value(const std::vector<ValueInfo>& infos, const std::vector<std::vector<int64_t>>& all_dims,
                    size_t index, const char* kind, const char** name, kiln_dtype* dtype, int64_t* rank,
                    const int64_t** dims) {
  KILN_CHECK(index < infos.size(), invalid_argument, kind, " index ", index, " is out of range (the model has ",
             infos.size(), " ", kind, "s)");
  const ValueInfo& info = infos[index];
  if (name != nullptr) *name = info.name.c_str();
  if (dtype != nullptr) *dtype = dtype_to_c(info.dtype);
  if (rank != nullptr) *rank = info.has_shape ? static_cast<int64_t>(info.shape.size()) : -1;
  if (dims != nullptr) *dims = all_dims[index].data();
}

// The caller's inputs by name: named by `names`, or, without names, the model's inputs in order.
TensorMap input_map(const kiln_session& session, const char* const* names, kiln_tensor* const* inputs,
                    size_t count) {
  KILN_CHECK(count == 0 || inputs != nullptr, invalid_argument, "inputs is NULL for ", count, " inputs");
  const std::vector<ValueInfo>& declared = session.session->inputs();
  KILN_CHECK(names != nullptr || count == declared.size(), invalid_argument, "without input_names, ",
             declared.size(), " inputs are expected (one per model input, in order), got ", count);
  TensorMap map;
  for (size_t i = 0; i < count; ++i) {
    KILN_CHECK(inputs[i] != nullptr, invalid_argument, "inputs[", i, "] is NULL");
    KILN_CHECK(names == nullptr || names[i] != nullptr, invalid_argument, "input_names[", i, "] is NULL");
    const std::string name = names ? names[i] : declared[i].name;
    KILN_CHECK(map.emplace(name, inputs[i]->tensor).second, invalid_argument, "input '", name,
               "' is given twice");
  }
  return map;
}

// Output i of `outputs` into outputs[i]: handed over, or copied into the caller's tensor.
void deliver_outputs(const Session& session, TensorMap& results, kiln_tensor** outputs, size_t count) {
  const std::vector<ValueInfo>& declared = session.outputs();
  for (size_t i = 0; i < count; ++i) {
    Tensor& result = results.at(declared[i].name);
    // kiln_tensor holds one array: a sequence or an empty optional has no form in the C API yet.
    KILN_CHECK(
        result.defined() && !result.is_sequence(), not_implemented, "output ", i, " ('", declared[i].name,
        "') is ", result.defined() ? "a sequence" : "an empty optional",
        ", which the C API cannot return (it passes tensors only; the C++ and Python APIs take sequences)");
    if (outputs[i] == nullptr) continue;
    const Tensor& target = outputs[i]->tensor;
    KILN_CHECK(target.dtype() == result.dtype(), type_mismatch, "outputs[", i, "] ('", declared[i].name,
               "') is ", dtype_name(target.dtype()), " but the output is ", dtype_name(result.dtype()));
    KILN_CHECK(target.shape() == result.shape(), invalid_argument, "outputs[", i, "] ('", declared[i].name,
               "') has shape ", shape_to_string(target.shape()), " but the output has ",
               shape_to_string(result.shape()));
  }
  // Only after every caller tensor was checked and every handle made: on an error nothing is
  // written and no handle is handed over.
  std::vector<std::unique_ptr<kiln_tensor>> handed_over(count);
  std::vector<Tensor> copied(count);
  for (size_t i = 0; i < count; ++i) {
    Tensor& result = results.at(declared[i].name);
    if (outputs[i] == nullptr) {
      handed_over[i].reset(new_tensor_handle(std::move(result)));
    } else {
      copied[i] = result.is_contiguous() ? result : result.clone();
    }
  }
  for (size_t i = 0; i < count; ++i) {
    if (handed_over[i]) {
      outputs[i] = handed_over[i].release();
    } else {
      std::memcpy(outputs[i]->tensor.raw_data(), copied[i].raw_data(), copied[i].nbytes());
    }
  }
}

}  // namespace
}  // namespace kiln::capi

using namespace kiln;
using capi::guarded;
using capi::required;

extern "C" {

kiln_status* kiln_session_create(const char* model_path, const kiln_settings* settings, kiln_session** out) {
  return guarded([&] {
    required(out, "out");
    *out = nullptr;
    const std::string path = required(model_path, "model_path");
    *out = capi::new_session(std::make_shared<Session>(path, capi::settings_of(settings)));
  });
}

kiln_status* kiln_session_create_from_bytes(const void* model, size_t byte_size, const kiln_settings* settings,
                                            kiln_session** out) {
  return guarded([&] {
    required(out, "out");
    *out = nullptr;
    KILN_CHECK(model != nullptr || byte_size == 0, invalid_argument, "model is NULL for ", byte_size, " bytes");
    const std::span<const uint8_t> bytes(static_cast<const uint8_t*>(model), byte_size);
    Model parsed = parse_onnx_model(bytes, std::filesystem::current_path());
    *out = capi::new_session(std::make_shared<Session>(std::move(parsed), capi::settings_of(settings)));
  });
}

void kiln_session_free(kiln_session* session) { delete session; }

size_t kiln_session_input_count(const kiln_session* session) { return session ? session->input_dims.size() : 0; }

size_t kiln_session_output_count(const kiln_session* session) { return session ? session->output_dims.size() : 0; }

kiln_status* kiln_session_input_info(const kiln_session* session, size_t index, const char** name, kiln_dtype* dtype,
                                     int64_t* rank, const int64_t** dims) {
  return guarded([&] {
    const kiln_session& s = *required(session, "session");
    capi::describe_value(s.session->inputs(), s.input_dims, index, "input", name, dtype, rank, dims);
  });
}

kiln_status* kiln_session_output_info(const kiln_session* session, size_t index, const char** name, kiln_dtype* dtype,
                                      int64_t* rank, const int64_t** dims) {
  return guarded([&] {
    const kiln_session& s = *required(session, "session");
    capi::describe_value(s.session->outputs(), s.output_dims, index, "output", name, dtype, rank, dims);
  });
}

kiln_status* kiln_run_options_create(kiln_run_options** out) {
  return guarded([&] {
    required(out, "out");
    *out = new kiln_run_options;
  });
}

kiln_status* kiln_run_options_set_timeout_ms(kiln_run_options* options, double milliseconds) {
  return guarded([&] {
    required(options, "options");
    KILN_CHECK(std::isfinite(milliseconds) && milliseconds >= 0 && milliseconds <= 1e12, invalid_argument,
               "timeout is ", milliseconds, " ms; expected a finite number from 0 to 1e12");
    options->control->set_timeout(std::chrono::nanoseconds(static_cast<int64_t>(milliseconds * 1e6)));
  });
}

void kiln_run_options_cancel(kiln_run_options* options) {
  if (options != nullptr) options->control->cancel();
}

void kiln_run_options_free(kiln_run_options* options) { delete options; }

kiln_status* kiln_session_run(kiln_session* session, const kiln_run_options* options, const char* const* input_names,
                              kiln_tensor* const* inputs, size_t input_count, kiln_tensor** outputs,
                              size_t output_count) {
  return guarded([&] {
    kiln_session& s = *required(session, "session");
    required(outputs, "outputs");
    KILN_CHECK(output_count == s.output_dims.size(), invalid_argument, "output_count is ", output_count,
               " but the model has ", s.output_dims.size(), " outputs");
    const TensorMap map = capi::input_map(s, input_names, inputs, input_count);
    TensorMap results = options ? s.session->run(map, *options->control) : s.session->run(map);
    capi::deliver_outputs(*s.session, results, outputs, output_count);
  });
}

kiln_status* kiln_session_run_async(kiln_session* session, const kiln_run_options* options,
                                    const char* const* input_names, kiln_tensor* const* inputs,
                                    size_t input_count, kiln_run_callback callback, void* user_data) {
  return guarded([&] {
    kiln_session& s = *required(session, "session");
    required(callback, "callback");
    TensorMap map = capi::input_map(s, input_names, inputs, input_count);
    std::shared_ptr<const RunControl> control = options ? options->control : nullptr;
    fork(
        [session = s.session, map = std::move(map), control = std::move(control), callback, user_data] {
          const size_t count = session->outputs().size();
          std::vector<kiln_tensor*> outputs(count, nullptr);
          kiln_status* status = guarded([&] {
            TensorMap results = control ? session->run(map, *control) : session->run(map);
            capi::deliver_outputs(*session, results, outputs.data(), count);
          });
          if (status != nullptr) {
            for (kiln_tensor*& output : outputs) {
              kiln_tensor_free(output);
              output = nullptr;
            }
          }
          callback(user_data, status, status ? nullptr : outputs.data(), status ? 0 : count);
        },
        "kiln_session_run_async");
  });
}

}  // extern "C"
