// kiln._kiln: the C++ library as seen from Python. numpy arrays go in and come out without copies
// (the buffer protocol; outputs keep kiln's storage alive through a capsule). kiln errors become
// ValueError, TypeError, NotImplementedError or RuntimeError by their kind. The `kiln` package
// (python/kiln/*.py) builds the user-facing names on top of this.
#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <sstream>
#include <type_traits>

#include "backends/control.h"
#include "backends/selection.h"
#include "core/error.h"
#include "core/version.h"
#include "graph/session.h"
#include "runtime/cpu_info.h"
#include "runtime/threads.h"
#include "tools/cli.h"

namespace py = pybind11;

namespace kiln {
namespace {

DType dtype_from_numpy(const py::dtype& dtype, const std::string& what) {
  const std::string name = dtype.attr("name").cast<std::string>();
  for (DType candidate : {DType::f32, DType::f64, DType::f16, DType::i64, DType::i32, DType::i16, DType::i8,
                          DType::u64, DType::u32, DType::u16, DType::u8, DType::boolean}) {
    if (dtype_name(candidate) == name) return candidate;
  }
  throw py::type_error(str_cat(what, " has numpy dtype ", name, ", which kiln does not take"));
}

// A view of `array`'s data (C-contiguous arrays are not copied; others are made contiguous first).
// `keep` holds the array object the tensor points into for as long as the tensor is used.
Tensor tensor_from_array(const py::handle& object, const std::string& what, std::vector<py::object>& keep) {
  py::array array = py::array::ensure(object, py::array::c_style);
  if (!array) throw py::type_error(str_cat(what, " must be a numpy array (or convertible to one)"));
  const DType dtype = dtype_from_numpy(array.dtype(), what);
  Shape shape(array.shape(), array.shape() + array.ndim());
  keep.push_back(array);
  return Tensor::wrap(const_cast<void*>(array.data()), dtype, std::move(shape));
}

// A numpy array over `tensor`'s storage; the capsule keeps the storage alive.
py::array array_from_tensor(const Tensor& tensor, const std::string& name) {
  if (tensor.dtype() == DType::bf16) {
    throw py::type_error(str_cat("output '", name, "' is bfloat16, which numpy cannot hold"));
  }
  auto* owner = new Tensor(tensor);
  py::capsule free_owner(owner, [](void* pointer) { delete static_cast<Tensor*>(pointer); });
  std::vector<py::ssize_t> strides;
  for (int64_t stride : tensor.strides())
    strides.push_back(static_cast<py::ssize_t>(stride * dtype_size(tensor.dtype())));
  return py::array(py::dtype(std::string(dtype_name(tensor.dtype()))),
                   std::vector<py::ssize_t>(tensor.shape().begin(), tensor.shape().end()), strides,
                   tensor.raw_data(), free_owner);
}

// A Python callable as a verbose sink. Calls and the callable's release happen under the GIL,
// whichever thread writes the line or drops the last reference.
class PythonCallbackSink final : public VerboseSink {
 public:
  explicit PythonCallbackSink(py::function callback) : callback_(std::move(callback)) {}
  ~PythonCallbackSink() override {
    py::gil_scoped_acquire gil;
    callback_ = py::function();
  }
  void write(std::string_view line) override {
    py::gil_scoped_acquire gil;
    try {
      callback_(py::str(line.data(), line.size()));
    } catch (py::error_already_set& error) {
      error.discard_as_unraisable("kiln verbose callback");
    }
  }

