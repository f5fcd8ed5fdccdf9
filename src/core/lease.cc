#include "core/lease.h"

#include <algorithm>
#include <numeric>

#include <fmt/format.h>

namespace vramd {

const char* to_string(LeaseState s) {
  switch (s) {
    case LeaseState::queued: return "queued";
    case LeaseState::granted: return "granted";
    case LeaseState::released: return "released";
    case LeaseState::expired: return "expired";
    case LeaseState::cancelled: return "cancelled";
    case LeaseState::timed_out: return "timed_out";
    case LeaseState::lost: return "lost";
    case LeaseState::suspended: return "suspended";
  }
  return "?";
}

const char* to_string(LeaseSuspension::Step s) {
  switch (s) {
    case LeaseSuspension::Step::suspending: return "suspending";
    case LeaseSuspension::Step::verifying: return "verifying";
    case LeaseSuspension::Step::suspended: return "suspended";
    case LeaseSuspension::Step::resuming: return "resuming";
  }
  return "?";
}

std::optional<LeaseSuspension::Step> parse_suspension_step(std::string_view s) {
  for (auto st : {LeaseSuspension::Step::suspending, LeaseSuspension::Step::verifying,
                  LeaseSuspension::Step::suspended, LeaseSuspension::Step::resuming})
    if (s == to_string(st)) return st;
  return std::nullopt;
}

std::optional<LeaseState> parse_lease_state(std::string_view s) {
  for (auto st : {LeaseState::queued, LeaseState::granted, LeaseState::released, LeaseState::expired,
                  LeaseState::cancelled, LeaseState::timed_out, LeaseState::lost,
                  LeaseState::suspended})
    if (s == to_string(st)) return st;
  return std::nullopt;
}

const char* to_string(OnHostLost o) { return o == OnHostLost::end ? "end" : "requeue"; }

std::optional<OnHostLost> parse_on_host_lost(std::string_view s) {
  if (s == "requeue") return OnHostLost::requeue;
  if (s == "end") return OnHostLost::end;
  return std::nullopt;
}

std::string Lease::owner_name() const {
  const std::string& base =
      !request.label.empty() ? request.label : !request.holder.empty() ? request.holder : "lease";
  return fmt::format("{}#{}", base, id);
}

}  // namespace vramd
