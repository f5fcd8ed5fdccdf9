#include "host/cgroup.h"

#include <optional>
#include <string>
#include <vector>

namespace vramd {
namespace {

bool is_hex(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    bool hex = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
    if (!hex) return false;
  }
  return true;
}

// Container ids in cgroup paths are 64 hex; prefixed forms are accepted from 12 up, bare
// segments must be the full 64 to avoid taking any hex-looking directory for a container.
bool is_prefixed_id(std::string_view s) { return s.size() >= 12 && is_hex(s); }
bool is_bare_id(std::string_view s) { return s.size() == 64 && is_hex(s); }

// If `s` is `prefix` + middle + `suffix`, returns middle.
std::optional<std::string_view> between(std::string_view s, std::string_view prefix,
                                        std::string_view suffix) {
  if (s.size() < prefix.size() + suffix.size()) return std::nullopt;
  if (!s.starts_with(prefix) || !s.ends_with(suffix)) return std::nullopt;
  return s.substr(prefix.size(), s.size() - prefix.size() - suffix.size());
}

// A pod UID after "pod" in a segment: 8-4-4-4-12 hex with '-' (cgroupfs) or '_' (systemd).
std::optional<std::string> find_pod_uid(std::string_view seg) {
  for (size_t at = seg.find("pod"); at != std::string_view::npos; at = seg.find("pod", at + 1)) {
    std::string_view rest = seg.substr(at + 3);
    if (rest.size() < 36) continue;
    std::string uid;
    bool ok = true;
    for (size_t i = 0; i < 36 && ok; ++i) {
      char c = rest[i];
      if (i == 8 || i == 13 || i == 18 || i == 23) {
        ok = c == '-' || c == '_';
        uid += '-';
      } else {
        ok = is_hex(std::string_view(&c, 1));
        uid += c;
      }
    }
    if (ok) return uid;
  }
  return std::nullopt;
}

struct ContainerMatch {
  std::string runtime;
  std::string id;
};

std::string runtime_from_colon_name(std::string_view name) {
  if (name == "cri-containerd") return "containerd";
  if (name == "crio") return "cri-o";
  if (name == "docker") return "docker";
  if (name == "libpod") return "podman";
  return "";
}

std::optional<ContainerMatch> match_container(std::string_view seg, std::string_view previous) {
  if (seg.starts_with("libpod-conmon-") || seg.starts_with("crio-conmon-")) return std::nullopt;
  struct Form {
    std::string_view prefix, suffix, runtime;
  };
  static constexpr Form kForms[] = {
      {"docker-", ".scope", "docker"},
      {"libpod-payload-", "", "podman"},
      {"libpod-", ".scope", "podman"},
      {"libpod-", "", "podman"},
      {"cri-containerd-", ".scope", "containerd"},
      {"crio-", ".scope", "cri-o"},
  };
  for (const Form& f : kForms) {
    if (auto id = between(seg, f.prefix, f.suffix); id && is_prefixed_id(*id)) {
      return ContainerMatch{std::string(f.runtime), std::string(*id)};
    }
  }
  // containerd 1.4 with the systemd driver: "<pod slice>:cri-containerd:<id>".
  if (size_t c2 = seg.rfind(':'); c2 != std::string_view::npos) {
    size_t c1 = seg.rfind(':', c2 == 0 ? 0 : c2 - 1);
    std::string_view id = seg.substr(c2 + 1);
    if (c1 != std::string_view::npos && c1 < c2 && is_prefixed_id(id)) {
      return ContainerMatch{runtime_from_colon_name(seg.substr(c1 + 1, c2 - c1 - 1)),
                            std::string(id)};
    }
  }
  if (is_bare_id(seg)) {
    // `/docker/<id>` (cgroupfs driver); `/kubepods/<qos>/pod<uid>/<id>` does not say which runtime.
    return ContainerMatch{previous == "docker" ? "docker" : "", std::string(seg)};
  }
  return std::nullopt;
}

std::vector<std::string_view> split_path(std::string_view path) {
  std::vector<std::string_view> out;
  size_t pos = 0;
  while (pos <= path.size()) {
    size_t slash = path.find('/', pos);
    if (slash == std::string_view::npos) slash = path.size();
    if (slash > pos) out.push_back(path.substr(pos, slash - pos));
    pos = slash + 1;
  }
  return out;
}

}  // namespace

