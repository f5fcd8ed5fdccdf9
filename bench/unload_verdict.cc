// How soon, and how rightly, an unload is judged: vramd's verified unload against the fixed
// "call it, wait 3 s, measure once" method, on fake ComfyUI servers (tests/fakes) that release
// their memory at once, after 2 s, after 5 s, or never (--ignore-unload).
//
//   vramd_unload_bench [--reps N] [--build-dir DIR] [--unload-timeout DUR] [--keep]
//
// REPS (env, default 3) repetitions of each case. Each repetition starts, side by side:
//   (a) a fresh fake server + `vramd serve` (sample_interval 1s, as deployed) on its own test-GPU
//       state file; once the daemon attributes the 16 GiB to the service, POST
//       /v1/services/comfyui/unload and wait for the verdict;
//   (b) a fresh fake server alone on another state file; POST /free to it, sleep 3 s, read the
//       state file once: "freed" when the server's bytes dropped by >= 90%, else "ineffective".
// A watcher thread per server reads the state file every 10 ms (the moment the memory settled:
// the server's bytes <= 10% of before) and GET /fake/state (the moment the server took the
// unload call, from its unload_calls). All times are this process's steady clock; vramd's own
// duration_ms - call_ms is printed beside them.
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/client.h"
#include "core/units.h"
#include "testgpu/fake_gpu_state.h"
#include "test_paths.h"

namespace {

using nlohmann::json;
using vramd::Bytes;
using vramd::GiB;
using vramd::MiB;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr Bytes kModelBytes = 16 * GiB;
constexpr auto kFixedWait = 3s;

// ---- children: every pid we start is killed on any exit ----

std::mutex g_children_mu;
std::set<pid_t> g_children;

void kill_all_children() {
  std::lock_guard lock(g_children_mu);
  for (pid_t p : g_children) ::kill(p, SIGKILL);
  for (pid_t p : g_children) ::waitpid(p, nullptr, 0);
  g_children.clear();
}

void on_signal(int sig) {
  // Not async-signal-safe in general, but we are leaving anyway; SIGKILL every child first.
  for (pid_t p : g_children) ::kill(p, SIGKILL);
  std::signal(sig, SIG_DFL);
  ::raise(sig);
}

class Child {
 public:
  Child(const std::vector<std::string>& argv, const std::vector<std::string>& env,
        const std::string& log) {
    pid_ = ::fork();
    if (pid_ == 0) {
      for (const auto& e : env) ::putenv(::strdup(e.c_str()));
      if (FILE* f = std::fopen(log.c_str(), "w")) {
        ::dup2(::fileno(f), 1);
        ::dup2(::fileno(f), 2);
      }
      std::vector<char*> args;
      for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      ::execvp(args[0], args.data());
      ::_exit(127);
    }
    std::lock_guard lock(g_children_mu);
    if (pid_ > 0) g_children.insert(pid_);
  }
  ~Child() { stop(); }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  pid_t pid() const { return pid_; }
  // SIGTERM, up to 2 s to exit, then SIGKILL; reaped.
  void stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    auto end = Clock::now() + 2s;
    int status = 0;
    bool gone = false;
    while (Clock::now() < end) {
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        gone = true;
        break;
      }
      std::this_thread::sleep_for(10ms);
    }
    if (!gone) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
    }
    std::lock_guard lock(g_children_mu);
    g_children.erase(pid_);
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
};

int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  int port = ntohs(a.sin_port);
  ::close(fd);
  return port;
}

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

template <typename F>
bool eventually(F f, std::chrono::milliseconds timeout, std::chrono::milliseconds step = 20ms) {
  auto end = Clock::now() + timeout;
  while (Clock::now() < end) {
    if (f()) return true;
    std::this_thread::sleep_for(step);
  }
  return f();
}

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// ---- the test GPU and one fake ComfyUI on it ----

struct Options {
  std::string build_dir = vramd::test_paths::build_dir();
  int reps = 3;
  std::string unload_timeout = "10s";
  bool keep = false;
};

