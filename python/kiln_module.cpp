// kiln._kiln: the C++ library as seen from Python. C-contiguous input arrays are read in place,
// others are copied into contiguous ones first; outputs are arrays over kiln's storage (a capsule
// keeps it alive), which the executor has already cloned where it would be shared. kiln errors become
// ValueError, TypeError, NotImplementedError or RuntimeError by their kind. The `kiln` package
// (python/kiln/*.py) builds the user-facing names on top of this.
#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <type_traits>

#include "backends/backends.h"
#include "backends/choice_cache.h"
#include "backends/parallel_info.h"
#include "backends/prefer.h"
#include "backends/sdpa.h"
#include "backends/selection.h"
#include "backends/setting_aliases.h"
#include "core/error.h"
#include "core/version.h"
#include "graph/compare.h"
#include "graph/onnx_import.h"
#include "graph/random_input.h"
#include "graph/session.h"
#include "ops/einsum_path.h"
#include "python/profiler_bindings.h"
#include "python/tidy_bindings.h"
#include "runtime/cpu_info.h"
#include "runtime/interop.h"
#include "runtime/thread_budget.h"
#include "runtime/threads.h"
#include "tools/cli.h"
#include "tools/explain_report.h"
#include "tools/setting_options.h"

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
  // A byte-swapped array ('>f4' here) has the same dtype name; its values are converted to this
  // machine's byte order (a copy) instead of being read with their bytes swapped.
  if (!array.dtype().attr("isnative").cast<bool>()) {
    array =
        py::array::ensure(array.attr("astype")(array.dtype().attr("newbyteorder")("=")), py::array::c_style);
  }
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

// A model input from Python: a numpy array (a tensor), a list or tuple of arrays (a sequence), or
// None (an empty optional). `declared` (null for a name the model lacks) gives an empty list's dtype.
Tensor value_from_python(const py::handle& object, const std::string& what, const ValueInfo* declared,
                         std::vector<py::object>& keep) {
  if (object.is_none()) return {};
  if (!py::isinstance<py::list>(object) && !py::isinstance<py::tuple>(object))
    return tensor_from_array(object, what, keep);
  std::vector<Tensor> elements;
  for (const py::handle& element : object) {
    elements.push_back(tensor_from_array(element, str_cat(what, " element ", elements.size()), keep));
  }
  const DType dtype = !elements.empty() ? elements[0].dtype() : declared ? declared->dtype : DType::f32;
  try {
    return Tensor::sequence(dtype, std::move(elements));
  } catch (const Error& error) {
    throw py::type_error(str_cat(what, ": ", error.message()));
  }
}

// A model output for Python: an array, a list of arrays (a sequence), or None (an empty optional).
py::object python_from_value(const Tensor& value, const std::string& name) {
  if (!value.defined()) return py::none();
  if (!value.is_sequence()) return array_from_tensor(value, name);
  py::list elements;
  for (size_t i = 0; i < value.elements().size(); ++i)
    elements.append(array_from_tensor(value.elements()[i], str_cat(name, "[", i, "]")));
  return elements;
}

