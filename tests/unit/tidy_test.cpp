// The anti-pattern analysis (tidy/): the event tree's traversal, each TorchTidy rule on small Kineto
// traces made to match and to miss by one condition, kiln's corrected checks on traces with GPU
// work (no GPU runs here), what a trace cannot tell, the reports. (Real PyTorch runs against
// TorchTidy itself: tests/python/test_tidy.py.)
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "profiler/trace_load.h"
#include "tidy/event_tree.h"
#include "tidy/report.h"
#include "tidy/source_location.h"
#include "tidy_runner/estimate.h"
#include "tidy_runner/torch_estimate.h"

namespace kiln {
namespace {

using profiler::Trace;
using tidy::EventIndex;
using tidy::EventTree;
using tidy::kNoEvent;

// A Kineto "X" event on thread `tid`, `ts`/`dur` in µs.
std::string event(const std::string& name, const std::string& category, double ts, double dur,
                  const std::string& args = "", int tid = 1) {
  std::ostringstream out;
  out << R"({"ph": "X", "cat": ")" << category << R"(", "name": ")" << name << R"(", "pid": 1, "tid": )"
      << tid << R"(, "ts": )" << ts << R"(, "dur": )" << dur << R"(, "args": {)" << args << "}}";
  return out.str();
}
std::string op(const std::string& name, double ts, double dur, const std::string& args = "", int tid = 1) {
  return event(name, "cpu_op", ts, dur, args, tid);
}
std::string python(const std::string& name, double ts, double dur) {
  return event(name, "python_function", ts, dur);
}

Trace kineto(const std::vector<std::string>& events, const std::string& members = "") {
  std::string json = R"({"schemaVersion": 1, )" + members + R"("traceEvents": [)";
  for (size_t i = 0; i < events.size(); ++i) json += (i == 0 ? "" : ",\n") + events[i];
  return trace::load_text(json + "]}", "t.json");
}

std::vector<std::string> names(const EventTree& tree, const std::vector<EventIndex>& order) {
  std::vector<std::string> out;
  for (const EventIndex index : order) out.push_back(tree.event(index).name);
  return out;
}

std::string note_of(const std::vector<tidy::PatternNote>& notes, const std::string& pattern) {
  for (const tidy::PatternNote& note : notes) {
    if (note.pattern == pattern) return note.text;
  }
  return {};
}

TEST(EventTree, TraversesAsTorchTidyDoes) {
  // Thread 1: a(b(c), d) then e; thread 2: x(y), starting between a and e.
  const Trace trace = kineto({op("a", 0, 10), op("b", 1, 4), op("c", 2, 1), op("d", 6, 2),
                              op("x", 3, 5, "", 2), op("y", 4, 1, "", 2), op("e", 20, 1)});
  const EventTree tree(trace);
  EXPECT_EQ(names(tree, tree.depth_first()), (std::vector<std::string>{"a", "b", "c", "d", "x", "y", "e"}));
  EXPECT_EQ(names(tree, tree.breadth_first()), (std::vector<std::string>{"a", "x", "e", "b", "d", "y", "c"}));
  const auto index_of = [&](const std::string& name) {
    for (EventIndex i = 0; i < tree.size(); ++i) {
      if (tree.event(i).name == name) return i;
    }
    return kNoEvent;
  };
  EXPECT_EQ(tree.parent(index_of("c")), index_of("b"));
  EXPECT_EQ(tree.parent(index_of("a")), kNoEvent);
  EXPECT_EQ(tree.root(index_of("c")), index_of("a"));
  EXPECT_EQ(tree.next(index_of("b")), index_of("d"));
  EXPECT_EQ(tree.previous(index_of("d")), index_of("b"));
  EXPECT_EQ(tree.previous(index_of("b")), kNoEvent);
  // Roots are siblings per thread (TorchTidy keys them by start_tid): e follows a, not x.
  EXPECT_EQ(tree.next(index_of("a")), index_of("e"));
  EXPECT_EQ(tree.next(index_of("x")), kNoEvent);
  EXPECT_EQ(tree.position(index_of("e")), 1u);
  EXPECT_EQ(names(tree, tree.depth_first(tree.children(index_of("a")))),
            (std::vector<std::string>{"b", "c", "d"}));
}

TEST(SourceLocation, FirstFrameOutsidePyTorch) {
  const Trace trace =
      kineto({python("train.py(10): step", 0, 100),
              python("torch/nn/modules/module.py(1188): _call_impl", 1, 50), op("aten::mm", 2, 5)});
  const EventTree tree(trace);
  // A file has no caller frames: the enclosing function outside torch/, at its first line.
  const tidy::SourceLocation location = tidy::source_location(tree, 2);
  EXPECT_EQ(location.text(), "train.py:10");
  EXPECT_FALSE(location.exact);
  EXPECT_EQ(tidy::source_location(tree, 0).text(), "train.py:10");
  const Trace bare = kineto({op("aten::mm", 0, 5)});
  EXPECT_EQ(tidy::source_location(EventTree(bare), 0).text(), "No source code location found");
}

// The events of one `x = torch.zeros(...); x.to(..., copy=True)` as PyTorch records them.
std::vector<std::string> filled_then_copied(const std::string& copy_types, double at = 0) {
  return {
      python("train.py(1): main", at, 100),
      python("<built-in method zeros of type object at 0x1>", at + 1, 10),
      op("aten::zeros", at + 2, 8),
      op("aten::empty", at + 3, 1),
      op("aten::zero_", at + 5, 4),
      op("aten::fill_", at + 6, 2),
      python("<built-in method to of Tensor object at 0x2>", at + 20, 30),
      op("aten::to", at + 21, 28),
      op("aten::_to_copy", at + 22, 26),
      op("aten::empty_strided", at + 23, 1),
      op("aten::copy_", at + 25, 10, R"("Input Dims": [[4], [4], []], "Input type": [)" + copy_types + "]")};
}

TEST(TorchTidyPatterns, ExtraCUDACopyFollowsTheChainAndChecksTheDtypes) {
  tidy::TidyReport report = tidy::analyse(kineto(filled_then_copied(R"("float", "float", "Scalar")")), "t");
  EXPECT_EQ(report.count("Extra CUDA Copy Pattern"), 1u);
  // No GPU work: the rule's copy went from host to host, the caveat says so; the corrected check
  // is not evaluated.
  EXPECT_NE(note_of(report.caveats, "Extra CUDA Copy Pattern").find("host to host"), std::string::npos);
  EXPECT_NE(note_of(report.not_evaluated, "Extra Host To Device Copy Pattern").find("no GPU work"),
            std::string::npos);
  report = tidy::analyse(kineto(filled_then_copied(R"("float", "double", "Scalar")")), "t");
  EXPECT_EQ(report.count("Extra CUDA Copy Pattern"), 0u);
  // With GPU work below the copy, the corrected check matches too.
  std::vector<std::string> events = filled_then_copied(R"("float", "float", "Scalar")");
  events.push_back(event("cudaMemcpyAsync", "cuda_runtime", 27, 2));
  report = tidy::analyse(kineto(events), "t");
  EXPECT_EQ(report.count("Extra CUDA Copy Pattern"), 1u);
  EXPECT_EQ(report.count("Extra Host To Device Copy Pattern"), 1u);
  EXPECT_TRUE(note_of(report.caveats, "Extra CUDA Copy Pattern").empty());
  // A tensor freed between the fill and the copy: TorchTidy takes the free for the previous call.
  events.push_back(
      R"({"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "ts": 15, )"
      R"("s": "t", "args": {"Bytes": -256, "Total Allocated": 0}})");
  report = tidy::analyse(kineto(events), "t");
  EXPECT_EQ(report.count("Extra CUDA Copy Pattern"), 0u);
  EXPECT_EQ(report.count("Extra Host To Device Copy Pattern"), 1u);
}

TEST(TorchTidyPatterns, ForLoopIndexingNeedsTenRepeats) {
  for (const int repeats : {9, 10, 25}) {
    std::vector<std::string> events = {python("train.py(1): main", 0, 1000)};
    for (int i = 0; i < repeats; ++i) {
      events.push_back(op("aten::select", 1 + 10 * i, 2));
      events.push_back(op("aten::fill_", 4 + 10 * i, 2));
    }
    const tidy::TidyReport report = tidy::analyse(kineto(events), "t");
    // One match per loop however long: the repeats it saw are visited.
    EXPECT_EQ(report.count("For Loop Indexing Pattern"), repeats >= 10 ? 1u : 0u) << repeats;
  }
}

TEST(TorchTidyPatterns, FP32MatMulOnACpuTraceAndTheCorrectedCheck) {
  const std::string dims = R"("Input Dims": [[4, 4], [4, 4]], "Input type": ["float", "float"])";
  tidy::TidyReport report =
      tidy::analyse(kineto({op("aten::mm", 0, 5, dims), op("aten::addmm", 10, 5, dims)}), "t");
  EXPECT_EQ(report.count("FP32 MatMul Pattern"), 1u);
  EXPECT_NE(note_of(report.caveats, "FP32 MatMul Pattern").find("empty architecture list"),
            std::string::npos);
  ASSERT_FALSE(report.assumed.empty());
  EXPECT_NE(report.assumed[0].find("False since 1.12"), std::string::npos);
  // A GPU trace: TorchTidy's rule reads the GPUs' architectures (sm_70 has no TF32: skipped); the
  // corrected check counts float32 products of all four kinds that launched GPU work.
  const std::vector<std::string> gpu = {op("aten::mm", 0, 5, dims),
                                        event("cudaLaunchKernel", "cuda_runtime", 1, 1),
                                        op("aten::addmm", 10, 5,
                                           R"("Input Dims": [[4], [4, 4], [4, 4]], )"
                                           R"("Input type": ["float", "float", "float"])"),
                                        event("cudaLaunchKernel", "cuda_runtime", 11, 1)};
  report =
      tidy::analyse(kineto(gpu, R"("deviceProperties": [{"computeMajor": 8, "computeMinor": 0}], )"), "t");
  EXPECT_EQ(report.count("FP32 MatMul Pattern"), 1u);
  EXPECT_EQ(report.count("FP32 MatMul On TF32 GPU Pattern"), 2u);
  report =
      tidy::analyse(kineto(gpu, R"("deviceProperties": [{"computeMajor": 7, "computeMinor": 0}], )"), "t");
  EXPECT_EQ(report.count("FP32 MatMul Pattern"), 0u);
  EXPECT_NE(note_of(report.not_evaluated, "FP32 MatMul Pattern").find("sm_70"), std::string::npos);
  EXPECT_EQ(report.count("FP32 MatMul On TF32 GPU Pattern"), 0u);
}

TEST(TorchTidyEstimates, MeasuredOnlyOnTheCpuTheTraceWasRecordedOn) {
  const std::string dims = R"("Input Dims": [[4, 4], [4, 4]], "Input type": ["float", "float"])";
  Trace trace = kineto({op("aten::mm", 0, 5, dims)});
  tidy::TidyReport report = tidy::analyse(trace, "t");
  // A Kineto file names no CPU: nothing is measured, and the report says why.
  tidy::estimate_savings(report, trace, {});
  ASSERT_EQ(report.estimates.size(), 1u);
  EXPECT_EQ(report.estimates[0].pattern, "FP32 MatMul Pattern");
  EXPECT_FALSE(report.estimates[0].saving_ms.has_value());
  EXPECT_NE(report.estimates[0].basis.find("does not name its CPU"), std::string::npos)
      << report.estimates[0].basis;
  trace.facts["cpu"] = "Some Other CPU";
  tidy::estimate_savings(report, trace, {});
  EXPECT_NE(report.estimates[0].basis.find("recorded on another CPU ('Some Other CPU'"), std::string::npos);
  // This CPU, with a Python that cannot run: the reason names it. (A bf16 product's padding needs
  // no bf16 arithmetic of the CPU, so every machine gets this far.)
  Trace unaligned =
      kineto({python("train.py(1): main", 0, 100),
              op("aten::mm", 10, 5,
                 R"("Input Dims": [[10, 12], [12, 16]], "Input type": ["c10::BFloat16", "c10::BFloat16"])")});
  unaligned.facts["cpu"] = profiler::machine_facts().at("cpu");
  report = tidy::analyse(unaligned, "t");
  ASSERT_EQ(report.count("Matrix Multiplication Dimension Not Aligned Pattern"), 1u);
  tidy::estimate_torch_savings(report, unaligned, "/nonexistent/python3");
  const auto padded =
      std::find_if(report.estimates.begin(), report.estimates.end(), [](const auto& estimate) {
        return estimate.pattern == "Matrix Multiplication Dimension Not Aligned Pattern";
      });
  ASSERT_NE(padded, report.estimates.end());
  EXPECT_NE(padded->basis.find("cannot run /nonexistent/python3"), std::string::npos) << padded->basis;
  EXPECT_FALSE(padded->saving_ms.has_value());
}

TEST(TorchTidyPatterns, PythonCallPatterns) {
  const tidy::TidyReport report =
      tidy::analyse(kineto({python("torch/optim/adam.py(250): _single_tensor_adam", 0, 10),
                            python("torch/optim/sgd.py(200): _multi_tensor_sgd", 20, 10),
                            python("torch/utils/data/dataloader.py(422): __iter__", 40, 10),
                            python("torch/utils/data/dataloader.py(376): _get_iterator", 41, 8),
                            python("torch/utils/data/dataloader.py(656): __init__", 42, 6),
                            python("torch/optim/optimizer.py(200): zero_grad", 60, 20),
                            op("aten::zeros", 61, 4), op("aten::zero_", 62, 2), op("aten::zero_", 70, 2)}),
                    "t");
  EXPECT_EQ(report.count("Optimizer Single Tensor Pattern"), 1u);
  EXPECT_EQ(report.count("Synchronized DataLoader Pattern"), 1u);
  EXPECT_EQ(report.count("Gradient Set To Zero Instead of None Pattern"), 1u);
  // A zero_ under aten::zeros is an allocation, not a gradient: alone it does not match.
  const tidy::TidyReport zeros_only =
      tidy::analyse(kineto({python("torch/optim/optimizer.py(200): zero_grad", 0, 20),
                            op("aten::zeros", 1, 4), op("aten::zero_", 2, 2)}),
                    "t");
  EXPECT_EQ(zeros_only.count("Gradient Set To Zero Instead of None Pattern"), 0u);
}

TEST(TorchTidyPatterns, ConvBiasBeforeBatchNormAndUnalignedHalfProducts) {
  const std::string bias =
      R"("Input Dims": [[1, 3, 8, 8], [4, 3, 3, 3], [4]], "Input type": ["float", "float", "float"])";
  const std::string no_bias =
      R"("Input Dims": [[1, 3, 8, 8], [4, 3, 3, 3], []], "Input type": ["float", "float", ""])";
  const tidy::TidyReport report = tidy::analyse(
      kineto({python("nn.Module: Conv2d_0", 0, 10), op("aten::conv2d", 1, 8, bias),
              python("nn.Module: BatchNorm2d_0", 20, 10), python("nn.Module: Conv2d_1", 40, 10),
              op("aten::conv2d", 41, 8, no_bias), python("nn.Module: BatchNorm2d_1", 60, 10),
              op("aten::mm", 80, 5,
                 R"("Input Dims": [[10, 12], [12, 16]], "Input type": ["c10::BFloat16", "c10::BFloat16"])"),
              op("aten::mm", 90, 5,
                 R"("Input Dims": [[16, 16], [16, 8]], "Input type": ["c10::Half", "c10::Half"])")}),
      "t");
  EXPECT_EQ(report.count("Enabling Bias in Conv2d Followed By BatchNorm Pattern"), 1u);
  EXPECT_EQ(report.count("Matrix Multiplication Dimension Not Aligned Pattern"), 1u);
}

TEST(TorchTidyPatterns, WhatATraceCannotTellIsNamed) {
  // No Python events and no shapes: TorchTidy's skips, and the rules that look for Python calls.
  const tidy::TidyReport report = tidy::analyse(kineto({op("aten::mm", 0, 5)}), "t");
  EXPECT_NE(note_of(report.not_evaluated, "Extra CUDA Copy Pattern").find("without with_stack"),
            std::string::npos);
  EXPECT_NE(note_of(report.not_evaluated, "FP32 MatMul Pattern").find("without record_shapes"),
            std::string::npos);
  EXPECT_NE(note_of(report.not_evaluated, "Optimizer Single Tensor Pattern").find("no Python events"),
            std::string::npos);
  EXPECT_EQ(report.count("FP32 MatMul Pattern"), 0u);
  EXPECT_TRUE(note_of(report.not_evaluated, "For Loop Indexing Pattern").empty());
}

TEST(TorchTidyPatterns, NamePatternsAndTheirErrors) {
  const tidy::TidyReport report =
      tidy::analyse(kineto({op("aten::mm", 0, 5), op("aten::addmm", 10, 5), op("aten::relu", 20, 5)}), "t",
                    {.name_patterns = {"mm$", "^aten::(relu|gelu)$"}});
  EXPECT_EQ(report.count("mm$"), 2u);
  EXPECT_EQ(report.count("^aten::(relu|gelu)$"), 1u);
  try {
    tidy::analyse(kineto({op("aten::mm", 0, 5)}), "t", {.name_patterns = {"(unclosed"}});
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::invalid_argument);
    EXPECT_NE(std::string(error.what()).find("'(unclosed' is not a regular expression"), std::string::npos);
  }
}

