// Units (match.unit without `start`): systemd's word on them reaches the Arbiter from a thread of
// its own (supervisor/unit_watch.h); their output comes from the journal.
#include <algorithm>

#include <boost/asio/post.hpp>
#include <fmt/format.h>

#include "daemon/daemon.h"
#include "host/systemd.h"

namespace vramd {

namespace asio = boost::asio;

void Daemon::start_unit_watch() {
  const Config& cfg = arbiter_.config();
  std::vector<UnitWatch::Watched> watched;
  for (const auto& svc : cfg.services)
    if (svc.start.empty() && svc.match.container.empty() && !svc.match.unit.empty())
      watched.push_back({svc.name, svc.match.unit});
  if (watched.empty()) return;
  unit_watch_ = std::make_unique<UnitWatch>(systemd_tools(cfg), std::move(watched),
                                            post_watch_change(), post_backend_health("systemd"));
}

asio::awaitable<Result<LogPage>> Daemon::read_unit_log(std::string unit, size_t lines,
                                                       std::optional<uint64_t> after) {
  // On the worker: a slow journal holds up no request but those for its logs.
  auto op = run_on(worker_, [tools = systemd_tools(arbiter_.config()), unit = std::move(unit),
                             lines, after]() -> Result<LogPage> {
    auto got = journal_lines(tools, unit, lines, after.value_or(0), std::chrono::seconds(10));
    if (!got) return make_error(got.error());
    LogPage page;
    page.offset = after.value_or(0);
    for (auto& l : *got) {
      page.offset = std::max(page.offset, l.realtime_us);
      page.lines.push_back(std::move(l.message));
    }
    return page;
  });
  co_return co_await std::move(op);
}

std::vector<std::string> Daemon::unit_crash_log(const SystemdTools& tools,
                                                const RecordCrash& crash) {
  // Up to the moment of the exit: a run that systemd has started since is not this crash's.
  auto seconds =
      std::chrono::duration_cast<std::chrono::seconds>(crash.at.time_since_epoch()).count();
  // As many lines as the diagnosis reads of a run (its boot log); the record keeps the last 200.
  constexpr size_t kLines = 2000;
  auto lines = journal_messages(tools, crash.unit, kLines, seconds + 1, std::chrono::seconds(10));
  if (!lines) return {fmt::format("(vramd could not read the journal of unit {}: {})", crash.unit,
                                  lines.error())};
  return std::move(*lines);
}

}  // namespace vramd