const ValueInfo* declared_input(const Session& session, const std::string& name) {
  for (const ValueInfo& info : session.inputs()) {
    if (info.name == name) return &info;
  }
  return nullptr;
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

// One keyword setting as Settings expects it, by the row's type: bool for switches, int for
// integers, a name for choices ('fp32'/'bf16', 'sequential'/'parallel'), a sink for verbose_sink.
int setting_value_from_python(const SettingSlot& slot, const py::handle& value, const std::string& name) {
  const bool is_bool = py::isinstance<py::bool_>(value);
  const auto wrong_type = [&](const char* expected) {
    return py::type_error(str_cat("setting '", name, "' expects ", expected, ", got ",
                                  std::string(py::str(value.get_type().attr("__name__")))));
  };
  switch (slot.row->type) {
    case SettingType::boolean:
      if (!is_bool) throw wrong_type("True or False");
      return value.cast<bool>() ? 1 : 0;
    case SettingType::integer:
      if (is_bool || !py::isinstance<py::int_>(value)) throw wrong_type("an int");
      return value.cast<int>();
    case SettingType::choice:
      if (!py::isinstance<py::str>(value)) throw wrong_type(choice_names(*slot.row).c_str());
      return parse_setting_value(slot, value.cast<std::string>(), str_cat("setting '", name, "'"));
    case SettingType::priority_list: {
      // A list of names in priority order, or the CLI's comma-separated text.
      if (py::isinstance<py::str>(value))
        return parse_setting_value(slot, value.cast<std::string>(), str_cat("setting '", name, "'"));
      if (!py::isinstance<py::list>(value) && !py::isinstance<py::tuple>(value))
        throw wrong_type(str_cat("a list of ", choice_names(*slot.row)).c_str());
      std::string text;
      for (const py::handle& item : value) {
        if (!py::isinstance<py::str>(item) || item.cast<std::string>().empty())
          throw wrong_type(str_cat("a list of ", choice_names(*slot.row)).c_str());
        text += str_cat(text.empty() ? "" : ",", item.cast<std::string>());
      }
      return parse_setting_value(slot, text, str_cat("setting '", name, "'"));
    }
    case SettingType::sink:
      break;
  }
  throw wrong_type("a value");
}

// Keyword settings (Session(**settings), settings(**settings)) as Settings; an unknown name is a
// ValueError listing every known one (the table's names and shorthands).
Settings settings_from_python(const py::dict& options) {
  Settings settings;
  for (const auto& [key, value] : options) {
    const std::string name = py::str(key);
    if (const SettingShorthand* shorthand = find_shorthand(name)) {
      for (std::string_view target : shorthand->targets) {
        const SettingSlot& slot = find_setting(target);
        settings.set(slot.slot, setting_value_from_python(slot, value, name));
      }
      continue;
    }
    const SettingSlot& slot = find_setting(name);
    if (slot.row->type == SettingType::sink) {
      settings.set_verbose_sink(sink_from_python(value));
    } else {
      settings.set(slot.slot, setting_value_from_python(slot, value, name));
    }
  }
  return settings;
}

// A ScopedSettings as a Python context manager: the guard lives from __enter__ to __exit__, on the
// thread that entered.
class SettingsContext {
 public:
  explicit SettingsContext(Settings settings) : settings_(std::move(settings)) {}
  void enter() {
    if (guard_) throw py::value_error("this settings context is already entered; create a new one to nest");
    guard_ = std::make_unique<ScopedSettings>(settings_);
  }
  void exit() { guard_.reset(); }

 private:
  Settings settings_;
  std::unique_ptr<ScopedSettings> guard_;
};

// A setting's value as Python sees it: bool, int, 'fp32'/'bf16', or a list of names.
py::object setting_to_python(const SettingSlot& slot, int value) {
  switch (slot.row->type) {
    case SettingType::boolean:
      return py::bool_(value != 0);
    case SettingType::choice:
      return py::str(setting_value_text(slot, value));
    case SettingType::priority_list: {
      py::list names;
      for (int choice : priority_list(value)) names.append(py::str(std::string(slot.row->choices[choice])));
      return names;
    }
    default:
      return py::int_(value);
  }
}

// Every value setting of a complete configuration as {name: value} (the sink is left out).
py::dict values_to_python(const Settings& settings) {
  py::dict values;
  for (const SettingSlot& slot : setting_slots()) {
    if (slot.row->type == SettingType::sink) continue;
    values[py::str(slot.name)] = setting_to_python(slot, settings.value(slot.slot));
  }
  return values;
}

// The settings table as Python dicts, one per setting (backends expanded).
py::list setting_rows() {
  py::list rows;
  for (const SettingSlot& slot : setting_slots()) {
    const SettingRow& row = *slot.row;
    py::dict entry;
    entry["name"] = slot.name;
    entry["type"] = std::string(setting_type_name(row.type));
    entry["default"] =
        row.type == SettingType::sink ? py::object(py::none()) : setting_to_python(slot, row.default_value);
    entry["min"] = row.min;
    entry["max"] = row.max;
    py::list choices;
    for (std::string_view choice : row.choices) choices.append(py::str(std::string(choice)));
    entry["choices"] = choices;
    entry["changes_plan"] = row.changes_plan;
    entry["backend"] =
        slot.backend >= 0 ? py::object(py::str(std::string(kBackendNames[slot.backend]))) : py::none();
    entry["row"] = std::string(row.name);
    entry["env"] = std::string(row.env);
    entry["help"] = slot.help;
    switch (row.cli) {
      case CliForm::disable:
        entry["cli"] = str_cat("--disable ", kBackendNames[slot.backend]);
        break;
      case CliForm::flag:
        entry["cli"] = "--" + slot.cli_name;
        break;
      case CliForm::value:
        entry["cli"] = row.type == SettingType::sink ? "--verbose-file" : "--" + slot.cli_name;
        break;
    }
    rows.append(entry);
  }
  return rows;
}

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
    entry["kind"] = std::string(value_kind_name(info.kind));
    entry["shape"] = info.has_shape ? py::object(shape) : py::object(py::none());
    list.append(entry);
  }
  return list;
}