CgroupIdentity classify_cgroup_path(std::string_view path) {
  CgroupIdentity id;
  id.path = std::string(path);
  if (path.starts_with("/..") || path.starts_with("..")) {
    id.kind = CgroupIdentity::Kind::private_ns;
    return id;
  }
  std::vector<std::string_view> segs = split_path(path);
  std::optional<ContainerMatch> container;
  std::string container_pod;   // pod uid of the last container
  std::string container_unit;  // the .service directly above the last container
  std::string pending_pod;     // pod seen since the last container
  std::string_view last_unit;  // last .service/.scope that is not a container
  std::string_view previous;
  for (std::string_view seg : segs) {
    if (auto pod = find_pod_uid(seg)) pending_pod = *pod;
    if (auto m = match_container(seg, previous)) {
      container = std::move(*m);
      container_pod = pending_pod;
      container_unit = previous.ends_with(".service") ? std::string(previous) : "";
      pending_pod.clear();
    } else if (seg.ends_with(".service") || seg.ends_with(".scope")) {
      last_unit = seg;
    }
    previous = seg;
  }
  if (container) {
    id.kind = CgroupIdentity::Kind::container;
    id.runtime = std::move(container->runtime);
    id.container_id = std::move(container->id);
    id.pod_uid = std::move(container_pod);
    id.unit = std::move(container_unit);
  } else if (!last_unit.empty()) {
    bool session = last_unit.starts_with("session-") && last_unit.ends_with(".scope");
    id.kind = session ? CgroupIdentity::Kind::session : CgroupIdentity::Kind::unit;
    id.unit = std::string(last_unit);
  }
  return id;
}

CgroupIdentity parse_cgroup(std::string_view content) {
  std::optional<std::string_view> systemd, unified, memory, first_nonroot, any;
  size_t pos = 0;
  while (pos < content.size()) {
    size_t eol = content.find('\n', pos);
    if (eol == std::string_view::npos) eol = content.size();
    std::string_view line = content.substr(pos, eol - pos);
    pos = eol + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    // "hierarchy-id:controller-list:path"; the path itself may contain ':'.
    size_t c1 = line.find(':');
    if (c1 == std::string_view::npos) continue;
    size_t c2 = line.find(':', c1 + 1);
    if (c2 == std::string_view::npos) continue;
    std::string_view hier = line.substr(0, c1);
    std::string_view controllers = line.substr(c1 + 1, c2 - c1 - 1);
    std::string_view path = line.substr(c2 + 1);
    if (hier.empty() || path.empty() || path.front() != '/') continue;
    bool root = path == "/";
    if (!any) any = path;
    if (root) continue;
    if (!first_nonroot) first_nonroot = path;
    if (controllers == "name=systemd" && !systemd) systemd = path;
    if (hier == "0" && controllers.empty() && !unified) unified = path;
    if (!memory) {
      // "memory" alone or in a combined list.
      for (size_t p = 0; p <= controllers.size();) {
        size_t comma = controllers.find(',', p);
        if (comma == std::string_view::npos) comma = controllers.size();
        if (controllers.substr(p, comma - p) == "memory") memory = path;
        p = comma + 1;
      }
    }
  }
  for (const auto& choice : {systemd, unified, memory, first_nonroot, any}) {
    if (choice) return classify_cgroup_path(*choice);
  }
  return CgroupIdentity{};
}

}  // namespace vramd
