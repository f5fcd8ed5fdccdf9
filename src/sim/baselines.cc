// The field's own rules (docs/sim.md "Policies", each with its source), and the policy factory.
// Each is applied host-wide: it sees every service on the host as if they were its own runners,
// which is the best case for it. None of them knows about jobs: a job waits until it fits.
#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "sim/policy.h"
#include "sim/vramd_policy.h"

namespace vramd::sim {

namespace {

bool fits(const World& w, size_t svc) {
  return w.free_committed(w.service(svc).spec->gpu) >= w.service(svc).spec->footprint();
}

// Loaded, no request: may be unloaded.
bool idle(const World& w, size_t svc) {
  return w.service(svc).phase == Phase::loaded && !w.service(svc).busy();
}

// Idle services on a GPU, least recently used first (ties: trace order).
std::vector<size_t> idle_lru(const World& w, unsigned gpu, std::optional<size_t> except) {
  std::vector<size_t> out;
  for (size_t i = 0; i < w.services().size(); ++i)
    if (w.service(i).spec->gpu == gpu && idle(w, i) && i != except) out.push_back(i);
  std::stable_sort(out.begin(), out.end(), [&](size_t a, size_t b) {
    return w.service(a).last_used < w.service(b).last_used;
  });
  return out;
}

// An idle timer: a service idle for `ttl` is unloaded, once per idle period.
class IdleTimer {
 public:
  explicit IdleTimer(Ms ttl) : ttl_(ttl) {}
  std::optional<Ms> next(const World& w) const {
    std::optional<Ms> out;
    for (size_t i = 0; i < w.services().size(); ++i)
      if (due_candidate(w, i)) {
        Ms t = w.service(i).last_used + ttl_;
        out = out ? std::min(*out, t) : t;
      }
    return out;
  }
  // `unload`: the service's call (an API unload or a process stop).
  template <typename F>
  void fire(World& w, F unload) {
    for (size_t i = 0; i < w.services().size(); ++i)
      if (due_candidate(w, i) && w.now() >= w.service(i).last_used + ttl_) {
        tried_[i] = w.service(i).last_used;
        unload(i);
      }
  }

 private:
  bool due_candidate(const World& w, size_t i) const {
    if (!idle(w, i)) return false;
    auto t = tried_.find(i);
    return t == tried_.end() || t->second < w.service(i).last_used;
  }
  Ms ttl_;
  std::map<size_t, Ms> tried_;  // last_used at the last try: one try per idle period
};

// ComfyUI's default: nothing is ever unloaded.
class Never : public Policy {
 public:
  std::string name() const override { return "never"; }
  bool may_load(World& w, size_t svc) override { return fits(w, svc); }
};

// The homelab sidecar: unload through the server's API after `ttl` idle.
class Ttl : public Policy {
 public:
  explicit Ttl(Ms ttl, std::string name) : timer_(ttl), name_(std::move(name)) {}
  std::string name() const override { return name_; }
  void start(World& w) override { w_ = &w; }
  std::optional<Ms> next_wakeup() const override { return timer_.next(*w_); }
  void on_wakeup(World& w) override {
    timer_.fire(w, [&](size_t i) { w.unload(i); });
  }
  bool may_load(World& w, size_t svc) override { return fits(w, svc); }

 private:
  IdleTimer timer_;
  std::string name_;
  const World* w_ = nullptr;
};

// The job runner's rule: unload a service as soon as its request queue empties.
class FreeAtEnd : public Policy {
 public:
  std::string name() const override { return "free-at-end"; }
  void on_request_done(World& w, size_t svc) override {
    if (!w.service(svc).busy()) w.unload(svc);
  }
  bool may_load(World& w, size_t svc) override { return fits(w, svc); }
};

// Ollama's scheduler: keep-alive after the last request; a load that does not fit unloads the
// idle runner used longest ago, then waits until 75% of its memory is back (or 5 s), and tries
// again. Its runners are its own processes: an unload ends one (always frees).
class Ollama : public Policy {
 public:
  explicit Ollama(Ms keep_alive) : timer_(keep_alive) {}
  std::string name() const override { return "ollama"; }
  void start(World& w) override { w_ = &w; }
  std::optional<Ms> next_wakeup() const override {
    auto t = timer_.next(*w_);
    for (const auto& [svc, wait] : waits_) t = t ? std::min(*t, wait.until) : wait.until;
    return t;
  }
  void on_wakeup(World& w) override {
    timer_.fire(w, [&](size_t i) { w.stop(i); });
  }
  bool may_load(World& w, size_t svc) override {
    unsigned gpu = w.service(svc).spec->gpu;
    if (auto it = waits_.find(svc); it != waits_.end()) {
      const Wait& wait = it->second;
      bool recovered = w.free_committed(gpu) >= wait.free_before + wait.bytes * 3 / 4;
      if (!recovered && w.now() < wait.until) return false;
      waits_.erase(it);
    }
    if (fits(w, svc)) return true;
    auto victims = idle_lru(w, gpu, svc);
    if (victims.empty()) return false;  // busy runners or jobs in the way: it waits
    size_t v = victims.front();
    waits_[svc] = {w.free_committed(gpu), w.service(v).spec->footprint(), w.now() + 5000};
    w.stop(v);
    return false;
  }