// A session's inputs for explain, by name and in input order; `keep` holds the numpy arrays.
struct ExplainInputs {
  TensorMap by_name;
  std::vector<Tensor> ordered;
  std::vector<py::object> keep;
};

ExplainInputs explain_inputs(const Session& session, const py::dict& inputs) {
  ExplainInputs explained;
  for (const ValueInfo& info : session.inputs()) {
    if (!inputs.contains(info.name)) throw py::value_error(str_cat("missing input '", info.name, "'"));
    const Tensor tensor = value_from_python(inputs[py::str(info.name)], str_cat("input '", info.name, "'"),
                                            &info, explained.keep);
    explained.by_name[info.name] = tensor;
    explained.ordered.push_back(tensor);
  }
  return explained;
}

py::dict run_session(Session& session, const py::dict& inputs, const std::shared_ptr<RunControl>& control) {
  TensorMap tensors;
  std::vector<py::object> keep;
  for (const auto& [key, value] : inputs) {
    if (!py::isinstance<py::str>(key)) throw py::type_error("input names must be str");
    const std::string name = py::str(key);
    tensors[name] =
        value_from_python(value, str_cat("input '", name, "'"), declared_input(session, name), keep);
  }
  TensorMap outputs;
  {
    py::gil_scoped_release release;  // runs on other threads, and verbose callbacks, may proceed
    outputs = control ? session.run(tensors, *control) : session.run(tensors);
  }
  py::dict result;
  for (const ValueInfo& info : session.outputs())
    result[py::str(info.name)] = python_from_value(outputs.at(info.name), info.name);
  return result;
}

// Runs started from Python and not finished: the interpreter must not finish before they drop
// their references (kiln/__init__.py waits for them at exit).
struct AsyncRuns {
  std::mutex mutex;
  std::condition_variable finished;
  int in_flight = 0;
};
AsyncRuns& async_runs() {
  static AsyncRuns* const runs = new AsyncRuns;  // outlives every static destructor
  return *runs;
}

// Python references a task holds (one run in AsyncRuns); released under the GIL on whichever
// thread drops them.
class PythonReferences {
 public:
  explicit PythonReferences(std::vector<py::object> objects) : objects_(std::move(objects)) {
    std::lock_guard lock(async_runs().mutex);
    ++async_runs().in_flight;
  }
  ~PythonReferences() {
    {
      py::gil_scoped_acquire gil;
      objects_.clear();
    }
    {
      std::lock_guard lock(async_runs().mutex);
      --async_runs().in_flight;
    }
    async_runs().finished.notify_all();
  }

 private:
  std::vector<py::object> objects_;
};

void wait_for_async_runs() {
  py::gil_scoped_release release;  // the runs need the GIL to drop their references
  std::unique_lock lock(async_runs().mutex);
  async_runs().finished.wait(lock, [] { return async_runs().in_flight == 0; });
}

