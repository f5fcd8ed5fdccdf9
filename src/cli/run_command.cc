// `vramd run`, `vramd leases`, `vramd jobs`: leases from the client's side. The daemon never
// runs a command: `vramd run` asks for a lease, waits, runs the command itself and releases.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <csignal>

#include <fmt/format.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <optional>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/daemon_call.h"
#include "core/gpu_select.h"

namespace vramd {

using nlohmann::json;

namespace {

std::atomic<int> g_signal{0};
std::atomic<pid_t> g_child{0};

void on_signal(int sig) {
  g_signal = sig;
  pid_t c = g_child;
  if (c > 0) kill(-c, sig);  // forwarded to the command's process group
}

void install_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) sigaction(s, &sa, nullptr);
}

std::string reason_text(const json& lease) {
  if (lease.contains("reason") && lease["reason"].is_object())
    return lease["reason"].value("text", "");
  return "";
}

std::string format_elapsed(std::chrono::steady_clock::duration d) {
  auto s = std::chrono::duration_cast<std::chrono::seconds>(d).count();
  return s < 60 ? fmt::format("{}s", s) : fmt::format("{}m{:02}s", s / 60, s % 60);
}

// Stops the command's process group for lease `id` (SIGTERM, SIGKILL after `stop_timeout`), or,
// with `--on-lease-lost keep`, only says so: one line either way.
void on_lease_lost(uint64_t id, pid_t child, const std::string& why, const std::string& on_lost,
                   Duration stop_timeout) {
  if (on_lost == "keep") {
    std::cerr << fmt::format(
        "vramd run: lease #{} lost: {}; the command runs on (--on-lease-lost keep): the "
        "lease ended, so it is granted to no one else\n",
        id, why);
    return;
  }
  std::cerr << fmt::format("vramd run: lease #{} lost: {}; stopping the command "
                           "(SIGTERM, SIGKILL after {})\n",
                           id, why, format_duration(stop_timeout));
  kill(-child, SIGTERM);
  auto until = std::chrono::steady_clock::now() + stop_timeout;
  while (std::chrono::steady_clock::now() < until && kill(-child, 0) == 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  if (kill(-child, 0) == 0) kill(-child, SIGKILL);
}

// Watches a granted lease while its command (process group `child`) runs, on a thread of its
// own that the process's exit ends (a long poll that answers when the lease ends). The lease is
// lost when its host says so, when it is no longer granted on that host (queued again, or granted
// on another: its host was taken for lost while it was down or cut off), or, for a shared lease,
// when its host has said nothing for as long as it keeps the lease without the store (its answer's
// `fence_in_ms`): by then that host has given it up, or cannot tell that the others took it.
void watch_lease(const DaemonClient& client, uint64_t id, pid_t child, const std::string& on_lost,
                 Duration stop_timeout) {
  std::thread([client, id, child, on_lost, stop_timeout] {
    using Clock = std::chrono::steady_clock;
    using std::chrono::milliseconds;
    std::optional<Clock::time_point> held_until;  // a shared lease: by its host's last word
    Clock::time_point last_word = Clock::now();
    milliseconds grace(50);  // past held_until: its host's own word (`lost`, and why) comes first
    bool first = true;
    bool suspended = false;  // told the user it was suspended (issue 28)
    for (;;) {
      // A shared lease's host is asked often enough to hear it before its fence falls due; the
      // long poll's answer counts from when it was asked (it may have waited that long).
      auto watch = std::chrono::duration_cast<milliseconds>(std::chrono::seconds(20));
      int timeout_ms = 30000;
      const auto sent = Clock::now();
      bool at_once = first;
      if (held_until) {
        if (sent >= *held_until + grace) {
          on_lease_lost(
              id, child,
              fmt::format("no word from its host for {} (a shared lease is held only while its "
                          "host is in touch with the store)",
                          format_duration(std::chrono::duration_cast<Duration>(sent - last_word))),
              on_lost, stop_timeout);
          return;
        }
        auto left = std::chrono::duration_cast<milliseconds>(*held_until + grace - sent);
        watch = std::clamp(left / 4, milliseconds(100), watch);
        at_once = at_once || sent >= *held_until;
        timeout_ms = static_cast<int>(std::max<int64_t>(left.count(), 20));
      }
      const std::string target = at_once ? fmt::format("/v1/leases/{}", id)
                                         : fmt::format("/v1/leases/{}?watch={}ms", id, watch.count());
      DaemonCall c = client.request("GET", target, "", timeout_ms);
      if (g_child == 0) return;
      if (!c.ok() || !c.body.is_object()) {
        // Down (it restarts: it keeps the lease) or it does not know the lease any more.
        std::this_thread::sleep_for(milliseconds(held_until ? 20 : 1000));
        continue;
      }
      first = false;
      std::string state = c.body.value("state", "");
      bool elsewhere = c.body.value("elsewhere", false);
      // Preemptible: one line when its job is suspended, one when it is resumed.
      if (state == "suspended" && !suspended) {
        suspended = true;
        std::cerr << fmt::format(
            "vramd run: lease #{} suspended for {}: its GPU memory is in host RAM and the command "
            "waits (it keeps running)\n",
            id, c.body.value("suspended_for", json(nullptr)).is_string()
                    ? c.body["suspended_for"].get<std::string>()
                    : std::string("other work"));
      } else if (state == "granted" && suspended) {
        suspended = false;
        std::cerr << fmt::format("vramd run: lease #{} resumed on GPU {}\n", id,
                                 c.body.value("gpu", json(nullptr)).is_number_unsigned()
                                     ? std::to_string(c.body["gpu"].get<unsigned>())
                                     : std::string("?"));
      }
      if (state == "suspended") {
        last_word = Clock::now();
        continue;
      }
      if (state == "granted" && !elsewhere) {
        last_word = Clock::now();
        if (auto f = c.body.find("fence_in_ms"); f != c.body.end() && f->is_number_integer()) {
          milliseconds fence(f->get<int64_t>());
          held_until = sent + fence;
          grace = std::clamp(std::max(grace, fence / 8), milliseconds(50), milliseconds(500));
        } else {
          held_until.reset();
        }
        continue;
      }
      std::string why;
      if (state == "queued")
        why = "queued again by another host (its host was taken for lost)";
      else if (state == "granted")
        why = fmt::format("granted on host {} now (its host was taken for lost)",
                          c.body.value("host", "?"));
      else if (state == "lost")
        why = c.body.value("end_reason", json(nullptr)).is_string()
                  ? c.body["end_reason"].get<std::string>()
                  : std::string("lost");
      else
        return;  // ended otherwise (released by hand): as before
      on_lease_lost(id, child, why, on_lost, stop_timeout);
      return;
    }
  }).detach();
}

}  // namespace

