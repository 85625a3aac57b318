// Reading trace files (profiler/trace_load.h): Kineto's fields land where they belong, operators
// nest by time per thread with ties and partial overlaps settled as documented, kiln's own Chrome
// trace reads back as the tree it was written from, and every malformed file is a clear error that
// names the event and what was expected. (Real PyTorch runs: tests/python/test_trace_load.py.)
#include "profiler/trace_load.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "graph/session.h"
#include "graph_builder.h"
#include "profiler/export.h"
#include "profiler/fields.h"
#include "profiler/key_averages.h"
#include "profiler/profile.h"

namespace kiln {
namespace {

using profiler::EventKind;
using profiler::Trace;
using profiler::TraceEvent;

// The message of the error loading `json` throws (empty when it loads).
std::string load_error(const std::string& json, const trace::LoadOptions& options = {}) {
  try {
    trace::load_text(json, "t.json", options);
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::invalid_argument) << error.what();
    return error.what();
  }
  return {};
}

std::string kineto(const std::string& events, const std::string& extra = "") {
  return R"({"schemaVersion": 1, "deviceProperties": [], )" + extra +
         R"("displayTimeUnit": "ms", "baseTimeNanoseconds": 1000000000, "traceEvents": [)" + events +
         R"(], "traceName": "t.json"})";
}

const TraceEvent& named(const Trace& trace, const std::string& name) {
  for (const TraceEvent& event : trace.events) {
    if (event.name == name) return event;
  }
  throw std::runtime_error("no event named " + name);
}

std::string parent_name(const Trace& trace, const TraceEvent& event) {
  const TraceEvent* parent = trace.find(event.parent_id);
  return parent == nullptr ? "" : parent->name;
}

// The fields profiler/fields.h writes for an event, as JSON text.
std::string fields_of(const TraceEvent& event) {
  JsonWriter json;
  json.begin_object();
  profiler::write_fields(json, event);
  json.end_object();
  return json.take();
}

std::filesystem::path temp_path(const std::string& name) {
  return std::filesystem::temp_directory_path() /
         ("kiln_trace_load_" + std::to_string(::getpid()) + "_" + name);
}

TEST(TraceLoad, KinetoFieldsLandWhereTheyBelong) {
  const Trace trace = trace::load_text(kineto(R"(
    {"ph": "M", "name": "thread_name", "pid": 7, "tid": 11, "args": {"name": "main"}},
    {"ph": "X", "cat": "python_function", "name": "train.py(12): step", "pid": 7, "tid": 11,
     "ts": 10.000, "dur": 100.500, "args": {"Python id": 3, "Python parent id": null}},
    {"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "pid": 7, "tid": 11, "ts": 20.250, "dur": 30.001,
     "args": {"External id": 5, "Input Dims": [[3], [2, 4], [4, 3], [], []],
              "Input type": ["float", "float", "float", "Scalar", "Scalar"], "Sequence number": 9}},
    {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 7, "tid": 11, "ts": 21.000,
     "args": {"Device Type": 0, "Device Id": -1, "Addr": 1234, "Bytes": 24, "Total Allocated": 48,
              "Total Reserved": 0}},
    {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#0", "pid": 7, "tid": 11, "ts": 5, "dur": 200},
    {"ph": "i", "s": "g", "name": "Record Window End", "pid": "", "tid": "", "ts": 300.5})"),
                                       "t.json");
  EXPECT_EQ(trace.source, "kineto_json");
  ASSERT_EQ(trace.events.size(), 4u);
  const TraceEvent& step = trace.events[0];
  EXPECT_EQ(step.name, "ProfilerStep#0");
  EXPECT_EQ(step.kind, EventKind::annotation);
  EXPECT_EQ(step.parent_id, 0u);
  EXPECT_EQ(step.start_ns, 1'000'005'000);  // baseTimeNanoseconds + 5 µs

  const TraceEvent& python = named(trace, "train.py(12): step");
  EXPECT_EQ(python.kind, EventKind::python);
  EXPECT_EQ(python.file, "train.py");
  EXPECT_EQ(python.line, 12);
  EXPECT_EQ(python.duration_ns(), 100'500);
  EXPECT_EQ(parent_name(trace, python), "ProfilerStep#0");
  ASSERT_NE(python.attribute("Python parent id"), nullptr);
  EXPECT_EQ(*python.attribute("Python parent id"), "null");

  const TraceEvent& addmm = named(trace, "aten::addmm");
  EXPECT_EQ(addmm.kind, EventKind::op);
  EXPECT_EQ(addmm.category, "cpu_op");
  EXPECT_EQ(addmm.start_ns, 1'000'020'250);
  EXPECT_EQ(addmm.end_ns, 1'000'050'251);
  EXPECT_EQ(parent_name(trace, addmm), "train.py(12): step");
  EXPECT_EQ(addmm.input_shapes, (std::vector<Shape>{{3}, {2, 4}, {4, 3}, {}, {}}));
  EXPECT_EQ(addmm.input_dtypes, (std::vector<std::string>{"float", "float", "float", "Scalar", "Scalar"}));
  ASSERT_NE(addmm.attribute("Sequence number"), nullptr);
  EXPECT_EQ(*addmm.attribute("Sequence number"), "9");

  const TraceEvent& memory = named(trace, "[memory]");
  EXPECT_EQ(memory.kind, EventKind::memory);
  EXPECT_EQ(memory.memory_bytes, 24);
  EXPECT_EQ(memory.memory_total, 48);
  EXPECT_EQ(parent_name(trace, memory), "aten::addmm");
  ASSERT_NE(memory.attribute("Addr"), nullptr);
  EXPECT_EQ(*memory.attribute("Addr"), "1234");

  ASSERT_EQ(trace.threads.size(), 1u);
  EXPECT_EQ(trace.threads[0].os_thread, 11);
  EXPECT_EQ(trace.threads[0].name, "main");
  EXPECT_TRUE(trace.shapes_recorded);
  EXPECT_TRUE(trace.memory_recorded);
  EXPECT_EQ(trace.facts.at("schemaVersion"), "1");
  // A fractional ts somewhere: ns precision; facts are still missing from the format.
  for (const std::string& missing : trace.unavailable)
    EXPECT_EQ(missing.find("ns timestamps"), std::string::npos);
  EXPECT_NE(trace.unavailable.back().find("machine facts"), std::string::npos);
  // The window marker is an instant kiln skips, and says so.
  bool skipped = false;
  for (const std::string& note : trace.notes)
    skipped = skipped || note.find("Record Window End") != std::string::npos;
  EXPECT_TRUE(skipped);
}

TEST(TraceLoad, NestingByTimeFollowsPyTorchsTreeRules) {
  const Trace trace = trace::load_text(kineto(R"(
    {"ph": "X", "cat": "cpu_op", "name": "outer", "pid": 1, "tid": 1, "ts": 0, "dur": 10},
    {"ph": "X", "cat": "cpu_op", "name": "same", "pid": 1, "tid": 1, "ts": 0, "dur": 10},
    {"ph": "X", "cat": "cpu_op", "name": "inner", "pid": 1, "tid": 1, "ts": 2, "dur": 3},
    {"ph": "X", "cat": "cpu_op", "name": "instant op", "pid": 1, "tid": 1, "ts": 3, "dur": 0},
    {"ph": "X", "cat": "cpu_op", "name": "after the instant", "pid": 1, "tid": 1, "ts": 3, "dur": 1},
    {"ph": "X", "cat": "cpu_op", "name": "starts at inner's end", "pid": 1, "tid": 1, "ts": 5, "dur": 1},
    {"ph": "X", "cat": "user_annotation", "name": "range", "pid": 1, "tid": 1, "ts": 8, "dur": 20},
    {"ph": "X", "cat": "cpu_op", "name": "inside range, after same", "pid": 1, "tid": 1, "ts": 12, "dur": 1},
    {"ph": "X", "cat": "cpu_op", "name": "other thread", "pid": 1, "tid": 2, "ts": 3, "dur": 1})"),
                                       "t.json");
  // Equal starts: the earlier in the file is the parent.
  EXPECT_EQ(parent_name(trace, named(trace, "same")), "outer");
  EXPECT_EQ(parent_name(trace, named(trace, "inner")), "same");
  // An event that lasts 0 is no one's parent.
  EXPECT_EQ(parent_name(trace, named(trace, "instant op")), "inner");
  EXPECT_EQ(parent_name(trace, named(trace, "after the instant")), "inner");
  // An event is open through its end: one starting exactly then is inside it (and ends after it).
  EXPECT_EQ(parent_name(trace, named(trace, "starts at inner's end")), "inner");
  // Open at its start: "range" goes under "same" although it ends after it ...
  EXPECT_EQ(parent_name(trace, named(trace, "range")), "same");
  // ... and closing "same" closes "range" too, so what starts later is a root.
  EXPECT_EQ(parent_name(trace, named(trace, "inside range, after same")), "");
  // Threads nest apart.
  EXPECT_EQ(parent_name(trace, named(trace, "other thread")), "");
  // Integer µs only: the trace says what that costs.
  bool says_us = false;
  for (const std::string& missing : trace.unavailable)
    says_us = says_us || missing.find("whole µs") != std::string::npos;
  EXPECT_TRUE(says_us);
  std::string notes;
  for (const std::string& note : trace.notes) notes += note + "\n";
  EXPECT_NE(notes.find("2 events end after their parent"), std::string::npos) << notes;
  // Ids: 1..N in start order, parents first.
  for (size_t i = 0; i < trace.events.size(); ++i) {
    EXPECT_EQ(trace.events[i].id, i + 1);
    EXPECT_LT(trace.events[i].parent_id, trace.events[i].id);
    if (i > 0) {
      EXPECT_LE(trace.events[i - 1].start_ns, trace.events[i].start_ns);
    }
  }
}

TEST(TraceLoad, TheLegacyArrayLoadsInDegradedModeAndSaysWhatItCannotSee) {
  const Trace trace = trace::load_text(R"([
    {"name": "aten::linear", "ph": "X", "ts": 100, "dur": 50, "tid": 1, "pid": "CPU functions", "args": {}},
    {"name": "aten::addmm", "ph": "X", "ts": 110, "dur": 30, "tid": 1, "pid": "CPU functions", "args": {}}])",
                                       "legacy.json");
  EXPECT_EQ(trace.source, "torch_legacy_json");
  ASSERT_EQ(trace.events.size(), 2u);
  EXPECT_EQ(trace.events[1].kind, EventKind::op);
  EXPECT_EQ(parent_name(trace, trace.events[1]), "aten::linear");
  EXPECT_FALSE(trace.shapes_recorded);
  EXPECT_FALSE(trace.memory_recorded);
  std::string unavailable;
  for (const std::string& missing : trace.unavailable) unavailable += missing + "\n";
  for (const char* expected :
       {"Python frames", "memory events", "input shapes", "ns timestamps", "machine facts"})
    EXPECT_NE(unavailable.find(expected), std::string::npos) << expected << " in\n" << unavailable;
}

TEST(TraceLoad, KilnsOwnTraceReadsBackAsTheTreeItWasWrittenFrom) {
  Session session(KILN_DEMO_MODEL, Settings().set("threads", 1));
  const TensorMap inputs = {{"input", testing::random_tensor({1, 3, 64, 64}, 7)}};
  session.run(inputs);
  profiler::Profile profile;
  profile.start();
  session.run(inputs);
  {
    profiler::RecordFunction annotation("annotated run");
    session.run(inputs);
  }
  Session other(KILN_DEMO_MODEL, Settings().set("threads", 1));
  other.run(inputs);  // plans while recording: a plan event
  const Trace written = profile.stop();
  const std::filesystem::path path = temp_path("kiln.json");
  profiler::export_chrome_trace(written, path.string());
  const Trace read = trace::load(path.string());
  std::filesystem::remove(path);

  EXPECT_EQ(read.source, "kiln_json");
  EXPECT_TRUE(read.unavailable.empty());
  EXPECT_EQ(read.facts.at("kiln_version"), written.facts.at("kiln_version"));
  ASSERT_EQ(read.events.size(), written.events.size());
  for (size_t i = 0; i < written.events.size(); ++i) {
    const TraceEvent& a = written.events[i];
    const TraceEvent& b = read.events[i];
    EXPECT_EQ(b.id, a.id);
    EXPECT_EQ(b.parent_id, a.parent_id) << a.name;
    EXPECT_EQ(b.kind, a.kind);
    EXPECT_EQ(b.name, a.name);
    EXPECT_EQ(b.start_ns - read.origin_ns, a.start_ns - written.origin_ns);
    EXPECT_EQ(b.duration_ns(), a.duration_ns());
    EXPECT_EQ(read.threads[b.thread].os_thread, written.threads[a.thread].os_thread);
    EXPECT_EQ(b.node, a.node);
    EXPECT_EQ(b.backend, a.backend);
    EXPECT_EQ(b.kernel, a.kernel);
    EXPECT_EQ(b.input_shapes, a.input_shapes);
    EXPECT_EQ(b.output_dtypes, a.output_dtypes);
    EXPECT_EQ(b.flops, a.flops);
    EXPECT_EQ(b.memory_bytes, a.memory_bytes);
    EXPECT_EQ(b.peak_bytes, a.peak_bytes);
    EXPECT_EQ(b.inputs, a.inputs);
    EXPECT_EQ(b.outputs, a.outputs);
    EXPECT_EQ(b.refusals, a.refusals);
    EXPECT_EQ(b.fused, a.fused);
    EXPECT_EQ(b.settings, a.settings);
    EXPECT_EQ(b.plan_steps, a.plan_steps);
    // Every field of the table, a step's whole record included, reads back as it was written.
    EXPECT_EQ(fields_of(b), fields_of(a)) << a.name;
    if (a.record != nullptr) EXPECT_EQ(b.record->notes, a.record->notes);
  }
  EXPECT_TRUE(std::any_of(read.events.begin(), read.events.end(),
                          [](const TraceEvent& event) { return event.kind == profiler::EventKind::plan; }));
}

TEST(TraceLoad, AVersionOneKilnTraceLoadsWithItsStepRecord) {
  // Version 1 step events carried part of the record and named the op only as the event's name.
  const std::filesystem::path seed = std::filesystem::path(KILN_DEMO_MODEL).parent_path().parent_path() /
                                     "fuzz" / "trace_seeds" / "kiln.json";
  const Trace read = trace::load(seed.string());
  EXPECT_EQ(read.source, "kiln_json");
  EXPECT_EQ(read.facts.at("schemaVersion"), "1");
  const TraceEvent& conv = named(read, "Conv");
  ASSERT_NE(conv.record, nullptr);
  EXPECT_EQ(conv.record->op_type, "Conv");
  EXPECT_EQ(conv.record->node_name, "conv1");
  EXPECT_EQ(conv.node, "conv1");
  EXPECT_EQ(conv.record->kernel, "direct");
  ASSERT_EQ(conv.record->fused.size(), 1u);
  EXPECT_EQ(conv.record->fused[0].op_type, "Relu");
  ASSERT_EQ(conv.refusals.size(), 1u);
  EXPECT_EQ(conv.refusals[0].kind, RefusalKind::disabled);
  EXPECT_EQ(conv.record->input_layouts, std::vector<Layout>{Layout::plain});
  EXPECT_EQ(conv.flops, 100);
}

TEST(TraceLoad, MalformedTracesAreClearErrors) {
  struct Case {
    const char* what;
    std::string json;
    const char* expected;  // in the message
  };
  const std::string event = R"({"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, )";
  const Case cases[] = {
      {"truncated", kineto(event + R"("ts": 1, "dur": 2}, {"ph": "X", "na)").substr(0, 200), "truncated"},
      {"empty", "", "not valid JSON at byte 0"},
      {"a single value", "42", "not a single value"},
      {"traceEvents not an array", R"({"traceEvents": {}})", "\"traceEvents\" must be an array"},
      {"an event that is not an object", R"({"traceEvents": [1]})",
       "event 0 is a number, expected an object"},
      {"ts a string", kineto(event + R"("ts": "1", "dur": 2})"),
       "event 0 ('aten::add'): \"ts\" must be a number"},
      {"no ts", kineto(event + R"("dur": 2})"), "no \"ts\""},
      {"no dur", kineto(event + R"("ts": 2})"), "no \"dur\""},
      {"name a number", kineto(R"({"ph": "X", "name": 3, "ts": 1, "dur": 1})"), "\"name\" must be a string"},
      {"no phase", kineto(R"({"name": "x", "ts": 1, "dur": 1})"), "event 0 ('x'): no \"ph\""},
      {"ends before it starts", kineto(event + R"("ts": 5, "dur": -2})"), "ends before it starts"},
      {"args an array", kineto(event + R"("ts": 5, "dur": 2, "args": []})"), "\"args\" must be an object"},
      {"Input Dims a string", kineto(event + R"("ts": 5, "dur": 2, "args": {"Input Dims": "[1]"}})"),
       "\"Input Dims\" must be an array"},
      {"Input type numbers", kineto(event + R"("ts": 5, "dur": 2, "args": {"Input type": [1]}})"),
       "\"Input type\" must hold strings"},
      {"Bytes a string",
       kineto(R"({"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": 1, "args": {"Bytes": "8"}})"),
       "\"Bytes\" must be an integer number of bytes"},
      {"ts out of range", kineto(event + R"("ts": 1e300, "dur": 2})"), "\"ts\" is out of range"},
      {"pid an object", kineto(R"({"ph": "X", "name": "x", "pid": {}, "ts": 1, "dur": 1})"),
       "\"pid\" must be a number or a string"},
      {"baseTimeNanoseconds a string", R"({"baseTimeNanoseconds": "1", "traceEvents": []})",
       "\"baseTimeNanoseconds\" must be an integer"},
      {"deep nesting",
       kineto(event + R"("ts": 5, "dur": 2, "args": {"x": )" + std::string(100000, '[') +
              std::string(100000, ']') + "}}"),
       "nesting deeper than 32 levels"},
      {"repeated kiln ids",
       R"({"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 1, "args": {"id": 1, "parent_id": 0, "kind": "run"}},
                           {"ph": "X", "name": "b", "ts": 1, "dur": 1, "args": {"id": 1, "parent_id": 0, "kind": "run"}}]})",
       "two events have id 1"},
      {"a cycle of kiln parents",
       R"({"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 1, "args": {"id": 1, "parent_id": 2, "kind": "run"}},
                           {"ph": "X", "name": "b", "ts": 1, "dur": 1, "args": {"id": 2, "parent_id": 1, "kind": "run"}}]})",
       "parent links form a cycle"},
      {"an unknown kiln kind",
       R"({"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 1, "args": {"id": 1, "parent_id": 0, "kind": "nap"}}]})",
       "unknown event kind 'nap'"},
      {"refusals of strings (an older kiln's text)",
       R"({"traceEvents": [{"ph": "X", "name": "Conv", "ts": 1, "dur": 1, "args": {"id": 1, "parent_id": 0, "kind": "step", "refusals": ["onednn: backend disabled"]}}]})",
       "args \"refusals\" must hold objects"},
      {"a refusal without its kind",
       R"({"traceEvents": [{"ph": "X", "name": "Conv", "ts": 1, "dur": 1, "args": {"id": 1, "parent_id": 0, "kind": "step", "refusals": [{"backend": "onednn", "kernel": "", "detail": "x"}]}}]})",
       "args \"refusals\" objects must have \"kind\""},
      {"a refusal of an unknown kind",
       R"({"traceEvents": [{"ph": "X", "name": "Conv", "ts": 1, "dur": 1, "args": {"id": 1, "parent_id": 0, "kind": "step", "refusals": [{"backend": "onednn", "kernel": "", "kind": "tired", "detail": "x"}]}}]})",
       "unknown kind 'tired' (known: not_built, disabled,"},
      {"a refusal's backend a number",
       R"({"traceEvents": [{"ph": "X", "name": "Conv", "ts": 1, "dur": 1, "args": {"id": 1, "parent_id": 0, "kind": "step", "refusals": [{"backend": 1, "kernel": "", "kind": "disabled", "detail": "x"}]}}]})",
       "args \"refusals\" objects' \"backend\" must be a string"},
      {"a dimension that is text",
       R"({"traceEvents": [{"ph": "X", "name": "Conv", "ts": 1, "dur": 1, "args": {"id": 1, "parent_id": 0, "kind": "step", "input_shapes": [[1, "3"]]}}]})",
       "args \"input_shapes\" must hold arrays of integer dimensions"},
      {"a kiln trace from a newer kiln",
       R"({"schemaVersion": 999, "traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 1, "args": {"id": 1, "parent_id": 0, "kind": "run"}}]})",
       "kiln trace schemaVersion 999 is not one this kiln reads (1 to 2)"},
      {"a kiln version that is not a number",
       R"({"schemaVersion": "two", "traceEvents": [], "kiln": {"kiln_version": "0.1"}})",
       "kiln trace schemaVersion two is not one this kiln reads"},
      {"a layout kiln does not have",
       R"({"traceEvents": [{"ph": "X", "name": "Conv", "ts": 1, "dur": 1, "args": {"id": 1, "parent_id": 0, "kind": "step", "input_layouts": ["nchw"]}}]})",
       "args \"input_layouts\" has unknown layout 'nchw' (known: plain, nhwc, plain_bf16, nhwc_bf16)"},
      {"a fused node without its op",
       R"({"traceEvents": [{"ph": "X", "name": "Conv", "ts": 1, "dur": 1, "args": {"id": 1, "parent_id": 0, "kind": "step", "fused": [{"node": "relu"}]}}]})",
       "args \"fused\" objects must have \"op\""},
      {"invalid UTF-8", kineto(event + "\"ts\": 1, \"dur\": 1, \"args\": {\"x\": \"\xff\"}}"),
       "not valid JSON"},
      // Found by the fuzzer: RapidJSON read a cut-off sequence's continuation bytes past the text.
      {"a UTF-8 sequence cut off at the end", "{\"traceName\": \"r\xe3", "not valid JSON"},
      {"a zero byte after the JSON", std::string("{\"traceEvents\": []}\0{\"more\": 1}", 31),
       "a zero byte at byte 19 after the JSON ends"},
  };
  for (const Case& c : cases) {
    const std::string message = load_error(c.json);
    EXPECT_NE(message.find(c.expected), std::string::npos) << c.what << ": " << message;
    EXPECT_NE(message.find("trace 't.json'"), std::string::npos) << c.what << ": " << message;
  }
}

