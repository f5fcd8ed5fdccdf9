#include "core/process_scan.h"

namespace vramd {

bool ProcessListSchedule::due(const std::string& key, Bytes used) const {
  if (force_) return true;
  auto it = kept_.find(key);
  if (it == kept_.end()) return true;
  const Kept& k = it->second;
  Bytes moved = used > k.used ? used - k.used : k.used - used;
  return moved >= policy_.threshold || now_ - k.at >= policy_.interval;
}

void ProcessListSchedule::listed(const std::string& key, Bytes used, bool readable,
                                 const std::vector<ProcessMemory>& processes) {
  if (!readable) {  // nothing to stand for the next samples: read again next time
    kept_.erase(key);
    return;
  }
  Kept& k = kept_[key];
  k.used = used;
  k.at = now_;
  k.processes = processes;
}

const std::vector<ProcessMemory>& ProcessListSchedule::last(const std::string& key) const {
  static const std::vector<ProcessMemory> kNone;
  auto it = kept_.find(key);
  return it == kept_.end() ? kNone : it->second.processes;
}

}  // namespace vramd