int cmd_run(const CommonOptions& opts, const RunOptions& run) {
  if (run.command.empty()) {
    std::cerr << "vramd run: no command given: vramd run --vram 12GiB -- CMD ARGS...\n";
    return kExitUsage;
  }
  auto vram = parse_size(run.vram);
  if (!vram || *vram == 0) {
    std::cerr << "vramd run: --vram: " << (vram ? "must be more than 0" : vram.error()) << "\n";
    return kExitUsage;
  }
  json body = {{"vram", *vram}, {"holder", "vramd run"}, {"priority", run.priority}};
  if (run.preemptible) body["preemptible"] = true;
  if (run.gpu != "any") {
    auto gpu = parse_gpu_selector(run.gpu);
    if (!gpu || !*gpu) {
      std::cerr << "vramd run: --"
                << (gpu ? "gpu: expected a GPU index or 'any', got ''" : gpu.error()) << "\n";
      return kExitUsage;
    }
    // A MIG instance as its label ("0/2"), which the API parses as `--gpu` does.
    if (is_mig_index(**gpu))
      body["gpu"] = gpu_label(**gpu);
    else
      body["gpu"] = **gpu;
  }
  if (!run.ram.empty()) {
    auto ram = parse_size(run.ram);
    if (!ram) {
      std::cerr << "vramd run: --ram: " << ram.error() << "\n";
      return kExitUsage;
    }
    body["ram"] = *ram;
  }
  if (!run.timeout.empty()) {
    if (auto d = parse_duration(run.timeout); !d) {
      std::cerr << "vramd run: --timeout: " << d.error() << "\n";
      return kExitUsage;
    }
    body["timeout"] = run.timeout;
  }
  if (!run.host.empty()) body["host"] = run.host;
  if (!run.on_host_lost.empty()) {
    if (run.on_host_lost != "requeue" && run.on_host_lost != "end") {
      std::cerr << "vramd run: --on-host-lost: expected requeue or end, got '" << run.on_host_lost
                << "'\n";
      return kExitUsage;
    }
    body["on_host_lost"] = run.on_host_lost;
  }
  // What the command gets when its lease is lost (docs/api.md "Guarantees").
  std::string on_lease_lost = run.on_lease_lost;
  if (on_lease_lost == "suspend") {
    std::cerr << "vramd run: --on-lease-lost suspend needs CUDA checkpointing, which this vramd "
                 "does not offer yet; use stop or keep\n";
    return kExitUsage;
  }
  if (!on_lease_lost.empty() && on_lease_lost != "stop" && on_lease_lost != "keep") {
    std::cerr << "vramd run: --on-lease-lost: expected stop or keep, got '" << on_lease_lost
              << "'\n";
    return kExitUsage;
  }
  if (on_lease_lost == "keep") {
    // A command that runs on after its lease is lost must not run twice: the lease ends.
    if (run.on_host_lost == "requeue") {
      std::cerr << "vramd run: --on-lease-lost keep with --on-host-lost requeue could run the "
                   "command twice (here, and where the lease is granted again); use "
                   "--on-host-lost end, or --on-lease-lost stop\n";
      return kExitUsage;
    }
    body["on_host_lost"] = "end";
  }
  if (on_lease_lost.empty()) on_lease_lost = body.value("on_host_lost", "requeue") == "end" ? "keep" : "stop";
  auto stop_timeout = parse_duration(run.stop_timeout);
  if (!stop_timeout) {
    std::cerr << "vramd run: --stop-timeout: " << stop_timeout.error() << "\n";
    return kExitUsage;
  }
  std::string program = run.command[0].substr(run.command[0].rfind('/') + 1);
  body["label"] = run.label.empty() ? program : run.label;
  body["command"] = program;

  auto client = DaemonClient::from_options(opts);
  if (!client) return kExitFailure;
  const DaemonClient& s = *client;
  // Over TCP the daemon cannot see who asks: say it (on the unix socket it reads SO_PEERCRED).
  if (!s.address().url.starts_with("unix:")) body["pid"] = getpid();

  int out_pipe[2] = {-1, -1};
  if (run.detach) {
    // The whole wait and run go to the background; the foreground prints the lease id.
    if (pipe(out_pipe) != 0) return kExitFailure;
    pid_t bg = fork();
    if (bg < 0) return kExitFailure;
    if (bg > 0) {
      close(out_pipe[1]);
      char buf[64] = {0};
      ssize_t n = read(out_pipe[0], buf, sizeof buf - 1);
      if (n <= 0) {
        std::cerr << "vramd run: the background run failed before it got a lease\n";
        return kExitFailure;
      }
      std::cout << std::string(buf, static_cast<size_t>(n)) << "\n";
      return kExitOk;
    }
    close(out_pipe[0]);
    setsid();
    int devnull = open("/dev/null", O_RDWR);
    if (devnull >= 0) dup2(devnull, 0);
    if (!s.address().url.starts_with("unix:")) body["pid"] = getpid();
  }

  install_handlers();
  int code = 0;
  auto lease = s.call("POST", "/v1/leases", code, body.dump(), 10000);
  if (!lease) return code;
  uint64_t id = (*lease)["id"].get<uint64_t>();
  if (out_pipe[1] >= 0) {
    std::string text = std::to_string(id);
    (void)!write(out_pipe[1], text.data(), text.size());
    close(out_pipe[1]);
  }
  std::string target = fmt::format("/v1/leases/{}", id);
  bool tty = isatty(2) && !run.detach;
  auto started = std::chrono::steady_clock::now();
  std::string last_line;
  while ((*lease)["state"] == "queued") {
    if (g_signal) {
      s.call("DELETE", target, code, "", 10000);
      if (tty) std::cerr << "\n";
      std::cerr << "vramd run: cancelled while waiting for lease #" << id << "\n";
      return 128 + g_signal;
    }
    std::string reason = reason_text(*lease);
    json pos = (*lease)["position"];
    std::string line =
        fmt::format("waiting for lease #{}{}: {}", id,
                    pos.is_number() ? fmt::format(" ({} ahead)", pos.get<int>()) : "", reason);
    if (tty) {
      std::string shown =
          fmt::format("{} [{}]", line, format_elapsed(std::chrono::steady_clock::now() - started));
      std::cerr << "\r\033[K" << shown.substr(0, 200) << std::flush;
    } else if (line != last_line) {
      std::cerr << "vramd run: " << line << "\n";
    }
    last_line = line;
    // Short polls on a terminal keep the line live; either way each poll is a heartbeat.
    auto next = s.call("GET", target + (tty ? "?wait=1s" : "?wait=20s"), code, "", 30000);
    if (!next) {
      // The daemon restarts: wait for it and keep the place in the queue.
      for (int i = 0; i < 60 && !next && !g_signal; ++i) {
        sleep(1);
        next = s.call("GET", target, code, "", 5000);
      }
      if (!next) return code;
    }
    lease = next;
  }
  if (tty) std::cerr << "\r\033[K";
  if ((*lease)["state"] != "granted") {
    std::cerr << fmt::format(
        "vramd run: lease #{} {}: {}\n", id, (*lease)["state"].get<std::string>(),
        (*lease)["end_reason"].is_string() ? (*lease)["end_reason"].get<std::string>() : "");
    return kExitFailure;
  }
  unsigned gpu = (*lease)["gpu"].get<unsigned>();
  if ((*lease).value("elsewhere", false)) {
    // Granted on another host of the shared queue: vramd never runs a command sent over the
    // network, so the lease is told, as --detach tells its id, and the command is not run.
    std::string host = (*lease).value("host", std::string("?"));
    std::cout << fmt::format("lease #{} granted on host {}, GPU {}\n", id, host, gpu_label(gpu));
    std::cerr << fmt::format(
        "vramd run: lease #{} was granted on host {}, not here: the command is not run. Run it on "
        "{} (VRAMD_LEASE_ID={}, CUDA_VISIBLE_DEVICES={}), keep the lease with heartbeats to {}'s "
        "vramd (POST /v1/leases/{}/heartbeat) and release it when done (DELETE /v1/leases/{})\n",
        id, host, host, id, gpu, host, id, id);
    return kExitOk;
  }
  std::string label = (*lease).value("gpu_label", json(nullptr)).is_string()
                          ? (*lease)["gpu_label"].get<std::string>()
                          : gpu_label(gpu);
  // A MIG instance is named by its UUID; older daemons send no such field.
  std::string cuda_devices = (*lease).value("gpu_cuda_visible_devices", json(nullptr)).is_string()
                                 ? (*lease)["gpu_cuda_visible_devices"].get<std::string>()
                                 : std::to_string(gpu);
  if (!run.detach)
    std::cerr << fmt::format("vramd run: lease #{} granted: {} on GPU {} after {}\n", id,
                             format_size(*vram), label,
                             format_elapsed(std::chrono::steady_clock::now() - started));

  // The command runs in a process group of its own, so that a stop reaches what it started too;
  // on a terminal that group is the foreground one (keys like ^C go to it).
  const bool owns_tty = isatty(0) && tcgetpgrp(0) == getpgrp();
  pid_t child = fork();
  if (child < 0) {
    std::cerr << "vramd run: fork failed: " << strerror(errno) << "\n";
    s.call("DELETE", target, code, json{{"exit_status", 127}}.dump(), 10000);
    return kExitFailure;
  }
  if (child == 0) {
    setpgid(0, 0);
    if (owns_tty) {  // as the parent does: whichever runs first (a read before it would stop)
      signal(SIGTTOU, SIG_IGN);
      tcsetpgrp(0, getpid());
      signal(SIGTTOU, SIG_DFL);
    }
    if (!run.no_cuda_env) {
      // NVML numbers GPUs in PCI bus order; CUDA does too only with this order set.
      setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID", 1);
      setenv("CUDA_VISIBLE_DEVICES", cuda_devices.c_str(), 1);
    }
    setenv("VRAMD_LEASE_ID", std::to_string(id).c_str(), 1);
    if ((*lease).value("token", json(nullptr)).is_number_unsigned())
      setenv("VRAMD_LEASE_TOKEN", std::to_string((*lease)["token"].get<uint64_t>()).c_str(), 1);
    std::vector<char*> argv;
    for (const auto& a : run.command) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    std::cerr << "vramd run: cannot run " << run.command[0] << ": " << strerror(errno) << "\n";
    _exit(127);
  }
  setpgid(child, child);  // as the child does: whichever runs first
  if (owns_tty) {
    signal(SIGTTOU, SIG_IGN);
    tcsetpgrp(0, child);
  }
  g_child = child;
  if (g_signal) kill(-child, g_signal);
  // While it runs, the lease is watched (a long poll that answers when it ends): a lost lease
  // stops the command's group, unless it is to be kept.
  watch_lease(s, id, child, on_lease_lost, *stop_timeout);
  int status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  g_child = 0;
  if (owns_tty) tcsetpgrp(0, getpgrp());
  int exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  s.call("DELETE", target, code, json{{"exit_status", exit_code}}.dump(), 10000);
  // The lease's watcher may be inside a long poll: leave without running the static
  // destructors under it (nothing else is left to do but flush).
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  _exit(exit_code);
}

