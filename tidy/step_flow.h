// The data flow between the steps of each run in a kiln trace: which step wrote each value a step
// reads, and which steps read each value it writes (by the value names the plan gives its slots).
// kiln's runtime patterns read it to see a Reorder's neighbours and a chain of elementwise steps.
#pragma once

#include <span>
#include <vector>

#include "tidy/event_tree.h"

namespace kiln::tidy {

// A plan step's event (a step or a Reorder).
inline bool is_step(const TraceEvent& event) {
  return event.kind == EventKind::step || event.kind == EventKind::reorder;
}

class StepFlow {
 public:
  // Empty for a trace without kiln steps.
  explicit StepFlow(const EventTree& tree);

  // The step of the same run that wrote `step`'s input `input`, or kNoEvent (a graph input, a
  // constant, or a step not recorded).
  EventIndex producer(EventIndex step, size_t input) const;
  // The steps of the same run that read `step`'s output `output` (none: a graph output, or unused).
  std::span<const EventIndex> readers(EventIndex step, size_t output) const;
  // The run a step belongs to (kNoEvent for a step recorded outside one).
  EventIndex run_of(EventIndex step) const;

 private:
  struct Links {
    std::vector<EventIndex> producers;             // per input
    std::vector<std::vector<EventIndex>> readers;  // per output
  };
  std::vector<Links> links_;     // per event (empty for events that are not steps)
  std::vector<EventIndex> run_;  // per event
};

}  // namespace kiln::tidy
