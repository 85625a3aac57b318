#include "tidy/user_patterns.h"

#include <algorithm>
#include <cstdint>
#include <utility>

namespace kiln::tidy {
namespace {

class RecordedPattern final : public Pattern {
 public:
  explicit RecordedPattern(const PatternResult& result) : result_(result) {
    for (size_t i = 0; i < result_.matched.size(); ++i) position_.emplace_back(result_.matched[i], i);
    std::sort(position_.begin(), position_.end());
  }

  bool reads_any_trace() const override { return true; }
  std::string name() const override { return result_.name; }
  std::string description() const override { return result_.description; }
  std::string url() const override { return result_.url; }
  Reason skip(const TidyContext&) const override { return result_.skip; }
  bool match(const TidyContext&, EventIndex event) override { return find(event) != kNone; }
  std::vector<EventIndex> matched_events(const TidyContext&) override { return result_.matched; }
  std::string detail(const TidyContext&, EventIndex event) const override {
    return at(result_.details, event);
  }
  std::string reason(const TidyContext&, EventIndex event) const override {
    return at(result_.reasons, event);
  }
  std::string report(const TidyContext& context, EventIndex event) const override {
    const size_t i = find(event);
    return i < result_.messages.size() ? result_.messages[i] : Pattern::report(context, event);
  }
  std::string summary(const TidyContext& context, std::span<const EventIndex> events) const override {
    return result_.summary.empty() ? Pattern::summary(context, events) : result_.summary;
  }
  Fix fix(const TidyContext& context, EventIndex event) const override {
    const size_t i = find(event);
    return i < result_.fixes.size() ? result_.fixes[i] : Pattern::fix(context, event);
  }

 private:
  static constexpr size_t kNone = SIZE_MAX;

  // The match's position in the result (the first, if the pattern matched an event twice).
  size_t find(EventIndex event) const {
    const auto found = std::lower_bound(position_.begin(), position_.end(), std::pair{event, size_t{0}});
    return found != position_.end() && found->first == event ? found->second : kNone;
  }
  std::string at(const std::vector<std::string>& texts, EventIndex event) const {
    const size_t i = find(event);
    return i < texts.size() ? texts[i] : std::string();
  }

  const PatternResult& result_;
  std::vector<std::pair<EventIndex, size_t>> position_;
};

PatternFileRunner& runner_slot() {
  static PatternFileRunner runner;
  return runner;
}

}  // namespace

std::unique_ptr<Pattern> recorded_pattern(const PatternResult& result) {
  return std::make_unique<RecordedPattern>(result);
}

void set_pattern_file_runner(PatternFileRunner runner) {
  runner_slot() = std::move(runner);
}

const PatternFileRunner& pattern_file_runner() {
  return runner_slot();
}

}  // namespace kiln::tidy
