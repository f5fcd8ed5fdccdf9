#include "core/attribution.h"

#include <algorithm>
#include <numeric>

namespace vramd {
namespace {

Owner owner_of(const AttributionInput& in, int pid, const ProcessMemory& pm) {
  if (auto it = in.owners->find(pid); it != in.owners->end()) return it->second.owner;
  // Not in the host's process table: another PID namespace, or already gone.
  return {OwnerKind::process, process_owner_name(pid, pm.name)};
}

std::string name_of(const AttributionInput& in, const ProcessMemory& pm) {
  if (in.processes) {
    if (auto it = in.processes->find(pm.pid); it != in.processes->end()) return it->second->comm;
  }
  return pm.name.empty() ? "?" : pm.name;
}

}  // namespace

std::vector<Holding> attribute(const AttributionInput& in) {
  const GpuSample& gpu = *in.gpu;
  const Bytes used = gpu.used;

  // Owners with measured bytes, and owners of processes the driver gives no number for.
  std::map<Owner, Holding> measured;
  std::map<Owner, std::vector<const ProcessMemory*>> unmeasured;
  Bytes known = 0;
  for (const auto& pm : gpu.processes) {
    Owner o = owner_of(in, pm.pid, pm);
    if (pm.used) {
      Holding& h = measured[o];
      h.owner = o;
      h.source = Source::process;
      h.bytes += *pm.used;
      h.pids.push_back(pm.pid);
      known += *pm.used;
    } else {
      unmeasured[o].push_back(&pm);
    }
  }

  // The driver's per-process figures can add up to a little more than the card total reports
  // between two reads: scale them down so the holdings still sum to `used`.
  if (known > used && known > 0) {
    Bytes assigned = 0;
    Holding* largest = nullptr;
    for (auto& [o, h] : measured) {
      h.bytes = static_cast<Bytes>(static_cast<long double>(h.bytes) * used / known);
      assigned += h.bytes;
      if (!largest || h.bytes > largest->bytes) largest = &h;
    }
    if (largest) largest->bytes += used - assigned;
    known = used;
  }

  std::vector<Holding> out;
  out.reserve(measured.size());
  for (auto& [o, h] : measured) {
    // An owner can have both measured and unmeasured processes; it still gets residual below.
    out.push_back(std::move(h));
  }

  Bytes rest = used - known;
  Bytes baseline;
  if (in.baseline) {
    baseline = std::min(*in.baseline, rest);
  } else if (unmeasured.empty()) {
    baseline = rest;  // every process measured: what is left is the driver's
  } else {
    baseline = std::min(gpu.reserved.value_or(0), rest);
  }
  rest -= baseline;
  if (rest <= in.tolerance) {
    baseline += rest;
    rest = 0;
  }

  auto add_to = [&](const Owner& o, Bytes bytes, Source source,
                    const std::vector<const ProcessMemory*>& pms) {
    if (bytes == 0) return;  // candidates without bytes are listed under unknown instead
    for (auto& h : out) {
      if (h.owner == o) {
        h.bytes += bytes;
        if (h.source == Source::process) h.source = source == Source::self_report ? Source::self_report : Source::residual;
        for (auto* pm : pms) h.pids.push_back(pm->pid);
        return;
      }
    }
    Holding h;
    h.owner = o;
    h.bytes = bytes;
    h.source = source;
    for (auto* pm : pms) h.pids.push_back(pm->pid);
    out.push_back(std::move(h));
  };

  if (rest > 0) {
    if (unmeasured.size() == 1) {
      const auto& [o, pms] = *unmeasured.begin();
      add_to(o, rest, Source::residual, pms);
      rest = 0;
    } else if (!unmeasured.empty()) {
      // Several candidates: those that report their own memory get that much (never more than
      // is left); if one candidate remains, the rest is its; otherwise it is unknown.
      std::vector<const std::pair<const Owner, std::vector<const ProcessMemory*>>*> silent;
      for (const auto& entry : unmeasured) {
        auto it = in.self_reports.find(entry.first);
        if (it != in.self_reports.end() && rest > 0) {
          Bytes take = std::min(it->second, rest);
          add_to(entry.first, take, Source::self_report, entry.second);
          rest -= take;
        } else {
          silent.push_back(&entry);
        }
      }
      if (rest > 0 && silent.size() == 1) {
        add_to(silent[0]->first, rest, Source::residual, silent[0]->second);
        rest = 0;
      }
    }
  }

  // A process the driver lists at 0 bytes holds nothing worth a row.
  std::erase_if(out, [](const Holding& h) { return h.bytes == 0; });
  std::sort(out.begin(), out.end(), [](const Holding& a, const Holding& b) {
    if (a.bytes != b.bytes) return a.bytes > b.bytes;
    return a.owner < b.owner;
  });

  if (baseline > 0) {
    Holding h;
    h.owner = {OwnerKind::baseline, "baseline"};
    h.bytes = baseline;
    h.source = Source::baseline;
    out.push_back(std::move(h));
  }
  if (rest > 0) {
    Holding h;
    h.owner = {OwnerKind::unknown, "unknown"};
    h.bytes = rest;
    h.source = Source::unknown;
    for (const auto& pm : gpu.processes) {
      if (pm.used) continue;
      Owner o = owner_of(in, pm.pid, pm);
      if (in.self_reports.count(o)) continue;
      h.candidates.push_back({pm.pid, name_of(in, pm)});
      h.pids.push_back(pm.pid);
    }
    out.push_back(std::move(h));
  }
  for (auto& h : out) std::sort(h.pids.begin(), h.pids.end());
  return out;
}

}  // namespace vramd
