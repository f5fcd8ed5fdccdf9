#include "core/service_status.h"

#include "core/service_kinds.h"

namespace vramd {

const char* to_string(ServiceState s) {
  switch (s) {
    case ServiceState::unknown:
      return "unknown";
    case ServiceState::up:
      return "up";
    case ServiceState::unreachable:
      return "unreachable";
    case ServiceState::unloading:
      return "unloading";
  }
  return "?";
}

const char* to_string(ManagedPhase p) {
  switch (p) {
    case ManagedPhase::stopped:
      return "stopped";
    case ManagedPhase::queued:
      return "queued";
    case ManagedPhase::starting:
      return "starting";
    case ManagedPhase::running:
      return "running";
    case ManagedPhase::stopping:
      return "stopping";
    case ManagedPhase::backoff:
      return "backoff";
    case ManagedPhase::failed:
      return "failed";
  }
  return "?";
}

const std::vector<ManagedPhase>& all_managed_phases() {
  static const std::vector<ManagedPhase> all = {
      ManagedPhase::stopped,  ManagedPhase::queued,  ManagedPhase::starting, ManagedPhase::running,
      ManagedPhase::stopping, ManagedPhase::backoff, ManagedPhase::failed};
  return all;
}

const char* to_string(Command c) {
  switch (c) {
    case Command::start:
      return "start";
    case Command::stop:
      return "stop";
    case Command::restart:
      return "restart";
  }
  return "?";
}

std::optional<Command> parse_command(std::string_view s) {
  for (Command c : {Command::start, Command::stop, Command::restart})
    if (s == to_string(c)) return c;
  return std::nullopt;
}

const char* to_string(Control c) {
  switch (c) {
    case Control::none:
      return "";
    case Control::managed:
      return "managed";
    case Control::container:
      return "container";
    case Control::unit:
      return "unit";
  }
  return "?";
}

const char* to_string(SleepDepth d) {
  switch (d) {
    case SleepDepth::sleep1:
      return "sleep1";
    case SleepDepth::sleep2:
      return "sleep2";
    case SleepDepth::stop:
      return "stop";
    case SleepDepth::suspend:
      return "suspend";
  }
  return "?";
}

std::optional<SleepDepth> parse_sleep_depth(std::string_view s) {
  for (SleepDepth d :
       {SleepDepth::sleep1, SleepDepth::sleep2, SleepDepth::stop, SleepDepth::suspend})
    if (s == to_string(d)) return d;
  return std::nullopt;
}

std::string describe_depth(SleepDepth d, std::string_view kind) {
  const ServiceKind* k = find_service_kind(kind);
  if (k && k->sleep_levels && (d == SleepDepth::sleep1 || d == SleepDepth::sleep2))
    return d == SleepDepth::sleep1 ? "level 1" : "level 2";
  return to_string(d);
}

}  // namespace vramd