struct Case {
  std::string name;
  std::vector<std::string> fake_args;  // after --model-bytes
  std::optional<int> release_ms;       // nullopt: never releases
  std::string truth;                   // freed | ineffective
};

// The server's bytes on GPU 0 in the state file (0 when its pid is not listed); nullopt if unreadable.
std::optional<Bytes> bytes_of(const std::string& state, pid_t pid) {
  auto s = vramd::read_fake_gpu_state(state);
  if (!s || !s->contains("gpus") || (*s)["gpus"].empty()) return std::nullopt;
  const auto& g = (*s)["gpus"][0];
  if (!g.contains("processes")) return Bytes{0};
  for (const auto& p : g["processes"])
    if (p.value("pid", -1) == pid) return p.contains("used") && p["used"].is_number() ? p["used"].get<Bytes>() : 0;
  return Bytes{0};
}

class FakeServer {
 public:
  FakeServer(const Options& o, const std::string& dir, const std::string& tag, const Case& c)
      : state_(dir + "/" + tag + "-gpu.json"), port_(free_port()), log_(dir + "/" + tag + "-fake.log") {
    auto s = vramd::make_fake_gpu_state({{"NVIDIA GeForce RTX 3090", 24 * GiB}});
    s["gpus"][0]["used"] = 400 * MiB;
    (void)vramd::write_fake_gpu_state(state_, s);
    std::vector<std::string> argv = {o.build_dir + "/fake-gpu-server", "--kind", "comfyui", "--port",
                                     std::to_string(port_), "--state", state_, "--model-bytes",
                                     std::to_string(kModelBytes) + "B"};
    argv.insert(argv.end(), c.fake_args.begin(), c.fake_args.end());
    child_ = std::make_unique<Child>(argv, std::vector<std::string>{}, log_);
    ready_ = eventually([&] { return slurp(log_).find(fmt::format("ready {}", port_)) != std::string::npos; },
                        10s);
  }
  bool ready() const { return ready_; }
  std::string url() const { return fmt::format("http://127.0.0.1:{}", port_); }
  const std::string& state() const { return state_; }
  const std::string& log() const { return log_; }
  pid_t pid() const { return child_->pid(); }
  void stop() { child_->stop(); }

 private:
  std::string state_;
  int port_;
  std::string log_;
  std::unique_ptr<Child> child_;
  bool ready_ = false;
};

// Watches one server every 10 ms: when it took the unload call and when its memory settled.
class Watcher {
 public:
  explicit Watcher(const FakeServer& f) : f_(f), thread_([this] { run(); }) {}
  ~Watcher() { finish(); }
  void finish() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  std::optional<Clock::time_point> call_seen() {
    std::lock_guard l(mu_);
    return call_;
  }
  std::optional<Clock::time_point> settled() {
    std::lock_guard l(mu_);
    return settled_;
  }

 private:
  void run() {
    while (!stop_) {
      auto t = Clock::now();
      if (!settled()) {
        auto b = bytes_of(f_.state(), f_.pid());
        if (b && *b <= kModelBytes / 10) {
          std::lock_guard l(mu_);
          settled_ = t;
        }
      }
      if (!call_seen()) {
        auto r = vramd::http_request({f_.url()}, "GET", "/fake/state", "", 500);
        if (r && r->status == 200) {
          auto j = json::parse(r->body, nullptr, false);
          if (j.is_object() && j.value("unload_calls", 0) >= 1) {
            std::lock_guard l(mu_);
            call_ = t;  // the poll before saw 0: the call came within the last ~10 ms
          }
        }
      }
      std::this_thread::sleep_for(10ms);
    }
  }
  const FakeServer& f_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::optional<Clock::time_point> call_, settled_;
  std::thread thread_;
};

// ---- one measurement of each method ----

