#include "python/tidy_pattern_bindings.h"

#include <pybind11/stl.h>

#include <memory>

#include "core/error.h"
#include "tidy/corrected_patterns.h"
#include "tidy/kiln_patterns.h"
#include "tidy/torchtidy_patterns.h"

namespace py = pybind11;

namespace kiln {
namespace {

// The tree a pattern walks, built once per trace (O(events)); events are (tree, index) handles, so
// parent, children, next and previous are O(1) and no event is copied.
struct PatternTree {
  explicit PatternTree(py::object owner_object)
      : owner(std::move(owner_object)),
        trace(owner.cast<const profiler::Trace&>()),
        tree(trace),
        context(tree) {}

  py::object owner;  // the Trace's Python object: keeps it alive
  const profiler::Trace& trace;
  tidy::EventTree tree;
  tidy::TidyContext context;
};

struct PatternEvent {
  std::shared_ptr<PatternTree> tree;
  tidy::EventIndex index = tidy::kNoEvent;

  const profiler::TraceEvent& event() const { return tree->tree.event(index); }
};

py::object event_or_none(const std::shared_ptr<PatternTree>& tree, tidy::EventIndex index) {
  if (index == tidy::kNoEvent) return py::none();
  return py::cast(PatternEvent{tree, index});
}

py::list events_of(const std::shared_ptr<PatternTree>& tree, std::span<const tidy::EventIndex> indices) {
  py::list list(indices.size());
  for (size_t i = 0; i < indices.size(); ++i) list[i] = py::cast(PatternEvent{tree, indices[i]});
  return list;
}

py::tuple shapes_tuple(const std::vector<Shape>& shapes) {
  py::tuple tuple(shapes.size());
  for (size_t i = 0; i < shapes.size(); ++i) tuple[i] = py::tuple(py::cast(shapes[i]));
  return tuple;
}

// TorchTidy's event tags for the kinds PyTorch's profiler has; kiln's own kinds by name.
const char* tag_of(const profiler::TraceEvent& event) {
  switch (event.kind) {
    case profiler::EventKind::op:
    case profiler::EventKind::annotation:
      return "TorchOp";
    case profiler::EventKind::python:
      return "PyCall";
    case profiler::EventKind::memory:
      return "Allocation";
    case profiler::EventKind::other:
      return "Kineto";
    default:
      return profiler::kind_name(event.kind);
  }
}

// Every built-in pattern (TorchTidy's, kiln's corrections, kiln's runtime patterns) or the NamePattern
// of `regex`.
std::vector<std::unique_ptr<tidy::Pattern>> builtins(int64_t tiny_step_us) {
  std::vector<std::unique_ptr<tidy::Pattern>> patterns = tidy::torchtidy_patterns();
  for (auto& pattern : tidy::kiln_patterns(tiny_step_us * 1000)) patterns.push_back(std::move(pattern));
  for (auto& pattern : tidy::corrected_patterns()) patterns.push_back(std::move(pattern));
  return patterns;
}

tidy::Fix fix_from(const py::handle& fix) {
  tidy::Fix result;
  result.kind = tidy::fix_kind_from_name(py::cast<std::string>(fix["kind"]));
  result.what = py::cast<std::string>(fix["what"]);
  for (const auto& [name, value] : py::cast<py::dict>(fix["settings"]))
    result.settings.emplace_back(py::str(name), py::str(value));
  for (const py::handle step : fix["steps"]) result.steps.push_back(py::cast<tidy::EventIndex>(step));
  result.torch_fix = py::cast<std::string>(fix["torch_fix"]);
  return result;
}

}  // namespace

tidy::PatternResult pattern_result_from(const py::handle& result) {
  tidy::PatternResult pattern;
  pattern.name = py::cast<std::string>(result["name"]);
  pattern.description = py::cast<std::string>(result["description"]);
  pattern.url = py::cast<std::string>(result["url"]);
  if (!result["skip"].is_none()) pattern.skip = py::cast<std::string>(result["skip"]);
  pattern.failure = py::cast<std::string>(result["failure"]);
  pattern.matched = py::cast<std::vector<tidy::EventIndex>>(result["matched"]);
  pattern.messages = py::cast<std::vector<std::string>>(result["messages"]);
  pattern.details = py::cast<std::vector<std::string>>(result["details"]);
  pattern.reasons = py::cast<std::vector<std::string>>(result["reasons"]);
  for (const py::handle fix : result["fixes"]) {
    pattern.fixes.push_back(fix.is_none() ? tidy::Fix{tidy::Fix::Kind::none, {}, {}, {}, "no fix declared"}
                                          : fix_from(fix));
  }
  pattern.summary = py::cast<std::string>(result["summary"]);
  return pattern;
}

void bind_tidy_patterns(py::module_& t) {
  py::class_<PatternTree, std::shared_ptr<PatternTree>>(t, "EventTree")
      .def(py::init([](py::object trace) {
             KILN_CHECK(
                 py::isinstance(trace, py::module_::import("kiln._kiln").attr("profiler").attr("Trace")),
                 invalid_argument, "EventTree: expected a kiln.profiler Trace, got ",
                 py::str(py::type::of(trace).attr("__name__")).cast<std::string>());
             return std::make_shared<PatternTree>(std::move(trace));
           }),
           py::arg("trace"))
      .def_property_readonly("trace", [](const PatternTree& tree) { return tree.owner; })
      .def("__len__", [](const PatternTree& tree) { return tree.tree.size(); })
      .def("event",
           [](const std::shared_ptr<PatternTree>& tree, tidy::EventIndex index) {
             KILN_CHECK(index < tree->tree.size(), invalid_argument, "EventTree.event: index ", index, " of ",
                        tree->tree.size(), " events");
             return PatternEvent{tree, index};
           })
      .def("roots",
           [](const std::shared_ptr<PatternTree>& tree) { return events_of(tree, tree->tree.roots()); })
      .def(
          "depth_first",
          [](const std::shared_ptr<PatternTree>& tree) { return events_of(tree, tree->context.depth_first); })
      .def("breadth_first",
           [](const std::shared_ptr<PatternTree>& tree) {
             return events_of(tree, tree->context.breadth_first);
           })
      // The trace's facts the built-in patterns read (tidy/pattern.h's TidyContext).
      .def_property_readonly("source", [](const PatternTree& tree) { return tree.trace.source; })
      .def_property_readonly("from_pytorch",
                             [](const PatternTree& tree) { return tree.context.from_pytorch; })
      .def_property_readonly("with_stack", [](const PatternTree& tree) { return tree.context.with_stack; })
      .def_property_readonly("record_shapes",
                             [](const PatternTree& tree) { return tree.context.record_shapes; })
      .def_property_readonly("caller_frames",
                             [](const PatternTree& tree) { return tree.context.caller_frames; })
      .def_property_readonly("gpu_activity",
                             [](const PatternTree& tree) { return tree.context.gpu_activity; })
      .def_property_readonly("cuda_arches", [](const PatternTree& tree) { return tree.context.cuda_arches; })
      .def("allow_tf32_cublas",
           [](const PatternTree& tree, const PatternEvent& event) {
             return tree.context.allow_tf32_cublas(event.event());
           })
      .def("is_torch_op", [](const PatternTree& tree,
                             const PatternEvent& event) { return tree.context.is_torch_op(event.event()); })
      // A built-in pattern's skip reason (None: it runs) and its matches, as the report has them.
      .def(
          "builtin_matches",
          [](const std::shared_ptr<PatternTree>& tree, const std::string& name, const std::string& regex,
             int64_t tiny_step_us) {
            std::vector<std::unique_ptr<tidy::Pattern>> patterns;
            if (!regex.empty()) {
              patterns.push_back(tidy::name_pattern(regex));
            } else {
              patterns = builtins(tiny_step_us);
            }
            for (const auto& pattern : patterns) {
              if (regex.empty() && pattern->name() != name) continue;
              if (pattern->reads_kiln_steps() == tree->context.from_pytorch) {
                return py::make_tuple(
                    tree->context.from_pytorch
                        ? "a PyTorch trace: the pattern reads kiln's runs and plan steps"
                        : "a kiln trace: the pattern looks for PyTorch's operators and Python calls",
                    py::list());
              }
              const tidy::Reason skip = pattern->skip(tree->context);
              return py::make_tuple(skip ? py::object(py::str(*skip)) : py::object(py::none()),
                                    events_of(tree, pattern->matched_events(tree->context)));
            }
            fail(ErrorKind::invalid_argument, "no built-in pattern named '", name, "'");
          },
          py::arg("name"), py::arg("regex") = "", py::arg("tiny_step_us") = 20);
  t.def("builtin_patterns", [] {
    py::list rows;
    for (const auto& pattern : builtins(tidy::tidy_option("tiny_step_us").default_value)) {
      py::dict row;
      row["name"] = pattern->name();
      row["description"] = pattern->description();
      row["url"] = pattern->url();
      row["reads"] = pattern->reads_kiln_steps() ? "kiln" : "pytorch";
      rows.append(row);
    }
    return rows;
  });
  t.def("name_pattern_description",
        [](const std::string& regex) { return tidy::name_pattern(regex)->description(); });
  t.def("fix_kinds", [] {
    std::vector<std::string> kinds;
    for (const tidy::Fix::Kind kind : tidy::kFixKinds) kinds.emplace_back(tidy::fix_kind_name(kind));
    return kinds;
  });

  py::class_<PatternEvent>(t, "Event")
      .def_property_readonly("index", [](const PatternEvent& e) { return e.index; })
      .def_property_readonly("id", [](const PatternEvent& e) { return e.event().id; })
      .def_property_readonly("name", [](const PatternEvent& e) { return e.event().name; })
      .def_property_readonly("kind",
                             [](const PatternEvent& e) { return profiler::kind_name(e.event().kind); })
      .def_property_readonly("tag", [](const PatternEvent& e) { return tag_of(e.event()); })
      .def_property_readonly("category", [](const PatternEvent& e) { return e.event().category; })
      .def_property_readonly(
          "parent", [](const PatternEvent& e) { return event_or_none(e.tree, e.tree->tree.parent(e.index)); })
      .def_property_readonly(
          "children", [](const PatternEvent& e) { return events_of(e.tree, e.tree->tree.children(e.index)); })
      .def_property_readonly(
          "next", [](const PatternEvent& e) { return event_or_none(e.tree, e.tree->tree.next(e.index)); })
      .def_property_readonly(
          "previous",
          [](const PatternEvent& e) { return event_or_none(e.tree, e.tree->tree.previous(e.index)); })
      .def_property_readonly("root",
                             [](const PatternEvent& e) {
                               return PatternEvent{e.tree, e.tree->tree.root(e.index)};
                             })
      .def("siblings",
           [](const PatternEvent& e) {
             const std::span<const tidy::EventIndex> all = e.tree->tree.siblings(e.index);
             const size_t at = e.tree->tree.position(e.index);
             return py::make_tuple(events_of(e.tree, all.first(at)), events_of(e.tree, all.subspan(at + 1)));
           })
      .def_property_readonly("start_time_ns", [](const PatternEvent& e) { return e.event().start_ns; })
      .def_property_readonly("end_time_ns", [](const PatternEvent& e) { return e.event().end_ns; })
      .def_property_readonly("duration_time_ns",
                             [](const PatternEvent& e) { return e.event().duration_ns(); })
      .def_property_readonly("thread", [](const PatternEvent& e) { return e.event().thread; })
      .def_property_readonly("start_tid",
                             [](const PatternEvent& e) {
                               const uint32_t thread = e.event().thread;
                               return thread < e.tree->trace.threads.size()
                                          ? e.tree->trace.threads[thread].os_thread
                                          : int64_t{0};
                             })
      .def_property_readonly("input_shapes",
                             [](const PatternEvent& e) { return shapes_tuple(e.event().input_shapes); })
      .def_property_readonly("output_shapes",
                             [](const PatternEvent& e) { return shapes_tuple(e.event().output_shapes); })
      .def_property_readonly(
          "input_dtypes", [](const PatternEvent& e) { return py::tuple(py::cast(e.event().input_dtypes)); })
      .def_property_readonly(
          "output_dtypes", [](const PatternEvent& e) { return py::tuple(py::cast(e.event().output_dtypes)); })
      .def_property_readonly("file", [](const PatternEvent& e) { return e.event().file; })
      .def_property_readonly("line", [](const PatternEvent& e) { return e.event().line; })
      .def_property_readonly(
          "location",
          [](const PatternEvent& e) { return tidy::source_location(e.tree->tree, e.index).text(); })
      .def_property_readonly("attributes",
                             [](const PatternEvent& e) {
                               py::dict attributes;
                               for (const auto& [name, value] : e.event().attributes)
                                 attributes[py::str(name)] = value;
                               return attributes;
                             })
      .def("attribute",
           [](const PatternEvent& e, const std::string& name) -> py::object {
             const std::string* value = e.event().attribute(name);
             return value != nullptr ? py::object(py::str(*value)) : py::object(py::none());
           })
      .def_property_readonly("is_gpu_work",
                             [](const PatternEvent& e) { return tidy::is_gpu_work(e.event()); })
      // kiln's steps and reorders.
      .def_property_readonly("step", [](const PatternEvent& e) { return e.event().step; })
      .def_property_readonly("node", [](const PatternEvent& e) { return e.event().node; })
      .def_property_readonly("backend", [](const PatternEvent& e) { return e.event().backend; })
      .def_property_readonly("kernel", [](const PatternEvent& e) { return e.event().kernel; })
      .def_property_readonly("threads", [](const PatternEvent& e) { return e.event().threads; })
      .def_property_readonly("input_layouts", [](const PatternEvent& e) { return e.event().input_layouts; })
      .def_property_readonly("output_layouts", [](const PatternEvent& e) { return e.event().output_layouts; })
      .def_property_readonly("inputs", [](const PatternEvent& e) { return e.event().inputs; })
      .def_property_readonly("outputs", [](const PatternEvent& e) { return e.event().outputs; })
      .def_property_readonly("flops", [](const PatternEvent& e) { return e.event().flops; })
      .def_property_readonly("bytes", [](const PatternEvent& e) { return e.event().bytes; })
      .def_property_readonly("settings", [](const PatternEvent& e) { return e.event().settings; })
      .def_property_readonly("refusals",
                             [](const PatternEvent& e) {
                               py::list refusals;
                               for (const Refusal& refusal : e.event().refusals) {
                                 py::dict item;
                                 item["backend"] = refusal.backend;
                                 item["kind"] = refusal_kind_name(refusal.kind);
                                 item["text"] = refusal.text();
                                 refusals.append(item);
                               }
                               return refusals;
                             })
      .def("__eq__",
           [](const PatternEvent& a, const py::object& b) {
             if (!py::isinstance<PatternEvent>(b)) return false;
             const PatternEvent& other = b.cast<const PatternEvent&>();
             return a.tree == other.tree && a.index == other.index;
           })
      .def("__hash__", [](const PatternEvent& e) { return std::hash<uint64_t>{}(e.event().id); })
      .def("__repr__", [](const PatternEvent& e) {
        return str_cat("<kiln.tidy.Event ", e.event().id, " ", profiler::kind_name(e.event().kind), " '",
                       e.event().name, "'>");
      });
}

}  // namespace kiln
