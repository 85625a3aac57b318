// The C API (include/kiln/kiln_c.h) through its objects, as libkiln.so runs them: every error path
// returns a status with a message (never an exception, never an abort: the sanitizer build runs
// these too), runs give the C++ API's bytes, and cancellation and deadlines reach C callers.
#include "kiln/kiln_c.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <limits>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "core/version.h"
#include "graph/session.h"

namespace kiln {
namespace {

// The status's code and message; frees it.
struct Outcome {
  kiln_status_code code;
  std::string message;
};
Outcome take(kiln_status* status) {
  Outcome outcome{kiln_status_get_code(status), kiln_status_get_message(status)};
  kiln_status_free(status);
  return outcome;
}

#define EXPECT_STATUS(call, expected_code, text)                                       \
  do {                                                                                 \
    const Outcome outcome = take(call);                                                \
    EXPECT_EQ(outcome.code, expected_code) << #call << ": " << outcome.message;        \
    EXPECT_NE(outcome.message.find(text), std::string::npos) << #call << ": " << outcome.message; \
  } while (false)

#define ASSERT_OK(call)                                                     \
  do {                                                                      \
    const Outcome outcome = take(call);                                     \
    ASSERT_EQ(outcome.code, KILN_OK) << #call << ": " << outcome.message;   \
  } while (false)

// The demo model's input, [1, 3, 64, 64] float32, with a fixed pattern.
std::vector<float> demo_pixels() {
  std::vector<float> pixels(3 * 64 * 64);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<float>(i % 17) / 17.0f - 0.5f;
  return pixels;
}
const int64_t kDemoShape[] = {1, 3, 64, 64};

struct Demo {
  kiln_session* session = nullptr;
  std::vector<float> pixels = demo_pixels();
  kiln_tensor* input = nullptr;
  Demo() {
    EXPECT_EQ(kiln_session_create(KILN_DEMO_MODEL, nullptr, &session), nullptr);
    EXPECT_EQ(kiln_tensor_wrap(KILN_DTYPE_FLOAT32, kDemoShape, 4, pixels.data(), pixels.size() * sizeof(float), &input),
              nullptr);
  }
  ~Demo() {
    kiln_tensor_free(input);
    kiln_session_free(session);
  }
};

TEST(CApi, VersionIsTheBuildsVersion) {
  EXPECT_STREQ(::kiln_version(), KILN_VERSION_STRING);
  EXPECT_EQ(std::string(::kiln_version()), std::string(::kiln::kiln_version()));
  EXPECT_EQ(std::string(::kiln_version()),
            std::to_string(KILN_VERSION_MAJOR) + "." + std::to_string(KILN_VERSION_MINOR) + "." +
                std::to_string(KILN_VERSION_PATCH));
  EXPECT_NE(std::string(kiln_build_info()).find("OpenMP"), std::string::npos);
}

TEST(CApi, NullStatusIsSuccessAndCodesHaveNames) {
  EXPECT_EQ(kiln_status_get_code(nullptr), KILN_OK);
  EXPECT_STREQ(kiln_status_get_message(nullptr), "");
  kiln_status_free(nullptr);
  EXPECT_STREQ(kiln_status_code_name(KILN_CANCELLED), "cancelled");
  EXPECT_STREQ(kiln_status_code_name(KILN_DEADLINE_EXCEEDED), "deadline exceeded");
  EXPECT_STREQ(kiln_status_code_name(static_cast<kiln_status_code>(99)), "unknown status code");
  EXPECT_STREQ(kiln_dtype_name(KILN_DTYPE_BFLOAT16), "bfloat16");
  EXPECT_STREQ(kiln_dtype_name(static_cast<kiln_dtype>(99)), "unknown");
  EXPECT_EQ(kiln_dtype_size(KILN_DTYPE_INT64), 8u);
  EXPECT_EQ(kiln_dtype_size(static_cast<kiln_dtype>(1000)), 0u);
}

TEST(CApi, NullPointersAreStatusesNamingTheParameter) {
  kiln_session* session = nullptr;
  kiln_tensor* tensor = nullptr;
  char* text = nullptr;
  EXPECT_STATUS(kiln_session_create(nullptr, nullptr, &session), KILN_INVALID_ARGUMENT, "model_path is NULL");
  EXPECT_STATUS(kiln_session_create(KILN_DEMO_MODEL, nullptr, nullptr), KILN_INVALID_ARGUMENT, "out is NULL");
  EXPECT_STATUS(kiln_session_create_from_bytes(nullptr, 10, nullptr, &session), KILN_INVALID_ARGUMENT,
                "model is NULL");
  EXPECT_STATUS(kiln_tensor_create(KILN_DTYPE_FLOAT32, nullptr, 2, &tensor), KILN_INVALID_ARGUMENT, "shape is NULL");
  EXPECT_STATUS(kiln_settings_set(nullptr, "threads", "1"), KILN_INVALID_ARGUMENT, "settings is NULL");
  EXPECT_STATUS(kiln_global_setting_get(nullptr, &text), KILN_INVALID_ARGUMENT, "name is NULL");
  EXPECT_STATUS(kiln_session_input_info(nullptr, 0, nullptr, nullptr, nullptr, nullptr), KILN_INVALID_ARGUMENT,
                "session is NULL");
  EXPECT_STATUS(kiln_session_run(nullptr, nullptr, nullptr, nullptr, 0, nullptr, 0), KILN_INVALID_ARGUMENT,
                "session is NULL");
  EXPECT_STATUS(kiln_run_options_set_timeout_ms(nullptr, 1), KILN_INVALID_ARGUMENT, "options is NULL");
  EXPECT_STATUS(kiln_trace_summary(nullptr, "op", &text), KILN_INVALID_ARGUMENT, "trace_path is NULL");
  EXPECT_STATUS(kiln_tidy_report("x.json", 0, nullptr), KILN_INVALID_ARGUMENT, "report is NULL");
  EXPECT_EQ(session, nullptr);
  EXPECT_EQ(tensor, nullptr);
  // Accessors and frees take NULL.
  EXPECT_EQ(kiln_session_input_count(nullptr), 0u);
  EXPECT_EQ(kiln_tensor_data(nullptr), nullptr);
  EXPECT_EQ(kiln_tensor_rank(nullptr), 0u);
  kiln_run_options_cancel(nullptr);
  kiln_tensor_free(nullptr);
  kiln_session_free(nullptr);
  kiln_settings_free(nullptr);
  kiln_run_options_free(nullptr);
  kiln_string_free(nullptr);
}

TEST(CApi, MissingFilesAndBadModelsAreStatuses) {
  kiln_session* session = nullptr;
  EXPECT_STATUS(kiln_session_create("no/such/model.onnx", nullptr, &session), KILN_INVALID_ARGUMENT,
                "no/such/model.onnx");
  const char garbage[] = "this is not an ONNX model";
  const Outcome bad = take(kiln_session_create_from_bytes(garbage, sizeof(garbage), nullptr, &session));
  EXPECT_EQ(bad.code, KILN_INVALID_MODEL) << bad.message;
  EXPECT_EQ(session, nullptr);
}

TEST(CApi, TensorsCheckTheirShapeSizeAndAlignment) {
  kiln_tensor* tensor = nullptr;
  const int64_t negative[] = {2, -1};
  EXPECT_STATUS(kiln_tensor_create(KILN_DTYPE_FLOAT32, negative, 2, &tensor), KILN_INVALID_ARGUMENT, "-1");
  EXPECT_STATUS(kiln_tensor_create(static_cast<kiln_dtype>(42), nullptr, 0, &tensor), KILN_INVALID_ARGUMENT,
                "not a kiln_dtype");
  float data[6] = {};
  const int64_t shape[] = {2, 3};
  EXPECT_STATUS(kiln_tensor_wrap(KILN_DTYPE_FLOAT32, shape, 2, data, 20, &tensor), KILN_INVALID_ARGUMENT,
                "takes 24 bytes");
  EXPECT_STATUS(kiln_tensor_wrap(KILN_DTYPE_FLOAT32, shape, 2, reinterpret_cast<char*>(data) + 1, 24, &tensor),
                KILN_INVALID_ARGUMENT, "not aligned");
  ASSERT_OK(kiln_tensor_wrap(KILN_DTYPE_FLOAT32, shape, 2, data, sizeof(data), &tensor));
  EXPECT_EQ(kiln_tensor_data(tensor), data);
  EXPECT_EQ(kiln_tensor_element_count(tensor), 6);
  EXPECT_EQ(kiln_tensor_shape(tensor)[1], 3);
  kiln_tensor_free(tensor);
  ASSERT_OK(kiln_tensor_create(KILN_DTYPE_INT64, shape, 2, &tensor));
  EXPECT_EQ(kiln_tensor_byte_size(tensor), 48u);
  EXPECT_EQ(static_cast<int64_t*>(kiln_tensor_data(tensor))[5], 0);
  kiln_tensor_free(tensor);
}

TEST(CApi, SessionsDescribeTheirInputsAndOutputs) {
  Demo demo;
  ASSERT_EQ(kiln_session_input_count(demo.session), 1u);
  const char* name = nullptr;
  kiln_dtype dtype = KILN_DTYPE_UNDEFINED;
  int64_t rank = 0;
  const int64_t* dims = nullptr;
  ASSERT_OK(kiln_session_input_info(demo.session, 0, &name, &dtype, &rank, &dims));
  EXPECT_STREQ(name, "input");
  EXPECT_EQ(dtype, KILN_DTYPE_FLOAT32);
  ASSERT_EQ(rank, 4);
  EXPECT_EQ(dims[3], 64);
  ASSERT_OK(kiln_session_output_info(demo.session, 0, &name, nullptr, nullptr, nullptr));
  EXPECT_STREQ(name, "logits");
  EXPECT_STATUS(kiln_session_output_info(demo.session, 1, &name, nullptr, nullptr, nullptr), KILN_INVALID_ARGUMENT,
                "out of range");
}

TEST(CApi, RunsGiveTheBytesOfTheCppApi) {
  Demo demo;
  Session reference(KILN_DEMO_MODEL);
  const Tensor expected =
      reference.run({{"input", Tensor::wrap(demo.pixels.data(), DType::f32, {1, 3, 64, 64})}}).at("logits");

  kiln_tensor* output = nullptr;
  const char* names[] = {"input"};
  ASSERT_OK(kiln_session_run(demo.session, nullptr, names, &demo.input, 1, &output, 1));
  ASSERT_EQ(kiln_tensor_byte_size(output), expected.nbytes());
  EXPECT_EQ(std::memcmp(kiln_tensor_data(output), expected.raw_data(), expected.nbytes()), 0);

  // Into the caller's tensor (inputs by position this time).
  kiln_tensor* mine = nullptr;
  const int64_t shape[] = {1, 10};
  ASSERT_OK(kiln_tensor_create(KILN_DTYPE_FLOAT32, shape, 2, &mine));
  kiln_tensor* outputs[] = {mine};
  ASSERT_OK(kiln_session_run(demo.session, nullptr, nullptr, &demo.input, 1, outputs, 1));
  EXPECT_EQ(outputs[0], mine);
  EXPECT_EQ(std::memcmp(kiln_tensor_data(mine), expected.raw_data(), expected.nbytes()), 0);
  kiln_tensor_free(mine);
  kiln_tensor_free(output);
}

TEST(CApi, BadRunArgumentsAreStatusesAndWriteNothing) {
  Demo demo;
  const char* names[] = {"input"};
  kiln_tensor* output = nullptr;
  const char* wrong_name[] = {"image"};
  EXPECT_STATUS(kiln_session_run(demo.session, nullptr, wrong_name, &demo.input, 1, &output, 1),
                KILN_INVALID_ARGUMENT, "image");
  EXPECT_STATUS(kiln_session_run(demo.session, nullptr, names, &demo.input, 1, &output, 2), KILN_INVALID_ARGUMENT,
                "output_count is 2");
  EXPECT_STATUS(kiln_session_run(demo.session, nullptr, nullptr, &demo.input, 0, &output, 1), KILN_INVALID_ARGUMENT,
                "1 inputs are expected");
  EXPECT_STATUS(kiln_session_run(demo.session, nullptr, names, nullptr, 1, &output, 1), KILN_INVALID_ARGUMENT,
                "inputs is NULL");
  // A wrong shape and a wrong dtype.
  std::vector<float> small(3 * 32 * 32);
  const int64_t small_shape[] = {1, 3, 32, 32};
  kiln_tensor* small_input = nullptr;
  ASSERT_OK(kiln_tensor_wrap(KILN_DTYPE_FLOAT32, small_shape, 4, small.data(), small.size() * 4, &small_input));
  EXPECT_STATUS(kiln_session_run(demo.session, nullptr, names, &small_input, 1, &output, 1), KILN_INVALID_ARGUMENT,
                "input");
  kiln_tensor_free(small_input);
  kiln_tensor* ints = nullptr;
  ASSERT_OK(kiln_tensor_create(KILN_DTYPE_INT32, kDemoShape, 4, &ints));
  EXPECT_EQ(take(kiln_session_run(demo.session, nullptr, names, &ints, 1, &output, 1)).code, KILN_TYPE_MISMATCH);
  kiln_tensor_free(ints);
  // A caller's output tensor of the wrong shape is left alone.
  kiln_tensor* wrong = nullptr;
  const int64_t wrong_shape[] = {10};
  ASSERT_OK(kiln_tensor_create(KILN_DTYPE_FLOAT32, wrong_shape, 1, &wrong));
  static_cast<float*>(kiln_tensor_data(wrong))[0] = 7;
  EXPECT_STATUS(kiln_session_run(demo.session, nullptr, names, &demo.input, 1, &wrong, 1), KILN_INVALID_ARGUMENT,
                "has shape [10] but the output has [1, 10]");
  EXPECT_EQ(static_cast<float*>(kiln_tensor_data(wrong))[0], 7.0f);
  kiln_tensor_free(wrong);
  EXPECT_EQ(output, nullptr);
}

TEST(CApi, SettingsByNameWithValuesAsText) {
  kiln_settings* settings = nullptr;
  ASSERT_OK(kiln_settings_create(&settings));
  ASSERT_OK(kiln_settings_set(settings, "threads", "1"));
  ASSERT_OK(kiln_settings_set(settings, "precision", "fp32"));
  EXPECT_STATUS(kiln_settings_set(settings, "thread", "1"), KILN_INVALID_ARGUMENT, "threads");
  EXPECT_STATUS(kiln_settings_set(settings, "conv_precision", "fp8"), KILN_INVALID_ARGUMENT, "fp8");
  EXPECT_STATUS(kiln_settings_set(settings, "verbose_sink", "x"), KILN_INVALID_ARGUMENT, "callback");
  ASSERT_OK(kiln_settings_set(settings, "mkldnn.enabled", "off"));  // an alias of onednn_enabled
  EXPECT_STATUS(kiln_settings_set(settings, "mkldnn.enabled", "maybe"), KILN_INVALID_ARGUMENT,
                "mkldnn.enabled (onednn_enabled)");
  kiln_session* session = nullptr;
  ASSERT_OK(kiln_session_create(KILN_DEMO_MODEL, settings, &session));
  kiln_settings_free(settings);  // the session keeps its own copy
  kiln_session_free(session);

  char* value = nullptr;
  ASSERT_OK(kiln_global_setting_get("deterministic", &value));
  const std::string saved = value;
  kiln_string_free(value);
  ASSERT_OK(kiln_global_setting_set("deterministic", "on"));
  ASSERT_OK(kiln_global_setting_get("deterministic", &value));
  EXPECT_STREQ(value, "1");
  kiln_string_free(value);
  ASSERT_OK(kiln_global_setting_set("deterministic", saved.c_str()));
  EXPECT_STATUS(kiln_global_setting_set("deterministic", "maybe"), KILN_INVALID_ARGUMENT, "maybe");
  // PyTorch's names (backends/setting_aliases.h) reach the same settings, values mapped both ways.
  ASSERT_OK(kiln_global_setting_get("quantized.engine", &value));
  const std::string engine = value;
  kiln_string_free(value);
  ASSERT_OK(kiln_global_setting_set("quantized.engine", "onednn"));
  ASSERT_OK(kiln_global_setting_get("prefer_quantized", &value));
  EXPECT_STREQ(value, "onednn,native");
  kiln_string_free(value);
  ASSERT_OK(kiln_global_setting_get("quantized.engine", &value));
  EXPECT_STREQ(value, "onednn");
  kiln_string_free(value);
  ASSERT_OK(kiln_global_setting_set("quantized.engine", engine.c_str()));
  EXPECT_STATUS(kiln_global_setting_set("quantized.engine", "fbgemm"), KILN_INVALID_ARGUMENT,
                "quantized.engine is one of default, native, onednn, got 'fbgemm'");

  int built = 0;
  int available = 0;
  char* version = nullptr;
  ASSERT_OK(kiln_backend_info("native", &built, &available, &version));
  EXPECT_EQ(built, 1);
  EXPECT_EQ(available, 1);
  kiln_string_free(version);
  EXPECT_STATUS(kiln_backend_info("cuda", nullptr, nullptr, nullptr), KILN_INVALID_ARGUMENT, "unknown backend");
}

TEST(CApi, CancelledAndExpiredRunsReturnTheirStatus) {
  Demo demo;
  kiln_run_options* options = nullptr;
  ASSERT_OK(kiln_run_options_create(&options));
  kiln_tensor* output = nullptr;
  ASSERT_OK(kiln_session_run(demo.session, options, nullptr, &demo.input, 1, &output, 1));
  kiln_tensor_free(output);
  output = nullptr;
  kiln_run_options_cancel(options);
  EXPECT_STATUS(kiln_session_run(demo.session, options, nullptr, &demo.input, 1, &output, 1), KILN_CANCELLED,
                "cancelled");
  kiln_run_options_free(options);

  ASSERT_OK(kiln_run_options_create(&options));
  EXPECT_STATUS(kiln_run_options_set_timeout_ms(options, -1), KILN_INVALID_ARGUMENT, "timeout");
  EXPECT_STATUS(kiln_run_options_set_timeout_ms(options, std::numeric_limits<double>::infinity()), KILN_INVALID_ARGUMENT, "timeout");
  ASSERT_OK(kiln_run_options_set_timeout_ms(options, 0));
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  EXPECT_STATUS(kiln_session_run(demo.session, options, nullptr, &demo.input, 1, &output, 1),
                KILN_DEADLINE_EXCEEDED, "deadline passed");
  EXPECT_EQ(output, nullptr);
  kiln_run_options_free(options);
}

// What run_async callbacks saw.
struct Callbacks {
  std::mutex mutex;
  std::condition_variable changed;
  int calls = 0;
  std::vector<kiln_status_code> codes;
  std::vector<std::vector<char>> outputs;  // bytes of output 0 of each successful run