struct Measure {
  bool ok = false;            // the measurement itself worked (no timeout, no error)
  std::string error;
  std::string verdict;        // freed | partial | ineffective | failed
  double after_call_ms = -1;  // from the unload call (as the server saw it) to the verdict
  std::optional<double> lag_ms;     // verdict - memory settled (negative: judged before it settled)
  std::optional<double> own_ms;     // vramd: duration_ms - call_ms from its answer
  std::optional<double> settle_ms;  // memory settled - call
  json answer;
};

Measure run_vramd(const Options& o, const std::string& dir, const Case& c, int rep) {
  Measure m;
  std::string tag = fmt::format("{}-{}-vramd", c.name, rep);
  FakeServer fake(o, dir, tag, c);
  if (!fake.ready()) {
    m.error = "fake server not ready: " + slurp(fake.log());
    return m;
  }
  int port = free_port();
  std::string url = fmt::format("http://127.0.0.1:{}", port);
  std::string sdir = dir + "/" + tag + "-state";
  std::filesystem::create_directories(sdir);
  std::string cfg = dir + "/" + tag + ".toml";
  std::ofstream(cfg) << fmt::format(
      "[daemon]\nlisten = \"127.0.0.1:{}\"\nstate_dir = \"{}\"\nsample_interval = \"1s\"\n\n"
      "[gpu]\nbackend = \"nvml\"\n\n"
      "[services.comfyui]\nkind = \"comfyui\"\nurl = \"{}\"\nunload_timeout = \"{}\"\n",
      port, sdir, fake.url(), o.unload_timeout);
  std::string dlog = dir + "/" + tag + "-daemon.log";
  Child daemon({o.build_dir + "/vramd", "serve", "--config", cfg},
               {"VRAMD_NVML_LIBRARY=" + o.build_dir + "/libnvidia-ml-fake.so",
                "FAKE_NVML_STATE=" + fake.state()},
               dlog);
  bool attributed = eventually(
      [&] {
        auto r = vramd::http_request({url}, "GET", "/v1/services/comfyui", "", 2000);
        if (!r || r->status != 200) return false;
        auto j = json::parse(r->body, nullptr, false);
        return j.is_object() && j.contains("bytes") && j["bytes"].is_number() &&
               j["bytes"].get<Bytes>() == kModelBytes;
      },
      20s, 50ms);
  if (!attributed) {
    m.error = "the daemon never attributed the bytes to comfyui; log:\n" + slurp(dlog);
    return m;
  }
  Watcher w(fake);
  auto r = vramd::http_request({url}, "POST", "/v1/services/comfyui/unload", "", 60000);
  auto t_verdict = Clock::now();
  // Keep watching until the memory settles (the 5 s case), so the lag is known either way.
  if (c.release_ms)
    eventually([&] { return w.settled().has_value(); }, std::chrono::milliseconds(*c.release_ms + 3000));
  w.finish();
  if (!r || r->status != 200) {
    m.error = r ? fmt::format("unload answered {}: {}", r->status, r->body) : r.error();
    return m;
  }
  m.answer = json::parse(r->body, nullptr, false);
  if (!m.answer.is_object()) {
    m.error = "unload answer is not JSON: " + r->body;
    return m;
  }
  auto call = w.call_seen();
  if (!call) {
    m.error = "the fake never saw the unload call";
    return m;
  }
  m.verdict = m.answer.value("outcome", "?");
  m.after_call_ms = ms_between(*call, t_verdict);
  m.own_ms = m.answer.value("duration_ms", 0.0) - m.answer.value("call_ms", 0.0);
  if (auto s = w.settled()) {
    m.lag_ms = ms_between(*s, t_verdict);
    m.settle_ms = ms_between(*call, *s);
  }
  m.ok = true;
  return m;
}

