#include "tidy/step_flow.h"

#include <string>
#include <unordered_map>

namespace kiln::tidy {

StepFlow::StepFlow(const EventTree& tree) {
  const size_t size = tree.size();
  bool any_step = false;
  for (EventIndex i = 0; i < size && !any_step; ++i) any_step = is_step(tree.event(i));
  if (!any_step) return;
  links_.resize(size);
  run_.assign(size, kNoEvent);
  // Parents precede children, so each event's run is its parent's (or the parent itself).
  for (EventIndex i = 0; i < size; ++i) {
    const EventIndex parent = tree.parent(i);
    if (parent == kNoEvent) continue;
    run_[i] = tree.event(parent).kind == EventKind::run ? parent : run_[parent];
  }
  // Steps in start order: a value's producer started before its readers (parallel mode too).
  std::unordered_map<EventIndex, std::unordered_map<std::string, std::pair<EventIndex, size_t>>> written;
  for (EventIndex i = 0; i < size; ++i) {
    const TraceEvent& event = tree.event(i);
    if (!is_step(event) || run_[i] == kNoEvent) continue;
    auto& values = written[run_[i]];
    Links& links = links_[i];
    links.producers.assign(event.inputs.size(), kNoEvent);
    links.readers.resize(event.outputs.size());
    for (size_t input = 0; input < event.inputs.size(); ++input) {
      if (event.inputs[input].empty()) continue;
      const auto found = values.find(event.inputs[input]);
      if (found == values.end()) continue;
      links.producers[input] = found->second.first;
      std::vector<EventIndex>& readers = links_[found->second.first].readers[found->second.second];
      if (readers.empty() || readers.back() != i) readers.push_back(i);  // a step reading it twice, once
    }
    for (size_t output = 0; output < event.outputs.size(); ++output) {
      if (!event.outputs[output].empty()) values[event.outputs[output]] = {i, output};
    }
  }
}

EventIndex StepFlow::producer(EventIndex step, size_t input) const {
  if (step >= links_.size() || input >= links_[step].producers.size()) return kNoEvent;
  return links_[step].producers[input];
}

std::span<const EventIndex> StepFlow::readers(EventIndex step, size_t output) const {
  if (step >= links_.size() || output >= links_[step].readers.size()) return {};
  return links_[step].readers[output];
}

EventIndex StepFlow::run_of(EventIndex step) const {
  return step < run_.size() ? run_[step] : kNoEvent;
}

}  // namespace kiln::tidy