// A run in flight, as Python sees it: its outputs become arrays when it is waited for.
struct PythonRunFuture {
  Future<TensorMap> future;
  py::object session;  // the Python Session, for its output names

  py::dict wait() const {
    TensorMap outputs;
    {
      py::gil_scoped_release release;  // the run, and any verbose callback it makes, needs the GIL
      outputs = future.wait();
    }
    const Session& owner = session.cast<const Session&>();
    py::dict result;
    for (const ValueInfo& info : owner.outputs())
      result[py::str(info.name)] = python_from_value(outputs.at(info.name), info.name);
    return result;
  }
};

PythonRunFuture run_session_async(const py::object& self, const py::dict& inputs,
                                  std::shared_ptr<RunControl> control) {
  Session& session = self.cast<Session&>();
  TensorMap tensors;
  std::vector<py::object> keep{self};  // the session and every input array outlive the run
  for (const auto& [key, value] : inputs) {
    if (!py::isinstance<py::str>(key)) throw py::type_error("input names must be str");
    const std::string name = py::str(key);
    tensors[name] =
        value_from_python(value, str_cat("input '", name, "'"), declared_input(session, name), keep);
  }
  auto references = std::make_shared<PythonReferences>(std::move(keep));
  return PythonRunFuture{session.run_async(std::move(tensors), std::move(references), std::move(control)), self};
}

}  // namespace
}  // namespace kiln