 private:
  py::function callback_;
};

std::shared_ptr<VerboseSink> sink_from_python(const py::handle& value) {
  if (value.is_none()) return nullptr;  // standard output
  if (PyCallable_Check(value.ptr()))
    return std::make_shared<PythonCallbackSink>(py::reinterpret_borrow<py::function>(value));
  if (py::isinstance<py::str>(value) || py::hasattr(value, "__fspath__")) {
    return file_verbose_sink(py::str(py::module_::import("os").attr("fspath")(value)).cast<std::string>());
  }
  throw py::type_error(
      "verbose_sink must be None (standard output), a file path or a callable taking a line");
}

// `value` as option `name`'s T when it has Python type Expected (bool is not taken for an int).
template <typename T, typename Expected>
T typed_option(const py::handle& value, const std::string& name, const char* expected) {
  const bool is_bool = py::isinstance<py::bool_>(value);
  if (!py::isinstance<Expected>(value) || (is_bool && !std::is_same_v<Expected, py::bool_>)) {
    throw py::type_error(str_cat("option '", name, "' expects ", expected, ", got ",
                                 std::string(py::str(value.get_type().attr("__name__")))));
  }
  return value.cast<T>();
}

bool bool_option(const py::handle& value, const std::string& name) {
  return typed_option<bool, py::bool_>(value, name, "True or False");
}

int int_option(const py::handle& value, const std::string& name) {
  return typed_option<int, py::int_>(value, name, "an int");
}

// Keyword options (Session(**options), flags(**options)) as Flags; unknown names are a ValueError
// listing the known ones.
Flags flags_from_options(const py::dict& options) {
  Flags flags;
  for (const auto& [key, value] : options) {
    const std::string name = py::str(key);
    if (name == "onednn") {
      flags.onednn = bool_option(value, name);
    } else if (name == "blas") {
      flags.blas = bool_option(value, name);
    } else if (name == "native") {
      flags.native = bool_option(value, name);
    } else if (name == "precision" || name == "conv_precision" || name == "matmul_precision") {
      const Precision precision =
          parse_precision(typed_option<std::string, py::str>(value, name, "'fp32' or 'bf16'"),
                          str_cat("option '", name, "'"));
      if (name != "matmul_precision") flags.conv_precision = precision;
      if (name != "conv_precision") flags.matmul_precision = precision;
    } else if (name == "deterministic") {
      flags.deterministic = bool_option(value, name);
    } else if (name == "autotune") {
      flags.autotune = int_option(value, name);
    } else if (name == "verbose") {
      flags.verbose = int_option(value, name);
    } else if (name == "onednn_verbose") {
      flags.onednn_verbose = int_option(value, name);
    } else if (name == "blas_verbose") {
      flags.blas_verbose = int_option(value, name);
    } else if (name == "verbose_sink") {
      flags.verbose_sink = sink_from_python(value);
    } else {
      throw py::value_error(str_cat("unknown option '", name,
                                    "' (known: onednn, blas, native, precision, conv_precision, "
                                    "matmul_precision, deterministic, autotune, verbose, onednn_verbose, "
                                    "blas_verbose, verbose_sink)"));
    }
  }
  flags.validate();
  return flags;
}

// A ScopedFlags as a Python context manager: the guard lives from __enter__ to __exit__, on the
// thread that entered.
class FlagsContext {
 public:
  explicit FlagsContext(Flags flags) : flags_(std::move(flags)) {}
  void enter() {
    if (guard_) throw py::value_error("this flags context is already entered; create a new one to nest");
    guard_ = std::make_unique<ScopedFlags>(flags_);
  }
  void exit() { guard_.reset(); }

 private:
  Flags flags_;
  std::unique_ptr<ScopedFlags> guard_;
};

py::list value_infos(const std::vector<ValueInfo>& infos) {
  py::list list;
  for (const ValueInfo& info : infos) {
    py::list shape;
    for (const Dim& dim : info.shape) {
      if (dim.is_known()) {
        shape.append(dim.value);
      } else {
        shape.append(dim.symbol.empty() ? py::object(py::none()) : py::object(py::str(dim.symbol)));
      }
    }
    py::dict entry;
    entry["name"] = info.name;
    entry["dtype"] = std::string(dtype_name(info.dtype));
    entry["shape"] = info.has_shape ? py::object(shape) : py::object(py::none());
    list.append(entry);
  }
  return list;
}

py::dict run_session(Session& session, const py::dict& inputs) {
  TensorMap tensors;
  std::vector<py::object> keep;
  for (const auto& [key, value] : inputs) {
    if (!py::isinstance<py::str>(key)) throw py::type_error("input names must be str");
    const std::string name = py::str(key);
    tensors[name] = tensor_from_array(value, str_cat("input '", name, "'"), keep);
  }
  TensorMap outputs;
  {
    py::gil_scoped_release release;  // runs on other threads, and verbose callbacks, may proceed
    outputs = session.run(tensors);
  }
  py::dict result;
  for (const ValueInfo& info : session.outputs())
    result[py::str(info.name)] = array_from_tensor(outputs.at(info.name), info.name);
  return result;
}

std::string parallel_info() {
  std::ostringstream text;
  text << "kiln " << kiln_version() << "\n";
  text << "intra-op threads: " << get_num_threads() << " (from " << num_threads_source() << ")\n";
  text << "cores available: " << available_cores() << "\n";
  text << "OpenMP: "
       << (backends::openmp::is_available() ? std::to_string(backends::openmp::version()) : "not built")
       << "\n";
  text << "oneDNN: " << backends::onednn::version() << " (OpenMP runtime)\n";
  text << "BLAS: " << backends::blas::library() << "\n";
  text << "CPU: " << cpu_capability().description() << ", ISA in effect " << isa_name(isa_in_effect())
       << " (from " << isa_choice().source << ")\n";
  text << "precedence: set_num_threads > KILN_NUM_THREADS > OMP_NUM_THREADS > cores\n";
  return text.str();
}

}  // namespace
}  // namespace kiln

