// A tidy report as one self-contained HTML page: where the trace's time went (self time by op and, for
// kiln traces, by backend, as bars), the findings with where each is, the estimates with what they
// were measured by, and what was not evaluated. Inline CSS, no script, nothing fetched: it opens
// offline and can be attached to an issue.
#pragma once

#include <string>

#include "profiler/trace.h"
#include "tidy/report.h"

namespace kiln::tidy {

std::string html_report(const TidyReport& report, const profiler::Trace& trace);

// Writes html_report to `path`; throws invalid_argument naming the file if it cannot.
void write_html_report(const TidyReport& report, const profiler::Trace& trace, const std::string& path);

}  // namespace kiln::tidy
