#include "supervisor/unit_watch.h"

#include <fmt/format.h>

namespace vramd {

namespace {
constexpr std::chrono::milliseconds kShowTimeout{5000};

// ExecMainCode: CLD_EXITED 1, CLD_KILLED 2, CLD_DUMPED 3 (waitid(2)).
void fill_exit(ContainerChanged& e, const UnitShow& u) {
  if (u.exec_main_code == 1) e.exit_code = u.exec_main_status;
  if (u.exec_main_code == 2 || u.exec_main_code == 3) e.signal = u.exec_main_status;
  // A new run's (ExecMainCode 0): how the old one ended is gone.
  if (u.exec_main_code != 0) e.result = parse_unit_result(u.result);
  if (u.exec_main_code == 3 && !e.result) e.result = UnitResult::core_dump;
  e.oom = parse_unit_result(u.result) == UnitResult::oom_kill;
}

ContainerChanged base(const std::string& service, const UnitShow& u) {
  ContainerChanged e;
  e.service = service;
  e.running = u.active();
  // A Restart= this vramd does not know restarts nothing it can tell: "no".
  e.restart_policy = parse_engine_restart(u.restart).value_or(EngineRestart::no);
  e.restart_count = u.n_restarts;
  e.main_pid = u.active() ? u.main_pid : 0;
  return e;
}
}  // namespace

std::vector<ContainerChanged> UnitWatch::changes(const std::string& service,
                                                 const std::optional<UnitShow>& before,
                                                 const UnitShow& now) {
  std::vector<ContainerChanged> out;
  if (!before) {
    out.push_back(base(service, now));
    return out;
  }
  bool same_run = before->invocation_id == now.invocation_id &&
                  before->active_enter_mono == now.active_enter_mono &&
                  before->n_restarts == now.n_restarts;
  if (before->active() && (!now.active() || !same_run)) {
    ContainerChanged died = base(service, now);
    died.died = true;
    died.running = false;
    died.main_pid = 0;
    fill_exit(died, now);
    out.push_back(std::move(died));
    if (now.active()) out.push_back(base(service, now));  // systemd started it again already
    return out;
  }
  if (!before->active() && !now.active() && !same_run && now.exec_main_code != 0) {
    // A whole run between two reads: started (by vramd's systemctl start, or systemd) and ended.
    ContainerChanged died = base(service, now);
    died.died = true;
    fill_exit(died, now);
    out.push_back(std::move(died));
    return out;
  }
  if (now.active() != before->active() || now.active_state != before->active_state ||
      now.main_pid != before->main_pid || now.restart != before->restart)
    out.push_back(base(service, now));
  return out;
}

UnitWatch::UnitWatch(SystemdTools tools, std::vector<Watched> watched, Post post, Fault fault,
                     std::chrono::milliseconds interval)
    : tools_(std::move(tools)),
      watched_(std::move(watched)),
      post_(std::move(post)),
      fault_(std::move(fault)),
      interval_(interval),
      thread_([this] { run(); }) {}

UnitWatch::~UnitWatch() { stop(); }

void UnitWatch::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool UnitWatch::sleep_for(std::chrono::milliseconds d) {
  std::unique_lock lock(mu_);
  return !cv_.wait_for(lock, d, [&] { return stopping_; });
}

void UnitWatch::run() {
  do {
    std::string failed;
    for (const auto& w : watched_) {
      auto u = show_unit(tools_, w.unit, kShowTimeout);
      if (!u) {
        failed = u.error();
        continue;
      }
      std::optional<UnitShow> before;
      if (auto it = last_.find(w.service); it != last_.end()) before = it->second;
      for (auto& e : changes(w.service, before, *u)) post_(std::move(e));
      last_[w.service] = std::move(*u);
    }
    bool ok = failed.empty();
    if (reported_ok_ != ok) {
      reported_ok_ = ok;
      fault_(ok, ok ? "" : fmt::format("unit state from systemctl: {}", failed));
    }
  } while (sleep_for(interval_));
}

}  // namespace vramd
