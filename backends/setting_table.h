// The one table of kiln's settings. Each row describes a setting once: its name, type, default,
// range, whether it changes the plan, its environment variable and its help text. Everything
// else is derived from the rows: the Settings value and its guards (settings.h), the CLI options
// (tools/setting_options.cpp), the Python keyword arguments and current() (python/), the
// "unknown setting" messages and the plan key (plan_key.h). Rows marked per_backend are expanded
// once per backend row of backends/registry.h ("enabled" becomes onednn_enabled, blas_enabled,
// native_enabled), so the table names no backend. docs/settings.md says how to add a row.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backends/base/kernel_request.h"
#include "backends/registry.h"
#include "ops/einsum_path.h"
#include "runtime/threads.h"

namespace kiln {

enum class SettingType : uint8_t {
  boolean,        // 0 or 1
  integer,        // min..max
  choice,         // an index into the row's `choices` (a precision, an execution mode)
  priority_list,  // an ordered subset of the row's `choices`, encoded by priority_list_value
  sink,           // where verbose lines go: held beside the values (Settings::verbose_sink)
};

// How the CLI spells a row.
enum class CliForm : uint8_t {
  value,    // --name VALUE
  flag,     // --name turns a boolean on
  disable,  // --disable BACKEND (repeatable) turns a per-backend boolean off
};

struct SettingRow {
  std::string_view name;  // per-backend rows: the part after "<backend>_"
  SettingType type = SettingType::boolean;
  int default_value = 0;
  int min = 0;  // integer rows
  int max = 1;
  bool per_backend = false;
  bool changes_plan = false;  // part of the plan key: plans are built per value
  CliForm cli = CliForm::value;
  std::string_view env = {};  // read once, when the settings are first used
  std::string_view help = {};
  std::span<const std::string_view> choices = {};  // choice rows: the value names, by index
  std::string_view empty_list = "none";            // priority-list rows: the empty list's name
};

// The names of the choice rows' values, in the order of their enums.
inline constexpr std::string_view kPrecisionChoices[] = {"fp32", "bf16"};  // Precision
static_assert(static_cast<int>(Precision::fp32) == 0 && static_cast<int>(Precision::bf16) == 1);
// How a run executes its plan's steps (see graph/executor.h).
enum class ExecutionMode : uint8_t { sequential, parallel };
inline constexpr std::string_view kExecutionModeChoices[] = {"sequential", "parallel"};

// A priority list as one int: choice index + 1 in kPriorityListBits bits per position, first
// position lowest (0 ends the list), so lists of up to kMaxPriorityListLength choices fit.
inline constexpr int kPriorityListBits = 3;
inline constexpr int kMaxPriorityListLength = 10;
constexpr int priority_list_value(std::span<const int> choices) {
  int value = 0;
  int shift = 0;
  for (int choice : choices) {
    value |= (choice + 1) << shift;
    shift += kPriorityListBits;
  }
  return value;
}
constexpr int priority_list_value(std::initializer_list<int> choices) {
  return priority_list_value(std::span<const int>(choices.begin(), choices.size()));
}
// The choice indexes of an encoded list, in priority order.
std::vector<int> priority_list(int value);

inline constexpr int kMaxVerboseLevel = 2;
// kMaxThreads, and the thread count's own precedence (threads = 0), live in runtime/threads.h.
inline constexpr int kMaxAutotuneLimit = 64;
inline constexpr int kMaxBlasThreshold = 1 << 30;

// A prefer_<family> row: which backends and named kernels may run that op family, in order.
constexpr SettingRow prefer_row(std::string_view name, std::string_view help) {
  return SettingRow{.name = name,
                    .type = SettingType::priority_list,
                    .changes_plan = true,
                    .help = help,
                    .choices = registry_data::kKernelChoices,
                    .empty_list = "default"};
}
#define KILN_PREFER_HELP(ops)                                                                              \
  "backends (onednn, blas, winograd, native) and named kernels (math, flash) that may run " ops            \
  ", in priority order (comma-separated): the first that takes a node runs it, the others are not asked, " \
  "and a node none of them takes is a planning error listing each reason; 'default': every backend in "    \
  "the registry's order"

inline constexpr std::array kSettingRows = {
    SettingRow{.name = "enabled",
               .default_value = 1,
               .per_backend = true,
               .changes_plan = true,
               .cli = CliForm::disable,
               .help = "kernel selection may use this backend (the native fallback cannot be disabled)"},
    SettingRow{.name = "verbose",
               .type = SettingType::integer,
               .max = kMaxVerboseLevel,
               .per_backend = true,
               .help = "kiln's lines for this backend's steps and library calls, and the library's own "
                       "verbose where it has one (oneDNN)"},
    SettingRow{.name = "conv_precision",
               .type = SettingType::choice,
               .default_value = static_cast<int>(Precision::fp32),
               .changes_plan = true,
               .help = "fp32|bf16: precision of convolutions (bf16 where the CPU has a bf16 tier)",
               .choices = kPrecisionChoices},
    SettingRow{.name = "matmul_precision",
               .type = SettingType::choice,
               .default_value = static_cast<int>(Precision::fp32),
               .changes_plan = true,
               .help = "fp32|bf16: precision of matrix products",
               .choices = kPrecisionChoices},
    SettingRow{.name = "deterministic",
               .changes_plan = true,
               .cli = CliForm::flag,
               .help = "only kernels whose results do not depend on the run or the thread count"},
    SettingRow{.name = "autotune",
               .changes_plan = true,
               .cli = CliForm::flag,
               .help = "time candidate kernels per node at plan time and keep the fastest"},
    SettingRow{.name = "autotune_limit",
               .type = SettingType::integer,
               .default_value = 10,
               .max = kMaxAutotuneLimit,
               .changes_plan = true,
               .help = "candidates autotune times per node (0: every candidate)"},
    SettingRow{.name = "threads",
               .type = SettingType::integer,
               .max = kMaxThreads,
               .changes_plan = true,
               .help = "intra-op threads (0: KILN_NUM_THREADS, else MKL_NUM_THREADS, else OMP_NUM_THREADS, "
                       "else the cores)"},
    SettingRow{.name = "execution_mode",
               .type = SettingType::choice,
               .default_value = static_cast<int>(ExecutionMode::sequential),
               .changes_plan = true,
               .help = "sequential|parallel: parallel runs independent branches of the graph at the same "
                       "time on the inter-op pool, each with part of the run's threads, where measuring at "
                       "plan time shows that to be faster",
               .choices = kExecutionModeChoices},
    SettingRow{.name = "sdpa_kernels",
               .type = SettingType::priority_list,
               // onednn, flash, math (registry_data::kSdpaKernels' indexes): fastest first, as
               // measured in docs/attention.md; flash takes what oneDNN refuses in O(L) memory.
               .default_value = priority_list_value({2, 1, 0}),
               .changes_plan = true,
               .help = "attention kernels the planner may use for a recognized attention subgraph, in "
                       "priority order (comma-separated; 'none' leaves attention unfused): the first "
                       "that can take it runs it; when none can, planning fails with each one's reason",
               .choices = registry_data::kSdpaKernels},
    prefer_row("prefer_conv", KILN_PREFER_HELP("convolutions")),
    prefer_row("prefer_matmul",
               KILN_PREFER_HELP("matrix products (MatMul, Gemm; Einsum, which only native runs)")),
    prefer_row("prefer_attention", KILN_PREFER_HELP("fused attention steps (after sdpa_kernels' choice)")),
    prefer_row("prefer_quantized",
               KILN_PREFER_HELP("int8 ops (QLinearConv, QLinearMatMul, MatMulInteger, QuantizeLinear, ...)")),
    prefer_row("prefer_other", KILN_PREFER_HELP("every other op")),
    SettingRow{.name = "blas_threshold",
               .type = SettingType::integer,
               .default_value = static_cast<int>(kDefaultSmallProductLimit),
               .max = kMaxBlasThreshold,
               .changes_plan = true,
               .help = "the largest product (M x N x K multiply-adds) BLAS may take; BLAS is asked first for "
                       "products and one BLAS call beats oneDNN's per-call overhead only on tiny ones "
                       "(bench/blas_crossover.py); 0: none"},
    SettingRow{.name = "mha_fastpath",
               .default_value = 1,
               .changes_plan = true,
               .help = "the MHA fast path: a transformer block's residual Add, the attention output's "
                       "transposition before it and the LayerNorm after it as one step; off plans them as "
                       "exported (torch.backends.mha.set_fastpath_enabled)"},
    SettingRow{.name = "rnn_fastpath",
               .default_value = 1,
               .changes_plan = true,
               .help =
                   "the fast RNN path: LSTM, GRU and RNN layers on oneDNN's RNN primitives where they take "
                   "the node; off runs them on the native kernel (torch.backends.cudnn's rnn switch on CPU)"},
    SettingRow{.name = "einsum_optimize",
               .default_value = 1,
               .changes_plan = true,
               .help = "order an Einsum's pairwise products by einsum_strategy (off: left to right); "
                       "torch.backends.opt_einsum.enabled"},
    SettingRow{.name = "einsum_strategy",
               .type = SettingType::choice,
               .default_value = static_cast<int>(EinsumStrategy::automatic),
               .changes_plan = true,
               .help =
                   "auto|greedy|optimal: how an Einsum's contraction order is chosen (numpy.einsum_path's "
                   "cost model); optimal tries every order and is refused above 8 operands, auto is optimal "
                   "up to 4 operands and greedy above; torch.backends.opt_einsum.strategy",
               .choices = kEinsumStrategyChoices},
    SettingRow{.name = "conv_algorithm",
               .type = SettingType::choice,
               .default_value = static_cast<int>(ConvAlgorithm::automatic),
               .changes_plan = true,
               .help = "auto|direct|winograd: how stride-1 3x3 convolutions compute; auto runs Winograd "
                       "(fewer multiplies, more rounding) on a layer only where its error on the layer's "
                       "filters stays within a bound, or within the layer's share of the model's error "
                       "budget, and its cost model predicts it faster than the direct kernel (no timing: "
                       "every process plans the same), "
                       "direct never, winograd wherever the Winograd backend can; torch.backends.nnpack",
               .choices = kConvAlgorithmChoices},
    SettingRow{.name = "adapt_to_load",
               .default_value = 1,
               .env = "KILN_ADAPT_TO_LOAD",
               .help =
                   "while other processes keep some of the cores busy, runs whose thread count nobody set "
                   "(the cores) use only the free ones; outside deterministic mode the last bits of "
                   "outputs may differ between thread counts"},
    SettingRow{.name = "use_mmap",
               .default_value = 1,
               .env = "KILN_USE_MMAP",
               .help = "map model files and their external data instead of reading them: weights cost memory "
                       "only while read, and processes loading the same file share its pages (the file must "
                       "then be replaced, not rewritten in place, while a session uses it)"},
    SettingRow{.name = "verbose",
               .type = SettingType::integer,
               .max = kMaxVerboseLevel,
               .env = "KILN_VERBOSE",
               .help = "1: a line per executed step and library call, 2: a line per planned step too"},
    SettingRow{.name = "verbose_sink",
               .type = SettingType::sink,
               .help = "where verbose lines go: standard output, a file (appended) or a callback"},
};
#undef KILN_PREFER_HELP
inline constexpr int kSettingRowCount = static_cast<int>(kSettingRows.size());

// Settings are stored in slots: one per row, kBackendCount per per-backend row.
constexpr int slot_count(int rows) {
  int slots = 0;
  for (int r = 0; r < rows; ++r) slots += kSettingRows[r].per_backend ? kBackendCount : 1;
  return slots;
}
inline constexpr int kSettingSlotCount = slot_count(kSettingRowCount);
constexpr int first_slot(int row) {
  return slot_count(row);
}

consteval int find_setting_row(std::string_view name, bool per_backend) {
  for (int r = 0; r < kSettingRowCount; ++r) {
    if (kSettingRows[r].name == name && kSettingRows[r].per_backend == per_backend) return r;
  }
  throw "no such row in kSettingRows";  // a compile-time error where the name is spelled
}

// A setting of the whole process, named at compile time: settings.get("deterministic").
struct SettingKey {
  int slot;
  consteval SettingKey(const char* name) : slot(first_slot(find_setting_row(name, false))) {}
};
// A per-backend row, named at compile time: settings.get(BackendSettingKey("verbose"), backend).
struct BackendSettingKey {
  int first;
  consteval explicit BackendSettingKey(const char* name) : first(first_slot(find_setting_row(name, true))) {}
};

// One slot as users see it: "onednn_verbose", and what it belongs to.
struct SettingSlot {
  int slot = -1;
  const SettingRow* row = nullptr;
  int backend = -1;  // per-backend rows
  std::string name;
  std::string cli_name;  // "onednn-verbose"
  std::string help;      // the row's, "this backend" naming the backend
};
// Every slot in table order, backends expanded.
const std::array<SettingSlot, kSettingSlotCount>& setting_slots();
// The slot of a user-facing name; throws kiln::Error (invalid_argument) listing every known name.
const SettingSlot& find_setting(std::string_view name);
std::string known_setting_names();
// How the CLI spells a setting: "onednn_verbose" as "onednn-verbose".
std::string setting_cli_name(std::string_view name);

// Shorthands that set several slots at once (--precision / precision= sets both precisions).
struct SettingShorthand {
  std::string_view name;
  std::span<const std::string_view> targets;
  std::string_view help;
};
inline constexpr std::string_view kPrecisionTargets[] = {"conv_precision", "matmul_precision"};
inline constexpr std::string_view kPreferTargets[] = {"prefer_conv", "prefer_matmul", "prefer_attention",
                                                      "prefer_quantized", "prefer_other"};
inline constexpr std::array kSettingShorthands = {
    SettingShorthand{"precision", kPrecisionTargets,
                     "fp32|bf16: precision of convolutions and matrix products"},
    SettingShorthand{
        "prefer", kPreferTargets,
        "backends and named kernels that may run every op family, in priority order "
        "(prefer_conv, prefer_matmul, prefer_attention, prefer_quantized and prefer_other at once)"},
};
// The prefer_<family> slot of op family `family` (registry_data::kOpFamilies' index).
int prefer_slot(int family);
const SettingShorthand* find_shorthand(std::string_view name);

// A slot's value parsed from text (CLI, environment): booleans 0/1/true/false/on/off, integers in
// the row's range, choices by name (fp32/bf16, sequential/parallel). Throws kiln::Error (invalid_argument)
// naming `source`.
int parse_setting_value(const SettingSlot& slot, std::string_view text, std::string_view source);
// Checks a value against the row's type and range; throws naming the setting.
void check_setting_value(const SettingSlot& slot, int value);
// The value as text: "1", "bf16", "parallel".
std::string setting_value_text(const SettingSlot& slot, int value);
std::string_view setting_type_name(SettingType type);
// A choice row's value names for messages: "'fp32' or 'bf16'".
std::string choice_names(const SettingRow& row);

}  // namespace kiln
