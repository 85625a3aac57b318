#include "runtime/call_log.h"

namespace kiln {
namespace {

thread_local const CallLog* installed = nullptr;

}  // namespace

const CallLog* call_log() {
  return installed;
}

ScopedCallLog::ScopedCallLog(const CallLog* log) : previous_(installed) {
  installed = log;
}

ScopedCallLog::~ScopedCallLog() {
  installed = previous_;
}

}  // namespace kiln
