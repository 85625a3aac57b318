/* kiln's C API: the stable ABI of libkiln.so, for C and for bindings from other languages (Go, Rust,
 * C#, Java, Node). kiln/kiln.hpp wraps it for C++.
 *
 * Conventions
 * - Errors: every call that can fail returns a kiln_status*. NULL means success; otherwise the
 *   status carries a code and a message and the caller owns it (kiln_status_free). Nothing throws
 *   across this boundary and no call aborts on bad input: null pointers, unknown names, wrong
 *   shapes and dtypes come back as statuses naming what was wrong and what was expected.
 * - Ownership: objects a call hands out through an `out` parameter belong to the caller, who frees
 *   each with its kiln_*_free function (all accept NULL). Strings kiln returns as `char*` are freed
 *   with kiln_string_free; `const char*` results are owned by the object they were read from and
 *   live as long as it does.
 * - Threads: sessions are safe to run from many threads at once (each run has its own buffers);
 *   tensors, settings objects and run options are not synchronized (cancelling run options is the
 *   exception: kiln_run_options_cancel may be called from any thread at any time). Global settings
 *   apply to runs started after they change.
 * - Stability: while kiln's major version is 0, the ABI may change between minor versions (the
 *   SONAME is libkiln.so.MAJOR.MINOR); within one minor version it does not. Enum values are never
 *   renumbered. */
#ifndef KILN_KILN_C_H
#define KILN_KILN_C_H

#include <stddef.h>
#include <stdint.h>

#include "kiln/version.h"

#if defined(_WIN32)
#define KILN_API
#else
#define KILN_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Status ---------------------------------------------------------------------------------- */

typedef enum kiln_status_code {
  KILN_OK = 0,
  KILN_INVALID_ARGUMENT = 1, /* a value the caller passed is wrong: a shape, a name, a null pointer */
  KILN_TYPE_MISMATCH = 2,    /* a dtype is wrong */
  KILN_NOT_IMPLEMENTED = 3,  /* a valid request kiln does not support (an op, a dtype) */
  KILN_INVALID_MODEL = 4,    /* the model is malformed or inconsistent */
  KILN_RUNTIME_ERROR = 5,    /* anything else: an I/O failure, an internal limit */
  KILN_CANCELLED = 6,        /* the run was cancelled through its run options */
  KILN_DEADLINE_EXCEEDED = 7,/* the run's deadline passed before it finished */
  KILN_OUT_OF_MEMORY = 8,
  KILN_STATUS_CODE_MAX_ENUM = 0x7FFFFFFF /* not a code: keeps every 32-bit value in the enum's range */
} kiln_status_code;

typedef struct kiln_status kiln_status;

/* KILN_OK for NULL. */
KILN_API kiln_status_code kiln_status_get_code(const kiln_status* status);
/* The message ("" for NULL), owned by the status. */
KILN_API const char* kiln_status_get_message(const kiln_status* status);
/* The code's name: "ok", "invalid argument", "cancelled", ... (static storage). */
KILN_API const char* kiln_status_code_name(kiln_status_code code);
KILN_API void kiln_status_free(kiln_status* status);

KILN_API void kiln_string_free(char* text);

/* ---- Version and build ----------------------------------------------------------------------- */

/* "MAJOR.MINOR.PATCH" of the library loaded (KILN_VERSION_STRING is the headers'). Static storage. */
KILN_API const char* kiln_version(void);
/* Build type, compiler, OpenMP and sanitizers ("Release, GNU 12.2.0, OpenMP ON, sanitizers OFF"); which
 * backends were built: kiln_backend_info. Static storage. */
KILN_API const char* kiln_build_info(void);

/* ---- Element types --------------------------------------------------------------------------- */

typedef enum kiln_dtype {
  KILN_DTYPE_UNDEFINED = 0,
  KILN_DTYPE_FLOAT32 = 1,
  KILN_DTYPE_FLOAT64 = 2,
  KILN_DTYPE_FLOAT16 = 3,
  KILN_DTYPE_BFLOAT16 = 4,
  KILN_DTYPE_INT64 = 5,
  KILN_DTYPE_INT32 = 6,
  KILN_DTYPE_INT16 = 7,
  KILN_DTYPE_INT8 = 8,
  KILN_DTYPE_UINT64 = 9,
  KILN_DTYPE_UINT32 = 10,
  KILN_DTYPE_UINT16 = 11,
  KILN_DTYPE_UINT8 = 12,
  KILN_DTYPE_BOOL = 13, /* one byte per element, 0 or 1 */
  KILN_DTYPE_MAX_ENUM = 0x7FFFFFFF /* not a dtype: keeps every 32-bit value in the enum's range */
} kiln_dtype;

