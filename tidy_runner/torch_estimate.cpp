#include "tidy_runner/torch_estimate.h"

#include <fcntl.h>
#include <rapidjson/document.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>
#include <tuple>

#include "core/error.h"
#include "core/json_writer.h"
#include "tidy/kiln_patterns.h"
#include "tidy/pattern.h"

extern char** environ;

namespace kiln::tidy {

extern const char* const kTorchBenchmarkScript;  // tidy_runner/torch_benchmark.py, embedded at build time

namespace {

// The benchmark times each case for about 0.4 s: at most this many distinct calls (the first seen).
constexpr size_t kMaxCases = 48;
constexpr std::chrono::seconds kBenchmarkTimeout{600};

struct Case {
  std::string fix;
  std::string op;
  std::vector<Shape> shapes;
  std::vector<std::string> dtypes;
  bool operator<(const Case& other) const {
    return std::tie(fix, op, shapes, dtypes) < std::tie(other.fix, other.op, other.shapes, other.dtypes);
  }
};

struct Result {
  double saving_us = 0;
  std::string error;
};

// Why this trace's fixes cannot be measured here, or nothing.
Reason unmeasurable(const profiler::Trace& trace) {
  const std::map<std::string, std::string> here = profiler::machine_facts();
  const auto cpu = trace.facts.find("cpu");
  if (cpu == trace.facts.end()) {
    return std::string(
        "the trace does not name its CPU (PyTorch's trace files do not; kiln.tidy.report(prof) on the live "
        "profiler records it), so the fix cannot be measured on the same machine");
  }
  if (cpu->second != here.at("cpu")) {
    return str_cat("the trace was recorded on another CPU ('", cpu->second, "'; here '", here.at("cpu"),
                   "')");
  }
  return std::nullopt;
}

// Runs `argv` and waits; its standard output and error go to `log`. The exit status, or -1 with
// `error` set when it could not start.
int run_process(const std::vector<std::string>& argv, const std::filesystem::path& log, std::string& error) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  std::vector<char*> args;
  for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int spawned = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) {
    error = str_cat("cannot run ", argv[0], ": ", std::strerror(spawned));
    return -1;
  }
  // Polled, so a benchmark that hangs is stopped instead of hanging the report.
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + kBenchmarkTimeout;
  for (;;) {
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    if (done < 0 && errno != EINTR) {
      error = str_cat("waiting for ", argv[0], " failed: ", std::strerror(errno));
      return -1;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      error = str_cat(argv[0], " did not finish timing the fixes within ",
                      std::chrono::duration_cast<std::chrono::seconds>(kBenchmarkTimeout).count(), " s");
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string last_line(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::string line;
  std::string last;
  while (std::getline(in, line)) {
    if (!line.empty()) last = line;
  }
  return last;
}

// Times every case with torch; per case its saving in µs, or why it could not be timed. `failure`
// says why nothing was timed.
std::vector<Result> time_cases(const std::vector<Case>& cases, const profiler::Trace& trace,
                               const std::string& python, std::string& failure) {
  char pattern[] = "/tmp/kiln_torch_benchmark_XXXXXX";
  const char* made = mkdtemp(pattern);
  if (made == nullptr) {
    failure = str_cat("cannot make a temporary directory: ", std::strerror(errno));
    return {};
  }
  const std::filesystem::path directory(made);
  struct RemoveAfterwards {
    std::filesystem::path path;
    ~RemoveAfterwards() {
      std::error_code ignored;
      std::filesystem::remove_all(path, ignored);
    }
  } remove_afterwards{directory};

  JsonWriter json;
  json.begin_object();
  const auto threads = trace.facts.find("threads");
  json.member("threads", threads == trace.facts.end() ? std::string() : threads->second);
  json.key("cases").begin_array();
  for (size_t i = 0; i < cases.size(); ++i) {
    json.begin_object()
        .member("id", static_cast<uint64_t>(i))
        .member("fix", cases[i].fix)
        .member("op", cases[i].op);
    json.member("shapes", cases[i].shapes).member("dtypes", cases[i].dtypes).end_object();
  }
  json.end_array().end_object();
  std::ofstream(directory / "cases.json") << json.text();
  std::ofstream(directory / "torch_benchmark.py") << kTorchBenchmarkScript;

  std::string error;
  const int status = run_process({python, (directory / "torch_benchmark.py").string(),
                                  (directory / "cases.json").string(), (directory / "results.json").string()},
                                 directory / "log.txt", error);
  if (status != 0) {
    failure =
        status < 0 ? error : str_cat(python, " could not time the fixes: ", last_line(directory / "log.txt"));
    return {};
  }
  std::stringstream text;
  text << std::ifstream(directory / "results.json").rdbuf();
  rapidjson::Document document;
  document.Parse(text.str().c_str());
  if (document.HasParseError() || !document.IsObject() || !document.HasMember("results") ||
      !document["results"].IsArray()) {
    failure = "the benchmark wrote no results";
    return {};
  }
  std::vector<Result> results(cases.size(), Result{0, "not timed"});
  for (const auto& item : document["results"].GetArray()) {
    if (!item.IsObject() || !item.HasMember("id") || !item["id"].IsUint()) continue;
    const size_t id = item["id"].GetUint();
    if (id >= results.size()) continue;
    if (item.HasMember("error") && item["error"].IsString()) {
      results[id] = {0, item["error"].GetString()};
    } else if (item.HasMember("before_us") && item["before_us"].IsNumber() && item.HasMember("after_us") &&
               item["after_us"].IsNumber()) {
      results[id] = {item["before_us"].GetDouble() - item["after_us"].GetDouble(), {}};
    }
  }
  return results;
}

}  // namespace

std::string torch_python() {
  const char* chosen = std::getenv("KILN_TORCH_PYTHON");
  return chosen != nullptr && *chosen != '\0' ? chosen : "/usr/bin/python3";
}

void estimate_torch_savings(TidyReport& report, const profiler::Trace& trace, const std::string& python) {
  report.estimates.clear();
  std::map<std::string, std::vector<TidyMatch*>> by_pattern;
  for (TidyMatch& match : report.matches) by_pattern[match.pattern].push_back(&match);

  // Each match's case, and the distinct cases to time.
  std::map<Case, size_t> case_ids;
  std::vector<Case> cases;
  std::map<const TidyMatch*, size_t> case_of;
  const Reason unusable = unmeasurable(trace);
  const std::string extensions = profiler::machine_facts().at("cpu_extensions");
  std::vector<PatternEstimate> estimates;
  // The patterns whose fix PyTorch times (TidyMatch::fix), each match's call a case.
  for (const auto& [name, count] : report.counts) {  // in the order the patterns ran
    const auto found = by_pattern.find(name);
    if (found == by_pattern.end()) continue;
    // Each match's own fix (a user pattern may declare several, or none for some matches).
    const auto timed = std::find_if(found->second.begin(), found->second.end(), [](const TidyMatch* match) {
      return match->fix.kind == Fix::Kind::torch_benchmark;
    });
    if (timed == found->second.end()) continue;
    const Fix& fix = (*timed)->fix;
    PatternEstimate estimate{name, 0, std::nullopt, fix.what};
    for (const TidyMatch* match : found->second) estimate.matched_ms += match->time_ms;
    if (unusable) {
      estimate.basis = *unusable;
    } else if (fix.torch_fix == "bf16_autocast" && !has_bf16(extensions)) {
      estimate.basis = str_cat("this CPU has no bf16 arithmetic (extensions: ", extensions, ")");
    } else {
      for (const TidyMatch* match : found->second) {
        if (match->fix.kind != Fix::Kind::torch_benchmark) continue;  // stays not estimated
        const TraceEvent& event = trace.events[match->event_id - 1];
        Case one{match->fix.torch_fix, event.name, event.input_shapes, event.input_dtypes};
        auto it = case_ids.find(one);
        if (it == case_ids.end()) {
          if (cases.size() >= kMaxCases) continue;  // this match stays not estimated
          it = case_ids.emplace(one, cases.size()).first;
          cases.push_back(std::move(one));
        }
        case_of[match] = it->second;
      }
    }
    estimates.push_back(std::move(estimate));
  }

  std::string failure;
  const std::vector<Result> results =
      cases.empty() ? std::vector<Result>() : time_cases(cases, trace, python, failure);
  for (PatternEstimate& estimate : estimates) {
    std::vector<TidyMatch*>& matches = by_pattern[estimate.pattern];
    if (!failure.empty() && case_of.count(matches.front()) != 0) estimate.basis = failure;
    double total = 0;
    bool any = false;
    std::string errors;
    for (TidyMatch* match : matches) {
      const auto id = case_of.find(match);
      if (id == case_of.end() || id->second >= results.size()) continue;
      const Result& result = results[id->second];
      if (!result.error.empty()) {
        if (errors.find(result.error) == std::string::npos)
          errors += str_cat(errors.empty() ? "" : "; ", result.error);
        continue;
      }
      match->estimated_saving_ms = result.saving_us / 1000;
      total += *match->estimated_saving_ms;
      any = true;
    }
    if (any) estimate.saving_ms = total;
    if (!errors.empty()) estimate.basis += str_cat(any ? "; some not timed: " : "; not timed: ", errors);
  }
  report.estimates = std::move(estimates);
}

}  // namespace kiln::tidy