TEST(TraceLoad, FilesThatCannotBeReadOrAreOverTheCapAreClearErrors) {
  EXPECT_THROW(trace::load("/nonexistent/trace.json"), Error);
  try {
    trace::load("/nonexistent/trace.json");
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("cannot open trace '/nonexistent/trace.json'"),
              std::string::npos);
  }
  try {
    trace::load(std::filesystem::temp_directory_path().string());
    ADD_FAILURE() << "a directory loaded";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("is a directory"), std::string::npos) << error.what();
  }

  const std::filesystem::path gzip = temp_path("trace.json.gz");
  std::ofstream(gzip, std::ios::binary) << "\x1f\x8b\x08\x00";
  try {
    trace::load(gzip.string());
    ADD_FAILURE() << "a gzip file loaded";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("gzip-compressed"), std::string::npos) << error.what();
  }
  std::filesystem::remove(gzip);

  // 64 MB of valid events against a 1 MB cap: refused before it is read, naming both sizes.
  const std::filesystem::path big = temp_path("big.json");
  {
    std::ofstream out(big, std::ios::binary);
    out << R"({"traceEvents": [)";
    const std::string one =
        R"({"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 1, "dur": 1},)";
    const std::string block = [&] {
      std::string text;
      for (int i = 0; i < 1024; ++i) text += one;
      return text;
    }();
    int64_t written = 0;
    while (written < (int64_t{64} << 20)) {
      out << block;
      written += static_cast<int64_t>(block.size());
    }
    out << one.substr(0, one.size() - 1) << "]}";
  }
  const int64_t size = static_cast<int64_t>(std::filesystem::file_size(big));
  try {
    trace::load(big.string(), {.max_bytes = int64_t{1} << 20});
    ADD_FAILURE() << "a file over the cap loaded";
  } catch (const Error& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find(std::to_string(size) + " bytes, over the cap of 1048576 bytes"), std::string::npos)
        << message;
    EXPECT_NE(message.find("--max-trace-bytes"), std::string::npos) << message;
  }
  std::filesystem::remove(big);
}

