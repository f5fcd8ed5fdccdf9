#include "core/policies.h"

#include <array>
#include <utility>

namespace vramd {
namespace {

template <class E, size_t N>
std::string_view word_of(const std::array<std::pair<E, std::string_view>, N>& words, E e) {
  for (const auto& [value, word] : words)
    if (value == e) return word;
  return "";
}
template <class E, size_t N>
std::optional<E> value_of(const std::array<std::pair<E, std::string_view>, N>& words,
                          std::string_view s) {
  for (const auto& [value, word] : words)
    if (word == s) return value;
  return std::nullopt;
}

constexpr std::array<std::pair<RestartPolicy, std::string_view>, 3> kRestart = {
    {{RestartPolicy::on_failure, "on-failure"},
     {RestartPolicy::always, "always"},
     {RestartPolicy::never, "never"}}};
constexpr std::array<std::pair<IneffectiveUnload, std::string_view>, 3> kIneffective = {
    {{IneffectiveUnload::restart, "restart"},
     {IneffectiveUnload::stop, "stop"},
     {IneffectiveUnload::report, "report"}}};
constexpr std::array<std::pair<Escalation, std::string_view>, 4> kEscalation = {
    {{Escalation::none, ""},
     {Escalation::report, "report"},
     {Escalation::restart, "restart"},
     {Escalation::stop, "stop"}}};
constexpr std::array<std::pair<UnloadReason, std::string_view>, 4> kReason = {
    {{UnloadReason::manual, "manual"},
     {UnloadReason::idle, "idle"},
     {UnloadReason::eviction, "eviction"},
     {UnloadReason::group, "group"}}};

constexpr std::array<std::pair<EngineRestart, std::string_view>, 8> kEngineRestart = {
    {{EngineRestart::no, "no"},
     {EngineRestart::always, "always"},
     {EngineRestart::unless_stopped, "unless-stopped"},
     {EngineRestart::on_failure, "on-failure"},
     {EngineRestart::on_success, "on-success"},
     {EngineRestart::on_abnormal, "on-abnormal"},
     {EngineRestart::on_abort, "on-abort"},
     {EngineRestart::on_watchdog, "on-watchdog"}}};
constexpr std::array<std::pair<UnitResult, std::string_view>, 13> kUnitResult = {
    {{UnitResult::success, "success"},
     {UnitResult::exit_code, "exit-code"},
     {UnitResult::signal, "signal"},
     {UnitResult::core_dump, "core-dump"},
     {UnitResult::timeout, "timeout"},
     {UnitResult::watchdog, "watchdog"},
     {UnitResult::oom_kill, "oom-kill"},
     {UnitResult::start_limit_hit, "start-limit-hit"},
     {UnitResult::resources, "resources"},
     {UnitResult::protocol, "protocol"},
     {UnitResult::exec_condition, "exec-condition"},
     {UnitResult::other, "other"},
     {UnitResult::unknown, "unknown"}}};

}  // namespace

std::string_view to_string(EngineRestart r) { return word_of(kEngineRestart, r); }
std::string_view to_string(UnitResult r) { return word_of(kUnitResult, r); }
std::optional<EngineRestart> parse_engine_restart(std::string_view s) {
  if (s.empty()) return EngineRestart::no;
  return value_of(kEngineRestart, s);
}
std::optional<UnitResult> parse_unit_result(std::string_view s) {
  if (s.empty()) return std::nullopt;
  if (s == "other" || s == "unknown") return UnitResult::other;  // not systemd's words
  return value_of(kUnitResult, s).value_or(UnitResult::other);
}

std::string_view to_string(RestartPolicy p) { return word_of(kRestart, p); }
std::string_view to_string(IneffectiveUnload a) { return word_of(kIneffective, a); }
std::string_view to_string(Escalation e) { return word_of(kEscalation, e); }
std::string_view to_string(UnloadReason r) { return word_of(kReason, r); }
std::optional<RestartPolicy> parse_restart_policy(std::string_view s) {
  return value_of(kRestart, s);
}
std::optional<IneffectiveUnload> parse_ineffective_unload(std::string_view s) {
  return value_of(kIneffective, s);
}
std::optional<Escalation> parse_escalation(std::string_view s) { return value_of(kEscalation, s); }
std::optional<UnloadReason> parse_unload_reason(std::string_view s) { return value_of(kReason, s); }

}  // namespace vramd