PYBIND11_MODULE(_kiln, m) {
  using namespace kiln;
  m.doc() = "kiln's C++ library; use the `kiln` package";

  py::register_exception_translator([](std::exception_ptr pointer) {
    try {
      if (pointer) std::rethrow_exception(pointer);
    } catch (const Error& error) {
      switch (error.kind()) {
        case ErrorKind::invalid_argument:
        case ErrorKind::invalid_model:
          PyErr_SetString(PyExc_ValueError, error.what());
          return;
        case ErrorKind::type_mismatch:
          PyErr_SetString(PyExc_TypeError, error.what());
          return;
        case ErrorKind::not_implemented:
          PyErr_SetString(PyExc_NotImplementedError, error.what());
          return;
        case ErrorKind::runtime:
          PyErr_SetString(PyExc_RuntimeError, error.what());
          return;
      }
    }
  });

  m.def("version", [] { return std::string(kiln_version()); });
  m.def("build_configuration", [] { return std::string(build_configuration()); });
  m.def("set_num_threads", &set_num_threads, py::arg("threads"));
  m.def("get_num_threads", &get_num_threads);
  m.def("parallel_info", &parallel_info);
  m.def("cli", &run_cli, py::arg("arguments"), "runs `kiln ARGUMENTS...`; returns the exit code");

  py::class_<Session>(m, "Session")
      .def(py::init([](const std::string& path, const py::dict& options) {
             const Flags flags = flags_from_options(options);
             py::gil_scoped_release release;
             return std::make_unique<Session>(path, flags);
           }),
           py::arg("path"), py::arg("options") = py::dict())
      .def("run", &run_session, py::arg("inputs"))
      .def_property_readonly("inputs", [](const Session& session) { return value_infos(session.inputs()); })
      .def_property_readonly("outputs", [](const Session& session) { return value_infos(session.outputs()); })
      .def(
          "explain",
          [](Session& session, const py::dict& inputs) {
            // Plan records for these inputs: (op, node, backend, kernel, note, rejected reasons).
            std::vector<py::object> keep;
            std::vector<Tensor> ordered;
            for (const ValueInfo& info : session.inputs()) {
              if (!inputs.contains(info.name))
                throw py::value_error(str_cat("missing input '", info.name, "'"));
              ordered.push_back(
                  tensor_from_array(inputs[py::str(info.name)], str_cat("input '", info.name, "'"), keep));
            }
            const std::shared_ptr<const Plan> plan = session.plan_for(ordered);
            py::list steps;
            for (const PlanStep& step : plan->steps()) {
              const StepRecord& r = step.record;
              py::dict entry;
              entry["op"] = r.op_type;
              entry["node"] = r.node_name;
              entry["backend"] = r.backend;
              entry["kernel"] = r.kernel;
              entry["note"] = r.note;
              py::list rejected;
              for (const RejectedCandidate& candidate : r.rejected)
                rejected.append(py::make_tuple(candidate.backend, candidate.reason));
              entry["rejected"] = rejected;
              steps.append(entry);
            }
            return steps;
          },
          py::arg("inputs"));

  py::class_<FlagsContext>(m, "FlagsContext")
      .def(
          "__enter__",
          [](FlagsContext& context) {
            context.enter();
            return &context;
          },
          py::return_value_policy::reference)
      .def("__exit__", [](FlagsContext& context, const py::args&) {
        context.exit();
        return false;
      });

  py::module_ b = m.def_submodule("backends", "kiln::backends");
  b.def("flags", [](const py::kwargs& options) { return FlagsContext(flags_from_options(options)); });
  b.def("set_flags", [](const py::kwargs& options) { set_flags(flags_from_options(options)); });
  b.def("reset_flags", &reset_flags);
  b.def("current", [] {
    const Settings s = current_settings();
    py::dict d;
    d["onednn"] = s.backend_enabled(kOnednnIndex);
    d["blas"] = s.backend_enabled(kBlasIndex);
    d["native"] = true;
    d["conv_precision"] = precision_name(s.conv_precision);
    d["matmul_precision"] = precision_name(s.matmul_precision);
    d["deterministic"] = s.deterministic;
    d["autotune"] = s.autotune;
    d["verbose"] = s.verbose;
    d["onednn_verbose"] = s.onednn_verbose;
    d["blas_verbose"] = s.blas_verbose;
    return d;
  });
  b.def("onednn_version", &backends::onednn::version);
  b.def("blas_version", &backends::blas::version);
  b.def("blas_library", &backends::blas::library);
  b.def("native_version", &backends::native::version);
  b.def("onednn_available", &backends::onednn::is_available);
  b.def("blas_available", &backends::blas::is_available);
  b.def("primitive_cache_size", &backends::onednn::primitive_cache::size);
  b.def("primitive_cache_capacity", &backends::onednn::primitive_cache::capacity);
  b.def("set_primitive_cache_capacity", &backends::onednn::primitive_cache::set_capacity,
        py::arg("capacity"));
  b.def("clear_primitive_cache", &backends::onednn::primitive_cache::clear);
  b.def("cpu_capability", &backends::cpu::capability);
  b.def("cpu_best_isa", &backends::cpu::best_isa);
  b.def("cpu_isa", &backends::cpu::isa);
  b.def("cpu_isa_source", &backends::cpu::isa_source);
  b.def("cpu_set_max_isa", &backends::cpu::set_max_isa, py::arg("isa"));
  b.def("onednn_isa", &backends::onednn::isa);
  b.def("openmp_version", &backends::openmp::version);
}