TEST(TraceLoad, DeeplyNestedEventsLoadWithoutRecursion) {
  // 200,000 events, each inside the one before: nesting, numbering and the tables walk iteratively.
  constexpr int kDepth = 200'000;
  std::string events;
  for (int i = 0; i < kDepth; ++i) {
    if (i > 0) events += ",";
    events += R"({"ph": "X", "cat": "cpu_op", "name": "op", "pid": 1, "tid": 1, "ts": )" + std::to_string(i) +
              R"(, "dur": )" + std::to_string(2 * (kDepth - i)) + "}";
  }
  const Trace trace = trace::load_text(kineto(events), "deep.json");
  ASSERT_EQ(trace.events.size(), static_cast<size_t>(kDepth));
  for (size_t i = 0; i < trace.events.size(); ++i) EXPECT_EQ(trace.events[i].parent_id, i) << i;
  const profiler::KeyAverages table = profiler::key_averages(trace, profiler::GroupBy::op);
  ASSERT_EQ(table.rows().size(), 1u);
  EXPECT_EQ(table.rows()[0].calls, kDepth);
}

TEST(TraceLoad, NumberingRefusesRepeatsAndCyclesAndKeepsParentsFirst) {
  Trace trace;
  trace.threads.push_back({});
  const auto add = [&](uint64_t id, uint64_t parent, int64_t start, int64_t end) {
    TraceEvent& event = trace.events.emplace_back();
    event.id = id;
    event.parent_id = parent;
    event.start_ns = start;
    event.end_ns = end;
    event.name = std::to_string(id);
  };
  add(50, 0, 100, 200);
  add(7, 50, 90, 150);  // starts before its parent: ordered at the parent's start, after it
  add(9, 404, 10, 20);  // its parent is not in the trace: a root, counted
  trace::number_events(trace);
  ASSERT_EQ(trace.events.size(), 3u);
  EXPECT_EQ(trace.events[0].name, "9");
  EXPECT_EQ(trace.events[1].name, "50");
  EXPECT_EQ(trace.events[2].name, "7");
  EXPECT_EQ(trace.events[2].parent_id, 2u);
  EXPECT_EQ(trace.unparented, 1);
  EXPECT_EQ(trace.origin_ns, 10);
}

}  // namespace
}  // namespace kiln