Measure run_fixed(const Options& o, const std::string& dir, const Case& c, int rep) {
  Measure m;
  FakeServer fake(o, dir, fmt::format("{}-{}-fixed", c.name, rep), c);
  if (!fake.ready()) {
    m.error = "fake server not ready: " + slurp(fake.log());
    return m;
  }
  auto before = bytes_of(fake.state(), fake.pid());
  if (!before || *before != kModelBytes) {
    m.error = "the fake does not hold its bytes in the state file";
    return m;
  }
  Watcher w(fake);
  auto r = vramd::http_request({fake.url()}, "POST", "/free", R"({"unload_models":true,"free_memory":true})",
                               5000);
  auto t_call = Clock::now();  // the call returned
  if (!r || r->status != 200) {
    m.error = r ? fmt::format("/free answered {}", r->status) : r.error();
    return m;
  }
  std::this_thread::sleep_until(t_call + kFixedWait);
  auto after = bytes_of(fake.state(), fake.pid());
  auto t_verdict = Clock::now();
  if (!after) {
    m.error = "state file unreadable";
    return m;
  }
  m.verdict = *after <= *before / 10 ? "freed" : "ineffective";
  m.after_call_ms = ms_between(t_call, t_verdict);
  if (c.release_ms)
    eventually([&] { return w.settled().has_value(); }, std::chrono::milliseconds(*c.release_ms + 3000));
  w.finish();
  if (auto s = w.settled()) {
    m.lag_ms = ms_between(*s, t_verdict);
    m.settle_ms = ms_between(t_call, *s);
  }
  m.ok = true;
  return m;
}

