// The words that decide something, as enums: parsed where they enter (the config parser, the
// Docker and systemd readers, the API), written back as the same words where people read them
// (JSON, events, the store). The core compares these, never text.
#pragma once

#include <optional>
#include <string_view>

namespace vramd {

// [services.NAME] restart: whether vramd starts a service again after it exits.
enum class RestartPolicy { on_failure, always, never };
// [services.NAME] on_ineffective_unload: what follows an unload that freed nothing or too little.
enum class IneffectiveUnload { report, restart, stop };
// What an unload's verdict did beyond the call (core/unload.h): nothing (it freed what it should),
// recorded it, or restarted or stopped the service.
enum class Escalation { none, report, restart, stop };
// Why a service was unloaded: asked by hand, its idle TTL, room for a lease, an exclusive group.
enum class UnloadReason { manual, idle, eviction, group };
// Who restarts a container or a unit besides vramd: Docker's HostConfig.RestartPolicy.Name
// ("no", "always", "unless-stopped", "on-failure") or a unit's Restart= ("no", "always",
// "on-success", "on-failure", "on-abnormal", "on-abort", "on-watchdog"). One set of words; each
// engine's rule is its own (core/supervision_containers.cc).
enum class EngineRestart {
  no,
  always,
  unless_stopped,
  on_failure,
  on_success,
  on_abnormal,
  on_abort,
  on_watchdog
};
// How a unit's run ended: systemd's Result= (systemd.exec(5), service.c's result table); `other`
// for a word this vramd does not know; `unknown` where vramd did not read how (a run that ended
// and was restarted between two reads).
enum class UnitResult {
  success,
  exit_code,
  signal,
  core_dump,
  timeout,
  watchdog,
  oom_kill,
  start_limit_hit,
  resources,
  protocol,
  exec_condition,
  other,
  unknown
};

std::string_view to_string(RestartPolicy p);
std::string_view to_string(IneffectiveUnload a);
std::string_view to_string(Escalation e);  // "" for none
std::string_view to_string(UnloadReason r);
std::optional<RestartPolicy> parse_restart_policy(std::string_view s);
std::optional<IneffectiveUnload> parse_ineffective_unload(std::string_view s);
std::optional<Escalation> parse_escalation(std::string_view s);  // "" is none
std::optional<UnloadReason> parse_unload_reason(std::string_view s);
std::string_view to_string(EngineRestart r);
std::string_view to_string(UnitResult r);
// "" is "no" (Docker leaves the name empty when none is set).
std::optional<EngineRestart> parse_engine_restart(std::string_view s);
// nullopt for "" (systemd says nothing yet); a word it does not know is `other`.
std::optional<UnitResult> parse_unit_result(std::string_view s);

}  // namespace vramd
