#include "core/model.h"

namespace vramd {

const char* to_string(GpuHealth h) {
  switch (h) {
    case GpuHealth::ok: return "ok";
    case GpuHealth::lost: return "lost";
    case GpuHealth::error: return "error";
  }
  return "?";
}

const char* to_string(CgroupIdentity::Kind k) {
  switch (k) {
    case CgroupIdentity::Kind::host: return "host";
    case CgroupIdentity::Kind::container: return "container";
    case CgroupIdentity::Kind::unit: return "unit";
    case CgroupIdentity::Kind::session: return "session";
    case CgroupIdentity::Kind::private_ns: return "private_ns";
  }
  return "?";
}

const char* to_string(OwnerKind k) {
  switch (k) {
    case OwnerKind::service: return "service";
    case OwnerKind::lease: return "lease";
    case OwnerKind::container: return "container";
    case OwnerKind::unit: return "unit";
    case OwnerKind::process: return "process";
    case OwnerKind::baseline: return "baseline";
    case OwnerKind::unknown: return "unknown";
  }
  return "?";
}

const char* to_string(Source s) {
  switch (s) {
    case Source::process: return "process";
    case Source::residual: return "residual";
    case Source::self_report: return "self_report";
    case Source::baseline: return "baseline";
    case Source::unknown: return "unknown";
  }
  return "?";
}

}  // namespace vramd