 private:
  struct Wait {
    Bytes free_before = 0;
    Bytes bytes = 0;  // what the runner it unloaded held
    Ms until = 0;
  };
  IdleTimer timer_;
  std::map<size_t, Wait> waits_;  // per service whose load waits for an unload
  const World* w_ = nullptr;
};

// LocalAI: at most `max_active` backends loaded (LRU evicted to load another), and the memory
// reclaimer: above 95% of a GPU's memory, idle backends go, least recently used first. Its
// backends are its own processes: evicting one ends it.
class LocalAi : public Policy {
 public:
  explicit LocalAi(int max_active, std::string name) : max_(max_active), name_(std::move(name)) {}
  std::string name() const override { return name_; }
  void start(World& w) override { w_ = &w; }
  std::optional<Ms> next_wakeup() const override { return next_check_; }
  void on_wakeup(World& w) override {
    next_check_ = w.now() + kCheckInterval;
    for (const auto& g : w.trace().gpus) reclaim(w, g.index, 0);
  }
  bool may_load(World& w, size_t svc) override {
    const TraceService& s = *w.service(svc).spec;
    int loaded = 0, stopping = 0;
    for (size_t i = 0; i < w.services().size(); ++i) {
      Phase p = w.service(i).phase;
      loaded += p == Phase::loading || p == Phase::loaded;
      stopping += p == Phase::unloading;
    }
    // A backend being stopped still counts: LocalAI waits for it to end before loading.
    if (max_ > 0 && loaded + stopping >= max_) {
      std::vector<size_t> lru;
      for (const auto& g : w.trace().gpus)
        for (size_t i : idle_lru(w, g.index, svc)) lru.push_back(i);
      std::stable_sort(lru.begin(), lru.end(), [&](size_t a, size_t b) {
        return w.service(a).last_used < w.service(b).last_used;
      });
      for (int k = 0; k < loaded + 1 - max_ && k < int(lru.size()); ++k) w.stop(lru[size_t(k)]);
      return false;  // it loads once those stopped are gone
    }
    reclaim(w, s.gpu, s.footprint());
    return fits(w, svc);
  }

 private:
  static constexpr Ms kCheckInterval = 5000;
  // Evicts idle backends on `gpu` while its use (plus `incoming`) is above the threshold.
  void reclaim(World& w, unsigned gpu, Bytes incoming) {
    const TraceGpu* g = w.trace().gpu(gpu);
    auto over = [&] {
      return double(g->total - w.free_committed(gpu) + incoming) > 0.95 * double(g->total);
    };
    for (size_t v : idle_lru(w, gpu, std::nullopt)) {
      if (!over()) break;
      w.stop(v);
    }
  }
  int max_;
  std::string name_;
  Ms next_check_ = 0;
  const World* w_ = nullptr;
};

// llama-swap: every service on a GPU in one group with swap = true (one member loaded at a
// time: loading one stops the others, once their requests are done); `ttl` 0 = never unload.
class LlamaSwap : public Policy {
 public:
  LlamaSwap(Ms ttl, std::string name) : timer_(ttl), ttl_(ttl), name_(std::move(name)) {}
  std::string name() const override { return name_; }
  void start(World& w) override { w_ = &w; }
  std::optional<Ms> next_wakeup() const override {
    return ttl_ > 0 ? timer_.next(*w_) : std::nullopt;
  }
  void on_wakeup(World& w) override {
    if (ttl_ > 0) timer_.fire(w, [&](size_t i) { w.stop(i); });
  }
  bool may_load(World& w, size_t svc) override {
    unsigned gpu = w.service(svc).spec->gpu;
    bool others = false;
    for (size_t i = 0; i < w.services().size(); ++i) {
      if (i == svc || w.service(i).spec->gpu != gpu) continue;
      if (w.service(i).phase == Phase::unloaded || w.service(i).phase == Phase::restarting)
        continue;
      others = true;
      if (idle(w, i)) w.stop(i);
    }
    return !others && fits(w, svc);
  }