int cmd_leases(const CommonOptions& opts, bool as_json, const std::string& host) {
  auto client = DaemonClient::from_options(opts);
  if (!client) return kExitFailure;
  const DaemonClient& s = *client;
  int code = 0;
  std::string target = "/v1/leases";
  if (!host.empty()) {
    target += "?host=";
    for (char c : host)
      target += std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.'
                    ? std::string(1, c)
                    : fmt::format("%{:02X}", static_cast<unsigned char>(c));
  }
  auto body = s.call("GET", target, code, "", 10000);
  if (!body) return code;
  if (as_json) {
    std::cout << body->dump(2) << "\n";
    return kExitOk;
  }
  if ((*body)["leases"].empty()) {
    std::cout << "no leases\n";
    return kExitOk;
  }
  // With --all-hosts or --host, each row names the host that holds (or keeps queued) the lease.
  const bool by_host = !host.empty();
  std::string head = fmt::format("{:>5}  {:<20} {:<9} {:>4} {:>10} {:>10}  {}", "ID", "OWNER",
                                 "STATE", "GPU", "LEASED", "HELD", "WHY / SINCE");
  std::cout << (by_host ? fmt::format("{:<12} ", "HOST") : std::string()) << head << "\n";
  auto text = [](const json& l, const char* key) {
    return l.value(key, json(nullptr)).is_string() ? l[key].get<std::string>() : std::string();
  };
  for (const auto& l : (*body)["leases"]) {
    std::string gpu = l["gpu"].is_number() ? gpu_label(l["gpu"].get<unsigned>()) : "any";
    std::string why = l["state"] == "queued" ? reason_text(l) : text(l, "granted_at");
    // A preemptible lease says where its suspension stands (issue 28): since when, for whom,
    // and what its bytes hold of host RAM meanwhile.
    std::string step = text(l, "suspension");
    std::string for_whom = text(l, "suspended_for");
    if (step == "suspended" || step == "resuming") {
      why = fmt::format("suspended since {} for {}: {} in host RAM", text(l, "suspended_at"),
                        for_whom, format_size(l.value("suspended_bytes", Bytes{0})));
      if (step == "resuming") why.insert(0, "resuming; ");
    } else if (step == "suspending" || step == "verifying") {
      why += fmt::format("; suspending for {}", for_whom);
    } else if (!text(l, "suspend_refused").empty()) {
      why += fmt::format("; not suspended: {}", text(l, "suspend_refused"));
    }
    if (by_host) std::cout << fmt::format("{:<12} ", l.value("host", "?"));
    std::cout << fmt::format(
        "{:>5}  {:<20} {:<9} {:>4} {:>10} {:>10}  {}\n", l["id"].get<uint64_t>(),
        l["owner"].get<std::string>(), l["state"].get<std::string>(), gpu,
        format_size(l["vram_bytes"].get<Bytes>()), format_size(l["held_bytes"].get<Bytes>()), why);
  }
  return kExitOk;
}

