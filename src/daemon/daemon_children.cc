// The daemon's side of supervision: health checks, crash records and service commands. Part of
// class Daemon (daemon.h); the decisions are the core's (core/supervision.h), running the
// processes, containers and units is the ServiceRuntime's (daemon/service_runtime.h).
// GCC 12 needs <utility> before Boost's awaitable.hpp.
#include <utility>

#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <csignal>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <filesystem>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "core/owners.h"
#include "supervisor/children.h"
#include "daemon/daemon.h"
#include "host/proc_table.h"
#include "supervisor/crash_rules.h"

namespace vramd {

namespace asio = boost::asio;
using asio::use_awaitable;

std::string Daemon::log_path(const std::string& service) const {
  return runtime_.log_path(service);
}

void Daemon::record_crash(const RecordCrash& crash) {
  std::vector<CrashRule> rules;
  for (const auto& r : arbiter_.config().crash_rules)
    rules.push_back({r.signature, r.title, r.pattern, r.requires_pattern, r.explanation, r.suggestion});
  // Reading the log and the kernel's and diagnosing: the worker; storing: the store thread.
  std::string version, args_fp;
  if (const ServiceStatus* st = arbiter_.service_policy_status(crash.service)) {
    version = st->version;
    args_fp = st->args_fp;
  }
  runtime_.diagnose(crash, std::move(rules), version, args_fp, [this](const CrashRecord& rec) {
    store_.add_crash(rec, [this](const CrashRecord& stored) {
      if (stopping_) return;
      metrics_.crash(stored.service, stored.signature);
      std::string msg = fmt::format("{} crashed: {}", stored.service, stored.title);
      if (!stored.suggestion.empty()) msg += fmt::format(". Suggested: {}", stored.suggestion);
      apply({make_event(now(), "service.diagnosis", std::nullopt, stored.service, msg)});
    });
  });
}

uint64_t Daemon::service_command(const std::string& service, Command action, bool force) {
  uint64_t id = answers_.commands.next_id();
  answers_.commands.add(id);
  feed(ServiceCommand{service, action, id, force});
  return id;
}

asio::awaitable<CommandFinished> Daemon::wait_command(uint64_t request_id, Duration max) {
  std::optional<CommandFinished> got = co_await answers_.commands.wait(request_id, max);
  if (got) co_return *got;
  CommandFinished out{request_id, false, ""};
  out.message = max.count() > 0 ? fmt::format("not finished within {}", format_duration(max)) : "";
  co_return out;
}

asio::awaitable<Result<std::vector<CrashRecord>>> Daemon::crashes(std::string service, size_t limit) {
  auto op = store_.crashes(std::move(service), limit);
  co_return co_await std::move(op);
}

asio::awaitable<LogPage> Daemon::read_log(std::string path, size_t lines, std::optional<uint64_t> after) {
  auto op = runtime_.read_log(std::move(path), lines, after);
  co_return co_await std::move(op);
}

}  // namespace vramd