TEST(TidyReport, TextJsonAndTorchTidyJson) {
  std::vector<std::string> events = filled_then_copied(R"("float", "float", "Scalar")");
  const std::vector<std::string> again = filled_then_copied(R"("float", "float", "Scalar")", 200);
  events.insert(events.end(), again.begin() + 1, again.end());  // the same location twice
  events[0] = python("train.py(1): main", 0, 1000);
  const tidy::TidyReport report = tidy::analyse(kineto(events), "t.json");
  EXPECT_EQ(report.count("Extra CUDA Copy Pattern"), 2u);
  ASSERT_EQ(report.findings.size(), 1u);  // one distinct message
  const std::string per_event = report.text(/*per_event=*/true);
  EXPECT_NE(per_event.find("train.py:1: Extra CUDA Copy Pattern: Filled a CPU tensor"), std::string::npos)
      << per_event;
  // Grouped (the default): the pattern once, its place with the number of matches there.
  const std::string text = report.text();
  EXPECT_EQ(text.find("Matched Events:"), std::string::npos) << text;
  EXPECT_NE(text.find("Extra CUDA Copy Pattern: 2 matches at 1 place"), std::string::npos) << text;
  EXPECT_NE(text.find("  train.py:1: 2 matches, "), std::string::npos) << text;
  EXPECT_NE(text.find("Extra CUDA Copy Pattern: 2 events matched."), std::string::npos) << text;
  const std::vector<tidy::MatchGroup> groups = report.groups();
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].node, "train.py:1");
  EXPECT_EQ(groups[0].matches, 2u);
  EXPECT_EQ(groups[0].runs, 0u);  // a PyTorch trace has no runs
  const std::string json = report.json();
  EXPECT_NE(json.find(R"("counts": {"Extra CUDA Copy Pattern": 2)"), std::string::npos) << json;
  EXPECT_NE(json.find(R"("file": "train.py", "line": 1, "event_id": )"), std::string::npos) << json;

  const std::filesystem::path directory =
      std::filesystem::temp_directory_path() / ("kiln_tidy_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(directory);
  const std::filesystem::path file = directory / "torchtidy_report.json";
  std::ofstream(file) << R"({"other.py": [{"line_number": 3}], "train.py": []})";
  report.write_torchtidy_json(directory.string());
  std::stringstream written;
  written << std::ifstream(file).rdbuf();
  // dict.update: other.py kept, train.py replaced in its place.
  EXPECT_EQ(
      written.str(),
      R"({"other.py": [{"line_number":3}], "train.py": [{"line_number": 1, "name": "Extra CUDA Copy Pattern", )"
      R"("url": "https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html#create-tensors-directly-on-)"
      R"(the-target-device", "message": "Filled a CPU tensor and immediately moved it to GPU. Please initalize )"
      R"(it on GPU."}]})"
      "\n");
  std::ofstream(file) << "[not json";
  try {
    report.write_torchtidy_json(directory.string());
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("is not JSON"), std::string::npos) << error.what();
  }
  std::filesystem::remove_all(directory);
}

}  // namespace
}  // namespace kiln