int cmd_jobs(const CommonOptions& opts, const std::string& stats_label, size_t limit,
             bool as_json) {
  auto client = DaemonClient::from_options(opts);
  if (!client) return kExitFailure;
  const DaemonClient& s = *client;
  int code = 0;
  auto ms = [](const json& v) {
    return v.is_number() ? format_duration(Duration(v.get<int64_t>())) : std::string("-");
  };
  if (!stats_label.empty()) {
    std::string label;
    for (char c : stats_label)
      label += std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.'
                   ? std::string(1, c)
                   : fmt::format("%{:02X}", static_cast<unsigned char>(c));
    auto body = s.call("GET", "/v1/jobs/stats?label=" + label, code, "", 10000);
    if (!body) return code;
    if (as_json) {
      std::cout << body->dump(2) << "\n";
      return kExitOk;
    }
    const json& b = *body;
    std::cout << fmt::format("{}: {} jobs ({} ran, {} failed)\n", stats_label,
                             b["count"].get<size_t>(), b["ran"].get<size_t>(),
                             b["failed"].get<size_t>());
    std::cout << fmt::format("  wait  p50 {:>8}  p95 {:>8}\n", ms(b["wait_ms"]["p50"]),
                             ms(b["wait_ms"]["p95"]));
    std::cout << fmt::format("  run   p50 {:>8}  p95 {:>8}\n", ms(b["run_ms"]["p50"]),
                             ms(b["run_ms"]["p95"]));
    auto size = [](const json& v) {
      return v.is_number() ? format_size(v.get<Bytes>()) : std::string("-");
    };
    std::cout << fmt::format("  peak  p50 {:>8}  max {:>8}\n", size(b["peak_bytes"]["p50"]),
                             size(b["peak_bytes"]["max"]));
    return kExitOk;
  }
  auto body = s.call("GET", fmt::format("/v1/jobs?limit={}", limit), code, "", 10000);
  if (!body) return code;
  if (as_json) {
    std::cout << body->dump(2) << "\n";
    return kExitOk;
  }
  if ((*body)["jobs"].empty()) {
    std::cout << "no jobs yet\n";
    return kExitOk;
  }
  std::cout << fmt::format("{:>5}  {:<16} {:<10} {:>4} {:>10} {:>9} {:>9} {:>10} {:>5}\n", "ID",
                           "LABEL", "STATE", "GPU", "LEASED", "WAIT", "RUN", "PEAK", "EXIT");
  for (const auto& j : (*body)["jobs"])
    std::cout << fmt::format(
        "{:>5}  {:<16} {:<10} {:>4} {:>10} {:>9} {:>9} {:>10} {:>5}\n", j["id"].get<uint64_t>(),
        j["label"].get<std::string>(), j["state"].get<std::string>(),
        j["gpu"].is_number() ? gpu_label(j["gpu"].get<unsigned>()) : "-",
        format_size(j["vram_bytes"].get<Bytes>()), ms(j["wait_ms"]), ms(j["run_ms"]),
        format_size(j["peak_bytes"].get<Bytes>()),
        j["exit_status"].is_number() ? std::to_string(j["exit_status"].get<int>()) : "-");
  return kExitOk;
}

}  // namespace vramd