 private:
  IdleTimer timer_;
  Ms ttl_;
  std::string name_;
  const World* w_ = nullptr;
};

// "name:arg" → (name, arg); "key=value" args → value of `key`.
Result<Ms> duration_arg(const std::string& spec, const std::string& text) {
  auto d = parse_duration(text);
  if (!d) return make_error(fmt::format("policy '{}': {}", spec, d.error()));
  return Ms(d->count());
}

}  // namespace

const std::vector<std::string>& all_policies() {
  static const std::vector<std::string> p = {"never",   "ttl:300s",   "free-at-end", "ollama",
                                             "localai", "llama-swap", "vramd"};
  return p;
}

Result<std::unique_ptr<Policy>> make_policy(const std::string& spec, const Config& config,
                                            bool config_from_file) {
  size_t colon = spec.find(':');
  std::string name = spec.substr(0, colon);
  std::string arg = colon == std::string::npos ? "" : spec.substr(colon + 1);
  auto keyed = [&](const std::string& key) -> std::optional<std::string> {
    if (arg.rfind(key + "=", 0) == 0) return arg.substr(key.size() + 1);
    return std::nullopt;
  };
  auto bad_arg = [&](const std::string& want) {
    return make_error(fmt::format("policy '{}': expected {}", spec, want));
  };
  if (name == "never" && arg.empty()) return std::unique_ptr<Policy>(new Never);
  if (name == "free-at-end" && arg.empty()) return std::unique_ptr<Policy>(new FreeAtEnd);
  if (name == "vramd") {
    if (arg.empty()) return std::unique_ptr<Policy>(new VramdPolicy(config, config_from_file));
    if (arg == "fixed-depth")
      return std::unique_ptr<Policy>(
          new VramdPolicy(config, config_from_file, VramdVariant::fixed_depth));
    if (arg == "prewarm")
      return std::unique_ptr<Policy>(
          new VramdPolicy(config, config_from_file, VramdVariant::prewarm));
    if (arg == "no-suspend")
      return std::unique_ptr<Policy>(
          new VramdPolicy(config, config_from_file, VramdVariant::no_suspend));
    return bad_arg("vramd, vramd:fixed-depth, vramd:prewarm or vramd:no-suspend");
  }
  if (name == "ttl") {
    if (arg.empty()) return bad_arg("a duration: ttl:300s");
    auto d = duration_arg(spec, arg);
    if (!d) return Error{d.error()};
    if (*d <= 0) return bad_arg("a duration above 0");
    return std::unique_ptr<Policy>(new Ttl(*d, spec));
  }
  if (name == "ollama") {
    Ms keep = Ms{5} * 60 * 1000;  // OLLAMA_KEEP_ALIVE's default
    if (!arg.empty()) {
      auto v = keyed("keep_alive");
      if (!v) return bad_arg("ollama or ollama:keep_alive=5m");
      auto d = duration_arg(spec, *v);
      if (!d) return Error{d.error()};
      keep = *d;
    }
    return std::unique_ptr<Policy>(new Ollama(keep));
  }
  if (name == "localai") {
    int max = 0;  // LOCALAI_MAX_ACTIVE_BACKENDS: 0 (no limit) is its default
    if (!arg.empty()) {
      auto v = keyed("max");
      if (!v || v->empty() || v->size() > 3 ||
          v->find_first_not_of("0123456789") != std::string::npos)
        return bad_arg("localai or localai:max=N (N >= 0; 0: no limit)");
      max = std::stoi(*v);
    }
    return std::unique_ptr<Policy>(new LocalAi(max, spec));
  }
  if (name == "llama-swap") {
    Ms ttl = 0;
    if (!arg.empty()) {
      auto v = keyed("ttl");
      if (!v) return bad_arg("llama-swap or llama-swap:ttl=300s");
      auto d = duration_arg(spec, *v);
      if (!d) return Error{d.error()};
      ttl = *d;
    }
    return std::unique_ptr<Policy>(new LlamaSwap(ttl, spec));
  }
  return make_error(fmt::format(
      "unknown policy '{}': expected never, ttl:DURATION, free-at-end, ollama, localai[:max=N], "
      "llama-swap[:ttl=DURATION] or vramd[:fixed-depth|:prewarm|:no-suspend]",
      spec));
}

}  // namespace vramd::sim