PYBIND11_MODULE(_kiln, m) {
  using namespace kiln;
  m.doc() = "kiln's C++ library; use the `kiln` package";

  // A cancelled run raises kiln.CancelledError (a RuntimeError); an expired one TimeoutError.
  static PyObject* const cancelled_error = PyErr_NewExceptionWithDoc(
      "kiln.CancelledError", "A run was cancelled through its RunControl.", PyExc_RuntimeError, nullptr);
  m.attr("CancelledError") = py::handle(cancelled_error);
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
        case ErrorKind::cancelled:
          PyErr_SetString(cancelled_error, error.what());
          return;
        case ErrorKind::deadline_exceeded:
          PyErr_SetString(PyExc_TimeoutError, error.what());
          return;
      }
    }
  });

  m.def("version", [] { return std::string(kiln_version()); });
  m.def("build_configuration", [] { return std::string(build_configuration()); });
  m.def("set_num_threads", &set_num_threads, py::arg("threads"));
  m.def("get_num_threads", &get_num_threads);
  m.def("num_threads_source", &num_threads_source);
  m.def("parallel_info", [] { return parallel_info_text(parallel_info()); });
  m.def("wait_for_async_runs", &wait_for_async_runs);
  m.def("set_num_interop_threads", &set_num_interop_threads, py::arg("threads"));
  m.def("get_num_interop_threads", &get_num_interop_threads);
  m.def("num_interop_threads_source", &num_interop_threads_source);
  m.def("set_thread_budget", &set_thread_budget, py::arg("threads"));
  m.def("get_thread_budget", &get_thread_budget);
  m.def("thread_budget_source", &thread_budget_source);

  py::class_<PythonRunFuture>(m, "RunFuture")
      .def("wait", &PythonRunFuture::wait)
      .def("done", [](const PythonRunFuture& future) { return future.future.ready(); });
  m.def("cli", &run_cli, py::arg("arguments"), "runs `kiln ARGUMENTS...`; returns the exit code");
  m.def(
      "compare",
      [](const std::string& a_path, const std::string& b_path, const py::object& inputs,
         const py::dict& a_settings, const py::dict& b_settings) {
        const Model a = load_onnx_model(a_path);
        const Model b = b_path.empty() ? a : load_onnx_model(b_path);
        TensorMap tensors;
        std::vector<py::object> keep;
        if (!inputs.is_none()) {
          for (const auto& [key, value] : py::cast<py::dict>(inputs)) {
            const std::string name = py::str(key);
            tensors[name] = tensor_from_array(value, str_cat("input '", name, "'"), keep);
          }
        }
        std::mt19937 rng(kRandomInputSeed);
        for (const ValueInfo& input : a.graph.inputs) {
          if (!tensors.count(input.name)) tensors[input.name] = random_input(input, 1, rng);
        }
        const Settings for_a = settings_from_python(a_settings);
        const Settings for_b = settings_from_python(b_settings);
        std::vector<ValueComparison> results;
        {
          py::gil_scoped_release release;
          results = compare_runs(a, for_a, b, for_b, tensors);
        }
        py::list rows;
        for (const ValueComparison& r : results) {
          py::dict row;
          row["name"] = r.name;
          row["b_name"] = r.b_name;
          row["shape"] = r.shape;
          row["output"] = r.is_output;
          row["sqnr_db"] = r.sqnr_db;
          row["max_abs_error"] = r.max_abs_error;
          row["mean_abs_error"] = r.mean_abs_error;
          rows.append(row);
        }
        return rows;
      },
      py::arg("a"), py::arg("b"), py::arg("inputs"), py::arg("a_settings"), py::arg("b_settings"));

  py::class_<RunControl, std::shared_ptr<RunControl>>(
      m, "RunControl",
      "Stops runs given it as control=: cancel() from any thread, or set_timeout(seconds). A run checks it "
      "when it starts, after planning and before every step, and raises kiln.CancelledError or TimeoutError.")
      .def(py::init<>())
      .def("cancel", &RunControl::cancel, "Stops every run using this control at its next step; safe from any thread.")
      .def("cancelled", &RunControl::cancelled)
      .def(
          "set_timeout",
          [](RunControl& control, double seconds) {
            KILN_CHECK(seconds >= 0 && seconds < 1e9, invalid_argument,
                       "a timeout is a number of seconds from 0 to 1e9, got ", seconds);
            control.set_timeout(std::chrono::duration_cast<std::chrono::nanoseconds>(
                std::chrono::duration<double>(seconds)));
          },
          py::arg("seconds"), "Runs using this control fail once `seconds` from now have passed.");

  py::class_<Session>(m, "Session")
      .def(py::init([](const std::string& path, const py::dict& settings) {
             const Settings changes = settings_from_python(settings);
             py::gil_scoped_release release;
             return std::make_unique<Session>(path, changes);
           }),
           py::arg("path"), py::arg("settings") = py::dict())
      .def("run", &run_session, py::arg("inputs"), py::arg("control") = nullptr)
      .def("run_async", &run_session_async, py::arg("inputs"), py::arg("control") = nullptr)
      .def_property_readonly("inputs", [](const Session& session) { return value_infos(session.inputs()); })
      .def_property_readonly("outputs", [](const Session& session) { return value_infos(session.outputs()); })
      .def(
          "explain",
          [](Session& session, const py::dict& inputs, int profile) {
            // The plan for these inputs as data: what `kiln explain` prints, per step.
            ExplainInputs explained = explain_inputs(session, inputs);
            const std::shared_ptr<const Plan> plan = session.plan_for(explained.ordered);
            const std::vector<double> step_ms = profile_steps(session, explained.by_name, *plan, profile);
            // The steps of `kiln explain --json`, from the same writer: the same fields, always.
            const std::string json = explain_json(*plan, "", 0, step_ms, profile);
            const py::object steps = py::module_::import("json").attr("loads")(json)["steps"];
            return steps;
          },
          py::arg("inputs"), py::arg("profile") = 0)
      .def(
          "explain_text",
          [](Session& session, const py::dict& inputs, int profile) {
            // The same report `kiln explain` prints, from the same formatter.
            ExplainInputs explained = explain_inputs(session, inputs);
            const std::shared_ptr<const Plan> plan = session.plan_for(explained.ordered);
            const std::vector<double> step_ms = profile_steps(session, explained.by_name, *plan, profile);
            return explain_text(*plan, str_cat("plan (plan settings ", settings_summary(), ")"), step_ms,
                                profile);
          },
          py::arg("inputs"), py::arg("profile") = 0);

  py::class_<SettingsContext>(m, "SettingsContext")
      .def(
          "__enter__",
          [](SettingsContext& context) {
            context.enter();
            return &context;
          },
          py::return_value_policy::reference)
      .def("__exit__", [](SettingsContext& context, const py::args&) {
        context.exit();
        return false;
      });

  py::module_ b = m.def_submodule("backends", "kiln::backends");
  b.def("settings",
        [](const py::kwargs& settings) { return SettingsContext(settings_from_python(settings)); });
  b.def("set_settings", [](const py::kwargs& settings) { set_settings(settings_from_python(settings)); });
  b.def("setting_rows", &setting_rows);
  b.def("current", [] { return values_to_python(current_settings()); });
  b.def("global_values", [] { return values_to_python(global_settings()); });
  b.def("backend_list", [] {
    py::list list;
    for (const backends::BackendInfo& info : backends::list()) {
      py::dict entry;
      entry["name"] = info.name;
      entry["built"] = info.built;
      entry["available"] = info.available;
      entry["version"] = info.version;
      list.append(entry);
    }
    return list;
  });
  b.def("clear_choice_cache", [] { choice_cache().clear(); });
  b.def("choice_cache_size", [] { return choice_cache().size(); });
  b.def("refusal_kinds", [] {
    std::vector<std::string> names;
    for (RefusalKind kind : all_refusal_kinds()) names.emplace_back(refusal_kind_name(kind));
    return names;
  });
  b.def("blas_library", &backends::blas::library);
  b.def("allocator", [] { return std::string(backends::allocator().name()); });
  b.def(
      "set_allocator", [](const std::string& name) { backends::set_allocator(name); }, py::arg("name"));
  b.def("registered_allocators", &registered_allocators);
  b.def("allocation_counts", [] {
    const AllocationCounts counts = counting_allocator_counts();
    py::dict d;
    d["allocations"] = counts.allocations;
    d["bytes"] = counts.bytes;
    d["live_bytes"] = counts.live_bytes;
    d["peak_live_bytes"] = counts.peak_live_bytes;
    return d;
  });
  b.def("reset_allocation_counts", &reset_counting_allocator_counts);
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
  // PyTorch's names for settings (backends/setting_aliases.h), read on this thread and set globally:
  // booleans as bool, other values as the alias names them.
  b.def(
      "get_alias",
      [](const std::string& name) -> py::object {
        const SettingAlias* alias = find_alias(name);
        KILN_CHECK(alias != nullptr, invalid_argument, "unknown alias '", name, "' (known: ", alias_names(),
                   ")");
        const std::string text = backends::get_text(name);
        if (find_setting(alias->setting).row->type == SettingType::boolean) return py::bool_(text == "1");
        return py::str(text);
      },
      py::arg("name"));
  b.def(
      "set_alias",
      [](const std::string& name, const py::object& value) {
        KILN_CHECK(find_alias(name) != nullptr, invalid_argument, "unknown alias '", name,
                   "' (known: ", alias_names(), ")");
        backends::set_text(name, py::isinstance<py::bool_>(value) ? (value.cast<bool>() ? "1" : "0")
                                                                  : py::str(value).cast<std::string>());
      },
      py::arg("name"), py::arg("value"));
  b.def("aliases", [] {
    py::list rows;
    for (const SettingAlias& alias : kSettingAliases) {
      py::dict row;
      row["name"] = alias.name;
      row["setting"] = alias.setting;
      row["mirrors"] = alias.mirrors;
      rows.append(row);
    }
    return rows;
  });
  b.def(
      "einsum_path",
      [](const std::string& equation, const std::vector<Shape>& shapes, const std::string& strategy,
         bool optimize) {
        const SettingSlot& slot = find_setting("einsum_strategy");
        const auto chosen = static_cast<EinsumStrategy>(parse_setting_value(slot, strategy, "strategy"));
        const EinsumPath path = einsum_path(parse_einsum(equation, shapes), chosen, optimize);
        py::list order;
        for (const EinsumContraction& step : path.steps) order.append(py::tuple(py::cast(step.positions)));
        py::dict result;
        result["path"] = order;
        result["strategy"] = path.strategy;
        result["naive_flops"] = path.naive_flops;
        result["optimized_flops"] = path.optimized_flops;
        result["largest_intermediate"] = path.largest_intermediate;
        result["text"] = path.describe();
        return result;
      },
      py::arg("equation"), py::arg("shapes"), py::arg("strategy"), py::arg("optimize"));
  b.def(
      "prefer_context",
      [](const std::vector<std::string>& names, const std::vector<std::string>& families) {
        const std::vector<std::string_view> name_views(names.begin(), names.end());
        const std::vector<std::string_view> family_views(families.begin(), families.end());
        return SettingsContext(backends::prefer_setting(name_views, family_views));
      },
      py::arg("names"), py::arg("families"));
  b.def(
      "set_prefer",
      [](const std::vector<std::string>& names, const std::vector<std::string>& families) {
        const std::vector<std::string_view> name_views(names.begin(), names.end());
        const std::vector<std::string_view> family_views(families.begin(), families.end());
        backends::set_prefer(name_views, family_views);
      },
      py::arg("names"), py::arg("families"));
  b.def("preferred", &backends::preferred, py::arg("family"));
  b.def("op_families", &backends::op_families);
  b.def("preferred_linalg_library", &backends::preferred_linalg_library);
  b.def("set_preferred_linalg_library", &backends::set_preferred_linalg_library, py::arg("library"));
  b.def(
      "sdpa_kernels_context",
      [](const std::vector<std::string>& kernels, bool set_priority) {
        const std::vector<std::string_view> names(kernels.begin(), kernels.end());
        return SettingsContext(backends::sdpa::kernels_setting(names, set_priority));
      },
      py::arg("kernels"), py::arg("set_priority") = false);
  b.def("sdpa_set_enabled", &backends::sdpa::set_enabled, py::arg("kernel"), py::arg("enabled"));
  b.def("sdpa_enabled", &backends::sdpa::enabled, py::arg("kernel"));
  b.def(
      "sdpa_why_not",
      [](const std::string& kernel, const Shape& query, const Shape& key, const Shape& value,
         const std::string& dtype, const std::optional<Shape>& mask, const std::string& mask_dtype,
         bool is_causal, std::optional<float> scale) {
        backends::sdpa::Params params{
            .query = query, .key = key, .value = value, .dtype = dtype_from_numpy(py::dtype(dtype), "query")};
        params.mask = mask;
        params.mask_dtype = dtype_from_numpy(py::dtype(mask_dtype), "attn_mask");
        params.is_causal = is_causal;
        params.scale = scale;
        return backends::sdpa::why_not(kernel, params);
      },
      py::arg("kernel"), py::arg("query"), py::arg("key"), py::arg("value"), py::arg("dtype"),
      py::arg("mask"), py::arg("mask_dtype"), py::arg("is_causal"), py::arg("scale"));
  b.def(
      "sdpa_attention",
      [](const py::handle& query, const py::handle& key, const py::handle& value, const py::handle& mask,
         bool is_causal, std::optional<float> scale) {
        std::vector<py::object> keep;
        const Tensor q = tensor_from_array(query, "query", keep);
        const Tensor k = tensor_from_array(key, "key", keep);
        const Tensor v = tensor_from_array(value, "value", keep);
        const Tensor m = mask.is_none() ? Tensor() : tensor_from_array(mask, "attn_mask", keep);
        std::string kernel;
        Tensor out;
        {
          py::gil_scoped_release release;
          out = backends::sdpa::attention(q, k, v, m, is_causal, scale, &kernel);
        }
        return py::make_tuple(array_from_tensor(out, "output"), kernel);
      },
      py::arg("query"), py::arg("key"), py::arg("value"), py::arg("mask"), py::arg("is_causal"),
      py::arg("scale"));

  bind_profiler(m);
  bind_tidy(m);
}