std::optional<double> median(std::vector<double> v) {
  if (v.empty()) return std::nullopt;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::string fmt_ms(std::optional<double> v) { return v ? fmt::format("{:.0f}", *v) : "-"; }

struct Row {
  Case c;
  std::vector<Measure> vramd, fixed;
};

// "freed 3/3 right" or "ineffective 3/3 WRONG" (the commonest verdict, and how many were right).
std::string verdicts(const std::vector<Measure>& ms, const std::string& truth) {
  int right = 0, n = 0;
  std::vector<std::string> seen;
  for (const auto& m : ms) {
    if (!m.ok) continue;
    ++n;
    if (m.verdict == truth) ++right;
    if (std::find(seen.begin(), seen.end(), m.verdict) == seen.end()) seen.push_back(m.verdict);
  }
  std::string names;
  for (const auto& s : seen) names += (names.empty() ? "" : "/") + s;
  if (n == 0) return "no run";
  return fmt::format("{} {}/{} {}", names, right, n, right == n ? "right" : "WRONG");
}

std::optional<double> med(const std::vector<Measure>& ms, std::optional<double> Measure::*f) {
  std::vector<double> v;
  for (const auto& m : ms)
    if (m.ok && m.*f) v.push_back(*(m.*f));
  return median(v);
}
std::optional<double> med_after(const std::vector<Measure>& ms) {
  std::vector<double> v;
  for (const auto& m : ms)
    if (m.ok) v.push_back(m.after_call_ms);
  return median(v);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (const char* r = std::getenv("REPS")) o.reps = std::max(1, std::atoi(r));
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--reps") o.reps = std::max(1, std::atoi(next().c_str()));
    else if (a == "--build-dir") o.build_dir = next();
    else if (a == "--unload-timeout") o.unload_timeout = next();
    else if (a == "--keep") o.keep = true;
    else {
      std::fprintf(stderr,
                   "usage: vramd_unload_bench [--reps N] [--build-dir DIR] [--unload-timeout DUR] [--keep]\n");
      return 2;
    }
  }
  for (const char* bin : {"/vramd", "/fake-gpu-server", "/libnvidia-ml-fake.so"})
    if (!std::filesystem::exists(o.build_dir + bin)) {
      std::fprintf(stderr, "vramd_unload_bench: %s%s missing\n", o.build_dir.c_str(), bin);
      return 2;
    }
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  std::signal(SIGPIPE, SIG_IGN);
  std::atexit(kill_all_children);

  char tmpl[] = "/tmp/vramd-unload-bench.XXXXXX";
  if (!::mkdtemp(tmpl)) return 2;
  std::string dir = tmpl;

  std::vector<Row> rows = {
      {{"at once", {}, 0, "freed"}, {}, {}},
      {{"after 2 s", {"--unload-delay", "2s"}, 2000, "freed"}, {}, {}},
      {{"after 5 s", {"--unload-delay", "5s"}, 5000, "freed"}, {}, {}},
      {{"ignore-unload", {"--ignore-unload"}, std::nullopt, "ineffective"}, {}, {}},
  };
  for (auto& row : rows) {
    // File-name-safe tag of the case.
    std::string tag = row.c.name;
    std::replace(tag.begin(), tag.end(), ' ', '_');
    Case c = row.c;
    c.name = tag;
    for (int rep = 0; rep < o.reps; ++rep) {
      // Both methods side by side, each on its own fresh server and state file.
      Measure fixed;
      std::thread t([&] { fixed = run_fixed(o, dir, c, rep); });
      Measure v = run_vramd(o, dir, c, rep);
      t.join();
      auto line = [&](const char* who, const Measure& m) {
        if (!m.ok) {
          std::printf("  %-13s rep %d %-6s ERROR %s\n", row.c.name.c_str(), rep + 1, who, m.error.c_str());
          return;
        }
        std::printf("  %-13s rep %d %-6s %-11s %s  after call %6.0f ms  settled %6s ms after call  "
                    "verdict - settled %6s ms%s\n",
                    row.c.name.c_str(), rep + 1, who, m.verdict.c_str(),
                    m.verdict == row.c.truth ? "right" : "WRONG", m.after_call_ms,
                    fmt_ms(m.settle_ms).c_str(), fmt_ms(m.lag_ms).c_str(),
                    m.own_ms ? fmt::format("  (vramd duration_ms - call_ms {:.0f})", *m.own_ms).c_str() : "");
        if (m.answer.is_object() && m.verdict != row.c.truth)
          std::printf("    answer: %s\n", m.answer.dump().c_str());
      };
      line("vramd", v);
      line("fixed", fixed);
      std::fflush(stdout);
      row.vramd.push_back(std::move(v));
      row.fixed.push_back(std::move(fixed));
    }
  }

  std::printf("\nmedians of %d repetitions (ms; 'after call' = from the server taking the unload call "
              "to the verdict; 'lag' = verdict - memory settled, negative = judged before it settled)\n",
              o.reps);
  std::printf("  %-13s %-11s | %-20s %10s %8s %12s | %-22s %10s %8s\n", "case", "true", "vramd verdict",
              "after call", "lag", "own dur-call", "fixed 3 s verdict", "after call", "lag");
  for (const auto& row : rows)
    std::printf("  %-13s %-11s | %-20s %10s %8s %12s | %-22s %10s %8s\n", row.c.name.c_str(),
                row.c.truth.c_str(), verdicts(row.vramd, row.c.truth).c_str(),
                fmt_ms(med_after(row.vramd)).c_str(), fmt_ms(med(row.vramd, &Measure::lag_ms)).c_str(),
                fmt_ms(med(row.vramd, &Measure::own_ms)).c_str(), verdicts(row.fixed, row.c.truth).c_str(),
                fmt_ms(med_after(row.fixed)).c_str(), fmt_ms(med(row.fixed, &Measure::lag_ms)).c_str());
  std::printf("\nratios (medians, same run)\n");
  for (const auto& row : rows) {
    auto va = med_after(row.vramd), fa = med_after(row.fixed);
    auto vl = med(row.vramd, &Measure::lag_ms);
    if (va && fa) std::printf("  %-13s vramd after call / fixed after call = %.2f", row.c.name.c_str(), *va / *fa);
    if (vl) std::printf(";  vramd lag / 1 s target = %.2f", *vl / 1000.0);
    std::printf("\n");
  }
  int failures = 0;
  for (const auto& row : rows)
    for (const auto& m : row.vramd)
      if (!m.ok) ++failures;
  if (!o.keep) {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  } else {
    std::printf("\nlogs kept in %s\n", dir.c_str());
  }
  return failures ? 1 : 0;
}
