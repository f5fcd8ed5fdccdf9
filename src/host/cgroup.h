// cgroup → owner identity: reads /proc/PID/cgroup text and says whether the process sits in a
// container (Docker, Podman, containerd, CRI-O; in a Kubernetes pod or not), a systemd unit, a
// login session, the host, or a private cgroup namespace we cannot see out of.
#pragma once

#include <string_view>

#include "core/model.h"

namespace vramd {

// Parses the content of /proc/PID/cgroup (v1, v2 or hybrid) and classifies the chosen path.
// Which line: v1 `name=systemd`, else the v2 `0::` line, else `memory`, else the first non-root
// path; a line that is "/" everywhere gives the host. Malformed lines are skipped; empty input
// gives Kind::host with an empty path. Never fails: an unknown shape is Kind::host.
CgroupIdentity parse_cgroup(std::string_view file_content);

// Classifies one cgroup path ("/system.slice/docker-<id>.scope").
//  - Nested containers (kind, Docker in Docker): the last container id in the path wins.
//  - Podman's conmon (`libpod-conmon-<id>.scope`) and CRI-O's (`crio-conmon-<id>.scope`) are
//    not the container but its monitor: they classify as a unit named after the scope.
//  - A container whose parent cgroup is a `.service` (Podman quadlet `<name>.service/
//    libpod-payload-<id>`) also records that service in `unit`.
//  - Kubernetes cgroupfs (`/kubepods/<qos>/pod<uid>/<id>`) does not name the runtime: runtime "".
//  - A path starting with "/.." is relative to a private cgroup namespace: Kind::private_ns.
CgroupIdentity classify_cgroup_path(std::string_view path);

}  // namespace vramd