/* numpy's name ("float32", "int64", "bool"); "unknown" outside the enum. Static storage. */
KILN_API const char* kiln_dtype_name(kiln_dtype dtype);
/* Bytes per element; 0 for KILN_DTYPE_UNDEFINED and values outside the enum. */
KILN_API size_t kiln_dtype_size(kiln_dtype dtype);

/* ---- Tensors --------------------------------------------------------------------------------- */

/* A dense, row-major tensor. Either kiln owns its memory (kiln_tensor_create, outputs kiln
 * allocated) or the caller does (kiln_tensor_wrap: zero copy). */
typedef struct kiln_tensor kiln_tensor;

/* A zero-filled tensor of `rank` dims (`shape` may be NULL when rank is 0). */
KILN_API kiln_status* kiln_tensor_create(kiln_dtype dtype, const int64_t* shape, size_t rank,
                                         kiln_tensor** out);
/* A tensor over the caller's memory, not copied: `data` must hold `byte_size` bytes, exactly the
 * shape's element count times the dtype's size, aligned to the element size, and must stay valid
 * and unchanged while the tensor or any run reading it (run_async included) lives. Runs never
 * write into inputs. */
KILN_API kiln_status* kiln_tensor_wrap(kiln_dtype dtype, const int64_t* shape, size_t rank, void* data,
                                       size_t byte_size, kiln_tensor** out);
KILN_API void kiln_tensor_free(kiln_tensor* tensor);

/* Accessors; NULL tensors read as undefined, rank 0, no data. */
KILN_API kiln_dtype kiln_tensor_dtype(const kiln_tensor* tensor);
KILN_API size_t kiln_tensor_rank(const kiln_tensor* tensor);
/* `rank` dims, owned by the tensor. */
KILN_API const int64_t* kiln_tensor_shape(const kiln_tensor* tensor);
KILN_API int64_t kiln_tensor_element_count(const kiln_tensor* tensor);
KILN_API size_t kiln_tensor_byte_size(const kiln_tensor* tensor);
/* The first element. Writable for tensors the caller created or was handed. */
KILN_API void* kiln_tensor_data(kiln_tensor* tensor);

/* ---- Settings -------------------------------------------------------------------------------- */

/* A session's setting changes, by the names `kiln info --settings` and docs/backends.md list
 * ("threads", "precision", "onednn_enabled", "conv_algorithm", ...), each value as text as the CLI
 * takes it ("4", "bf16", "on", "winograd,native"). They override the global settings. */
typedef struct kiln_settings kiln_settings;

KILN_API kiln_status* kiln_settings_create(kiln_settings** out);
/* Unknown names and malformed values are errors listing what is accepted. */
KILN_API kiln_status* kiln_settings_set(kiln_settings* settings, const char* name, const char* value);
KILN_API void kiln_settings_free(kiln_settings* settings);

/* The process's global settings (the backend controls): what runs started later use, unless their
 * session changes them. */
KILN_API kiln_status* kiln_global_setting_set(const char* name, const char* value);
/* The value as text ("1", "bf16", "parallel"); free it with kiln_string_free. */
KILN_API kiln_status* kiln_global_setting_get(const char* name, char** value);

/* A backend by name ("onednn", "blas", "winograd", "native"): whether it was built in and can run
 * on this machine, and its library's version (free it with kiln_string_free). Out pointers may be
 * NULL. */
KILN_API kiln_status* kiln_backend_info(const char* name, int* built, int* available, char** version);

/* ---- Sessions -------------------------------------------------------------------------------- */

/* A loaded model, planned on first run per input shape and run many times. */
typedef struct kiln_session kiln_session;

/* From an ONNX file; `settings` may be NULL (and may be freed after this call). */
KILN_API kiln_status* kiln_session_create(const char* model_path, const kiln_settings* settings,
                                          kiln_session** out);
/* From an ONNX model in memory (copied; external data is looked up from the current directory). */
KILN_API kiln_status* kiln_session_create_from_bytes(const void* model, size_t byte_size,
                                                     const kiln_settings* settings, kiln_session** out);
/* Runs in flight keep what they need: freeing a session while a run_async is pending is safe. */
KILN_API void kiln_session_free(kiln_session* session);

