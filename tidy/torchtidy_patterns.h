// TorchTidy's patterns as PyTorch 1.13 has them (torch/profiler/_pattern_matcher.py), rule for rule
// and count for count, flaws included: where a rule is wrong for a trace its caveat says so, and
// kiln's corrected checks (corrected_patterns.h) are separate patterns under their own names.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tidy/pattern.h"

namespace kiln::tidy {

// NamePattern: events whose name contains a match of `regex` (ECMAScript syntax; TorchTidy uses
// Python's re.search). Throws invalid_argument naming the regex if it does not compile.
std::unique_ptr<Pattern> name_pattern(const std::string& regex);

// ExtraCUDACopyPattern, ForLoopIndexingPattern (which report_all_anti_patterns leaves out; kiln runs
// it), FP32MatMulPattern, OptimizerSingleTensorPattern, SynchronizedDataLoaderPattern,
// GradNotSetToNonePattern, Conv2dBiasFollowedByBatchNorm2dPattern, MatMulDimInFP16Pattern: in 1.13's
// order.
std::vector<std::unique_ptr<Pattern>> torchtidy_patterns();

// The ExtraCUDACopyPattern chain from an `aten::to`: its last child `aten::_to_copy`, whose last child
// is an `aten::copy_` with equal dtypes for its first two inputs, and the previous sibling of the
// `aten::to`'s parent leading through last children to a fill (fill_, zero_, normal_, uniform_).
// Returns the copy_, or kNoEvent. TorchTidy's previous sibling may be a memory event (a tensor freed
// between the fill and the copy hides the fill); `past_memory_events` looks past them.
EventIndex extra_copy_of(const TidyContext& context, EventIndex to, bool past_memory_events = false);

// Whether the operator launched GPU work (a CUDA runtime call, kernel or copy below it); with
// `copy_only`, a memory copy.
bool launched_gpu_work(const TidyContext& context, EventIndex op, bool copy_only);

}  // namespace kiln::tidy
