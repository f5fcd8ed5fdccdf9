#include "supervisor/container_watch.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace vramd {

namespace {
constexpr std::chrono::milliseconds kTimeout{5000};
constexpr std::chrono::milliseconds kFirstBackoff{500};
constexpr std::chrono::milliseconds kMaxBackoff{30000};
}  // namespace

ContainerWatch::ContainerWatch(std::string socket_path, std::vector<Watched> watched, Post post,
                               Fault fault)
    : socket_(std::move(socket_path)),
      watched_(std::move(watched)),
      post_(std::move(post)),
      fault_(std::move(fault)),
      stream_(socket_),
      thread_([this] { run(); }) {}

ContainerWatch::~ContainerWatch() { stop(); }

void ContainerWatch::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  stream_.close();
  if (thread_.joinable()) thread_.join();
}

bool ContainerWatch::sleep_for(std::chrono::milliseconds d) {
  std::unique_lock lock(mu_);
  return !cv_.wait_for(lock, d, [&] { return stopping_; });
}

void ContainerWatch::report(bool ok, const std::string& why) {
  if (reported_ok_ == ok && ok) return;
  if (reported_ok_ == ok && !ok) return;  // one fault per outage
  reported_ok_ = ok;
  fault_(ok, why);
}

void ContainerWatch::run() {
  auto backoff = kFirstBackoff;
  while (true) {
    {
      std::lock_guard lock(mu_);
      if (stopping_) return;
    }
    auto opened = stream_.open(kTimeout);
    if (!opened) {
      report(false, fmt::format("container events from {}: {}", socket_, opened.error()));
      if (!sleep_for(backoff)) return;
      backoff = std::min(backoff * 2, kMaxBackoff);
      continue;
    }
    // The stream is open before the states are read: nothing that happens between is missed.
    read_states();
    report(true, "");
    backoff = kFirstBackoff;
    while (true) {
      auto events = stream_.next();
      if (!events) {
        std::lock_guard lock(mu_);
        if (stopping_) return;
        report(false, fmt::format("container events from {}: {}", socket_, events.error()));
        break;
      }
      for (const auto& e : *events) on_event(e);
    }
    if (!sleep_for(backoff)) return;
    backoff = std::min(backoff * 2, kMaxBackoff);
  }
}

void ContainerWatch::read_states() {
  for (const auto& w : watched_) post_state(w, false, std::nullopt, false);
}

const ContainerWatch::Watched* ContainerWatch::find(const DockerEvent& e) const {
  for (const auto& w : watched_)
    if (w.container == e.name || (w.container.size() >= 12 && e.id.starts_with(w.container)))
      return &w;
  return nullptr;
}

void ContainerWatch::post_state(const Watched& w, bool died, std::optional<int> exit_code,
                                bool oom) {
  auto c = inspect_container(socket_, w.container, kTimeout);
  ContainerChanged out{w.service, false, died, exit_code, oom, std::nullopt};
  if (c && *c) {
    const ContainerInspect& i = **c;
    out.running = i.running;
    // A policy this vramd does not know restarts nothing it can tell: "no".
    out.restart_policy = parse_engine_restart(i.restart_policy).value_or(EngineRestart::no);
    out.restart_max = i.restart_max;
    out.restart_count = i.restart_count;
    if (died) {
      out.oom = oom || i.oom_killed;
      if (!out.exit_code) out.exit_code = i.exit_code;
      // Docker may have started it again already (its policy): it is not running for this die.
      out.running = false;
    }
  } else if (!c) {
    spdlog::warn("inspect {}: {}", w.container, c.error());
    if (!died) return;  // a state read that failed tells nothing
  }
  post_(std::move(out));
}

void ContainerWatch::on_event(const DockerEvent& e) {
  if (e.type != "container") return;
  const Watched* w = find(e);
  if (!w) return;
  if (e.action == "oom") {
    oom_seen_[w->service] = true;
  } else if (e.action == "die") {
    bool oom = std::exchange(oom_seen_[w->service], false);
    post_state(*w, true, e.exit_code, oom);
  } else if (e.action == "start" || e.action == "destroy" || e.action == "create") {
    post_state(*w, false, std::nullopt, false);
  }
}

}  // namespace vramd