KILN_API size_t kiln_session_input_count(const kiln_session* session);
KILN_API size_t kiln_session_output_count(const kiln_session* session);
/* Input or output `index`'s name, dtype (KILN_DTYPE_UNDEFINED when the model does not say), rank
 * (-1 when the model does not say) and dims (-1 for a symbolic dim). The name and dims are owned
 * by the session. Out pointers may be NULL; an index out of range is an error. */
KILN_API kiln_status* kiln_session_input_info(const kiln_session* session, size_t index, const char** name,
                                              kiln_dtype* dtype, int64_t* rank, const int64_t** dims);
KILN_API kiln_status* kiln_session_output_info(const kiln_session* session, size_t index,
                                               const char** name, kiln_dtype* dtype, int64_t* rank,
                                               const int64_t** dims);

/* ---- Running --------------------------------------------------------------------------------- */

/* How a run may be stopped: a deadline, and cancellation from any thread. One run options object
 * may serve many runs; once cancelled, every run using it fails with KILN_CANCELLED (those in
 * flight at their next step boundary: a kernel already running finishes first). */
typedef struct kiln_run_options kiln_run_options;

KILN_API kiln_status* kiln_run_options_create(kiln_run_options** out);
/* Runs fail with KILN_DEADLINE_EXCEEDED once `milliseconds` from this call have passed (checked
 * when a run starts, after planning and between steps). Negative or non-finite values are errors. */
KILN_API kiln_status* kiln_run_options_set_timeout_ms(kiln_run_options* options, double milliseconds);
/* Thread-safe, any time; NULL is ignored. */
KILN_API void kiln_run_options_cancel(kiln_run_options* options);
/* Runs in flight keep what they need: freeing options after a run_async started is safe. */
KILN_API void kiln_run_options_free(kiln_run_options* options);

/* Runs the session once.
 * Inputs: `input_count` tensors, named by `input_names`, or, when `input_names` is NULL, one per
 * model input in order. They are read in place (zero copy).
 * Outputs: `output_count` must be kiln_session_output_count; outputs[i] receives output i (model
 * order). Where outputs[i] is NULL on entry kiln hands over the tensor it computed (the caller owns
 * it: no copy). Where the caller passes a tensor, its dtype and shape must be the output's, and
 * the result is copied into it (one copy). On error nothing is written and nothing handed over.
 * `options` may be NULL. */
KILN_API kiln_status* kiln_session_run(kiln_session* session, const kiln_run_options* options,
                                       const char* const* input_names, kiln_tensor* const* inputs,
                                       size_t input_count, kiln_tensor** outputs, size_t output_count);

/* Called once per run_async, on one of kiln's inter-op threads. It owns `status` (NULL: success)
 * and the `output_count` tensors in `outputs` (model order; NULL and 0 on error), which it frees with
 * kiln_status_free and kiln_tensor_free; the array itself is kiln's, valid during the call. */
typedef void (*kiln_run_callback)(void* user_data, kiln_status* status, kiln_tensor** outputs,
                                  size_t output_count);

/* Starts a run on kiln's inter-op pool and returns at once; inputs as for kiln_session_run (wrapped
 * memory must stay valid until the callback). Returns an error status, without calling back, only
 * for a NULL session or callback, or bad `input_names`/`inputs` arrays; every other error (a wrong
 * shape, cancellation) reaches the callback. The process must not exit before its callbacks ran. */
KILN_API kiln_status* kiln_session_run_async(kiln_session* session, const kiln_run_options* options,
                                             const char* const* input_names,
                                             kiln_tensor* const* inputs, size_t input_count,
                                             kiln_run_callback callback, void* user_data);

/* ---- Profiler, traces and tidy --------------------------------------------------------------- */

/* Starts recording every run in the process (one profile at a time: an error while one records). */
KILN_API kiln_status* kiln_profiler_start(void);
/* Stops recording and writes the Chrome trace (JSON, chrome://tracing or Perfetto) to
 * `trace_path`; NULL discards what was recorded. */
KILN_API kiln_status* kiln_profiler_stop(const char* trace_path);
/* Where time went in a kiln or PyTorch trace file: the table `kiln profile --load` prints, grouped
 * by "op", "kernel", "backend", "node" or "shape". Free it with kiln_string_free. */
KILN_API kiln_status* kiln_trace_summary(const char* trace_path, const char* group_by, char** table);
/* kiln tidy's report on a kiln or PyTorch trace file: text, or JSON when `json` is non-zero.
 * Free it with kiln_string_free. */
KILN_API kiln_status* kiln_tidy_report(const char* trace_path, int json, char** report);

#ifdef __cplusplus
}
#endif

#endif /* KILN_KILN_C_H */