  static void record(void* user_data, kiln_status* status, kiln_tensor** outputs, size_t count) {
    auto& self = *static_cast<Callbacks*>(user_data);
    std::lock_guard lock(self.mutex);
    self.codes.push_back(kiln_status_get_code(status));
    if (status == nullptr && count == 1) {
      const char* data = static_cast<const char*>(kiln_tensor_data(outputs[0]));
      self.outputs.emplace_back(data, data + kiln_tensor_byte_size(outputs[0]));
      kiln_tensor_free(outputs[0]);
    }
    kiln_status_free(status);
    ++self.calls;
    self.changed.notify_all();
  }
  void wait_for(int count) {
    std::unique_lock lock(mutex);
    changed.wait(lock, [&] { return calls >= count; });
  }
};

TEST(CApi, RunAsyncCallsBackOnceWithOutputsOrTheError) {
  Callbacks callbacks;
  std::vector<char> expected;
  {
    Demo demo;
    kiln_tensor* output = nullptr;
    ASSERT_OK(kiln_session_run(demo.session, nullptr, nullptr, &demo.input, 1, &output, 1));
    const char* data = static_cast<const char*>(kiln_tensor_data(output));
    expected.assign(data, data + kiln_tensor_byte_size(output));
    kiln_tensor_free(output);

    EXPECT_STATUS(kiln_session_run_async(demo.session, nullptr, nullptr, &demo.input, 1, nullptr, nullptr),
                  KILN_INVALID_ARGUMENT, "callback is NULL");
    EXPECT_STATUS(kiln_session_run_async(nullptr, nullptr, nullptr, &demo.input, 1, &Callbacks::record, &callbacks),
                  KILN_INVALID_ARGUMENT, "session is NULL");
    kiln_run_options* cancelled = nullptr;
    ASSERT_OK(kiln_run_options_create(&cancelled));
    kiln_run_options_cancel(cancelled);
    // A successful run, a cancelled one and one with a wrong input name; the options and the
    // session are freed while the runs may still be in flight.
    ASSERT_OK(kiln_session_run_async(demo.session, nullptr, nullptr, &demo.input, 1, &Callbacks::record, &callbacks));
    ASSERT_OK(kiln_session_run_async(demo.session, cancelled, nullptr, &demo.input, 1, &Callbacks::record, &callbacks));
    kiln_run_options_free(cancelled);
    const char* wrong[] = {"image"};
    ASSERT_OK(kiln_session_run_async(demo.session, nullptr, wrong, &demo.input, 1, &Callbacks::record, &callbacks));
    callbacks.wait_for(3);  // the pixels the runs read live in `demo`
  }
  std::lock_guard lock(callbacks.mutex);
  EXPECT_EQ(callbacks.calls, 3);
  std::vector<kiln_status_code> codes = callbacks.codes;
  std::sort(codes.begin(), codes.end());
  EXPECT_EQ(codes, (std::vector<kiln_status_code>{KILN_OK, KILN_INVALID_ARGUMENT, KILN_CANCELLED}));
  ASSERT_EQ(callbacks.outputs.size(), 1u);
  EXPECT_EQ(callbacks.outputs[0], expected);
}

// Cancelling from another thread while runs are queued or running: each run either finishes with
// the right bytes or reports KILN_CANCELLED, and every callback comes exactly once.
TEST(CApi, CancellingRunsInFlightFromAnotherThread) {
  Demo demo;
  std::vector<char> expected;
  {
    kiln_tensor* output = nullptr;
    ASSERT_OK(kiln_session_run(demo.session, nullptr, nullptr, &demo.input, 1, &output, 1));
    const char* data = static_cast<const char*>(kiln_tensor_data(output));
    expected.assign(data, data + kiln_tensor_byte_size(output));
    kiln_tensor_free(output);
  }
  constexpr int kRuns = 8;
  Callbacks callbacks;
  kiln_run_options* options = nullptr;
  ASSERT_OK(kiln_run_options_create(&options));
  for (int i = 0; i < kRuns; ++i)
    ASSERT_OK(kiln_session_run_async(demo.session, options, nullptr, &demo.input, 1, &Callbacks::record, &callbacks));
  std::thread canceller([options] { kiln_run_options_cancel(options); });
  canceller.join();
  kiln_run_options_free(options);
  callbacks.wait_for(kRuns);
  std::lock_guard lock(callbacks.mutex);
  EXPECT_EQ(callbacks.calls, kRuns);
  for (kiln_status_code code : callbacks.codes) EXPECT_TRUE(code == KILN_OK || code == KILN_CANCELLED) << code;
  for (const std::vector<char>& bytes : callbacks.outputs) EXPECT_EQ(bytes, expected);
}

TEST(CApi, ProfilerWritesATraceThatSummaryAndTidyRead) {
  Demo demo;
  EXPECT_STATUS(kiln_profiler_stop(nullptr), KILN_RUNTIME_ERROR, "not recording");
  ASSERT_OK(kiln_profiler_start());
  EXPECT_STATUS(kiln_profiler_start(), KILN_RUNTIME_ERROR, "already recording");
  kiln_tensor* output = nullptr;
  ASSERT_OK(kiln_session_run(demo.session, nullptr, nullptr, &demo.input, 1, &output, 1));
  kiln_tensor_free(output);
  const std::filesystem::path trace =
      std::filesystem::temp_directory_path() / ("kiln_c_api_trace_" + std::to_string(::getpid()) + ".json");
  ASSERT_OK(kiln_profiler_stop(trace.c_str()));

  char* table = nullptr;
  ASSERT_OK(kiln_trace_summary(trace.c_str(), "op", &table));
  EXPECT_NE(std::string(table).find("Conv"), std::string::npos) << table;
  kiln_string_free(table);
  EXPECT_STATUS(kiln_trace_summary(trace.c_str(), "colour", &table), KILN_INVALID_ARGUMENT, "colour");
  char* report = nullptr;
  ASSERT_OK(kiln_tidy_report(trace.c_str(), 1, &report));
  EXPECT_EQ(report[0], '{');
  kiln_string_free(report);
  std::filesystem::remove(trace);
  EXPECT_STATUS(kiln_tidy_report("no/such/trace.json", 0, &report), KILN_INVALID_ARGUMENT, "no/such/trace.json");
  EXPECT_EQ(report, nullptr);
}

}  // namespace
}  // namespace kiln
