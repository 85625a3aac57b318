// parallel_info(): everything that decides how many threads kiln's work runs on, and where each
// value came from, in one place (C++, Python's kiln.parallel_info(), `kiln info`).
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace kiln {

struct ParallelInfo {
  int intra_op_threads = 1;  // what a run on the calling thread would ask for
  std::string intra_op_source;
  int interop_threads = 1;
  std::string interop_source;
  bool interop_started = false;
  int thread_budget = 0;  // 0: off
  std::string thread_budget_source;
  int leased_threads = 0;  // held by runs in flight now
  bool budget_shared = false;  // runs share it now (see runtime/thread_budget.h)
  int cores = 1;           // available_cores(): physical cores in the mask, capped by the quota
  std::string cores_reason;
  std::string core_ids;    // "0-1"
  std::string topology;    // Topology::describe(), several lines
  bool load_measured = false;  // runtime/core_load.h
  bool load_readable = true;
  double busy_elsewhere = 0;   // cores' worth of other processes' work
  int free_cores = 1;
  bool adapt_to_load = true;        // the setting, for a run on the calling thread
  bool threads_are_default = true;  // nobody set the thread count
  std::string openmp;      // the runtime loaded and the OpenMP version kiln was built for
  std::string wait_policy;
  std::string blas;  // library and threading, or "not built"
  std::string onednn;
  // Every environment variable kiln or its libraries read for threads, and its value ("" unset).
  std::vector<std::pair<std::string, std::string>> environment;
};

ParallelInfo parallel_info();
// As text, one "name: value" line each, for `kiln info` and Python.
std::string parallel_info_text(const ParallelInfo& info);

}  // namespace kiln
