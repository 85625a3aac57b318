// What `kiln explain` shows of a plan, shared by the CLI and Python's Session.explain_text(): per
// step the op and node, the backend's kernel, shapes with their storage layouts, in-place outputs,
// fused nodes, notes and why each faster candidate refused; with profiling, each step's median time,
// the time per op type and the most expensive steps.
#pragma once

#include <string>
#include <vector>

#include "graph/plan.h"
#include "graph/session.h"
#include "graph/step_timer.h"

namespace kiln {

// "[1, 64, 56, 56]:nhwc [64, 64, 3, 3]": shapes, each with its layout unless plain.
std::string shapes_text(const std::vector<Shape>& shapes, const std::vector<Layout>& layouts);

// The report: `title` ("plan for MODEL (batch 1, plan settings ...)"), the plan's counts, each step,
// and, when `step_ms` has a time per step, the profile over `runs` runs.
std::string explain_text(const Plan& plan, const std::string& title, const std::vector<double>& step_ms,
                         int runs);

// The same as one JSON object, for scripts: the plan's counts and threads, and per step what the
// report prints (shapes, dtypes and layouts as lists, fused nodes as {op, node}, refusals as
// {backend, kernel, kind, detail}, the rule that decided and autotune's timings, FLOPs, and with
// profiling "ms"). `model` and `batch` name what was planned.
std::string explain_json(const Plan& plan, const std::string& model, int batch,
                         const std::vector<double>& step_ms, int runs);

}  // namespace kiln
