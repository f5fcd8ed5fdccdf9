#include "sim/generate.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace vramd::sim {

namespace {

constexpr double kDay = 24 * 3600.0;

// xoshiro256** seeded by splitmix64: small, fast, and the same everywhere.
class Rng {
 public:
  explicit Rng(uint64_t seed) {
    for (auto& w : s_) {
      seed += 0x9e3779b97f4a7c15ULL;
      uint64_t z = seed;
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
      w = z ^ (z >> 31);
    }
  }
  uint64_t next() {
    uint64_t r = rotl(s_[1] * 5, 7) * 9, t = s_[1] << 17;
    s_[2] ^= s_[0], s_[3] ^= s_[1], s_[1] ^= s_[2], s_[0] ^= s_[3], s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return r;
  }
  double uniform() { return double(next() >> 11) / double(1ULL << 53); }  // [0, 1)
  double between(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  double exponential(double mean) { return -mean * std::log(1.0 - uniform()); }
  int integer(int lo, int hi) { return lo + int(uniform() * double(hi - lo + 1)); }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

struct TraceLine {
  double t;
  std::string json;
};

class Builder {
 public:
  explicit Builder(uint64_t seed) : rng(seed) {}
  Rng rng;

  void gpu(unsigned index, int total_gib) {
    head_.push_back(
        fmt::format(R"({{"t":0,"type":"gpu","index":{},"total":"{}GiB","baseline":"1GiB"}})", index,
                    total_gib));
  }
  void host(int ram_gib) {
    head_.push_back(fmt::format(R"({{"t":0,"type":"host","ram":"{}GiB"}})", ram_gib));
  }
  // `sleep1_s`: its wake from a level-1 sleep (weights in host RAM); < 0: it has none.
  void service(const std::string& name, unsigned gpu, double model_gib, int context_mib,
               double load_s, double unload_s, double effective, double restart_s,
               double sleep1_s = -1) {
    std::string sleep1 = sleep1_s >= 0 ? fmt::format(R"(,"sleep1_seconds":{})", sleep1_s) : "";
    head_.push_back(fmt::format(
        R"({{"t":0,"type":"service","name":"{}","gpu":{},"model_bytes":"{}MiB","context_bytes":"{}MiB","load_seconds":{},"unload_seconds":{},"unload_effective":{},"restart_seconds":{}{}}})",
        name, gpu, int(model_gib * 1024), context_mib, load_s, unload_s, effective, restart_s,
        sleep1));
  }
  void request(double t, const std::string& service, double duration) {
    if (t >= kDay) return;
    lines_.push_back(
        {t, fmt::format(R"({{"t":{:.3f},"type":"request","service":"{}","duration":{:.3f}}})", t,
                        service, duration)});
  }
  void job(double t, const std::string& name, unsigned gpu, int gib, double duration,
           int priority) {
    if (t >= kDay) return;
    lines_.push_back(
        {t,
         fmt::format(
             R"({{"t":{:.3f},"type":"job","name":"{}","gpu":{},"bytes":"{}GiB","duration":{:.0f},"priority":{}}})",
             t, name, gpu, gib, duration, priority)});
  }
  // A burst: `n` requests to `service`, gaps exponential around `gap_s`, each one served for
  // between `lo` and `hi` seconds; returns when the burst ends.
  double burst(double t, const std::string& service, int n, double gap_s, double lo, double hi) {
    for (int k = 0; k < n; ++k) {
      double d = rng.between(lo, hi);
      request(t, service, d);
      t += d + rng.exponential(gap_s);
    }
    return t;
  }
  // Start times of `n` sessions spread over [from_h, to_h) of the day.
  std::vector<double> times(int n, double from_h, double to_h) {
    std::vector<double> out;
    out.reserve(static_cast<std::size_t>(std::max(n, 0)));
    for (int k = 0; k < n; ++k) out.push_back(rng.between(from_h, to_h) * 3600.0);
    std::sort(out.begin(), out.end());
    return out;
  }
  std::string text() {
    std::stable_sort(lines_.begin(), lines_.end(),
                     [](const TraceLine& a, const TraceLine& b) { return a.t < b.t; });
    std::string out;
    for (const auto& h : head_) out += h + "\n";
    for (const auto& l : lines_) out += l.json + "\n";
    out += fmt::format(R"({{"t":{:.0f},"type":"end"}})", kDay) + "\n";
    return out;
  }

 private:
  std::vector<std::string> head_;
  std::vector<TraceLine> lines_;
};

// Level-1 wakes: the weights copied back from host RAM (a few GB/s over PCIe; vLLM's own figures:
// 0.26-6 s by model size). Ollama and speaches have no level-1 sleep (their unload frees all).
void homelab(Builder& b) {
  b.gpu(0, 24);
  b.host(32);
  b.service("comfyui", 0, 16, 400, 25, 2, 1.0, 40, 5);
  b.service("ollama", 0, 5, 1024, 6, 1, 1.0, 8);
  for (double t : b.times(b.rng.integer(3, 6), 9, 23))
    b.burst(t, "comfyui", b.rng.integer(5, 40), 45, 4, 20);
  for (double t : b.times(b.rng.integer(6, 12), 7, 24))
    b.burst(t, "ollama", b.rng.integer(3, 20), 60, 2, 15);
  int n = 0;
  for (double t : b.times(b.rng.integer(8, 14), 8, 22))
    b.job(t, fmt::format("whisperx-{}", ++n), 0, 6, b.rng.between(120, 900), 0);
}

void agent(Builder& b) {
  b.gpu(0, 32);
  b.host(32);
  b.service("flux-lora-a", 0, 13, 1024, 30, 3, 0.8, 45, 4);
  b.service("flux-lora-b", 0, 13, 1024, 30, 3, 0.8, 45, 4);
  b.service("wan-video", 0, 18, 2048, 45, 4, 0.8, 60, 6);
  // The agent works in tasks back to back: images with one LoRA (sometimes the other), then a
  // video; between tasks, an upscale or a LoRA training job.
  double t = 600;
  int jobs = 0;
  while (t < kDay) {
    std::string lora = b.rng.uniform() < 0.5 ? "flux-lora-a" : "flux-lora-b";
    t = b.burst(t, lora, b.rng.integer(2, 8), 5, 6, 20);
    if (b.rng.uniform() < 0.6) t = b.burst(t, "wan-video", 1, 5, 120, 300);
    if (b.rng.uniform() < 0.35) {
      bool train = b.rng.uniform() < 0.3;
      b.job(t, fmt::format("{}-{}", train ? "lora-train" : "upscale", ++jobs), 0, train ? 16 : 8,
            train ? b.rng.between(600, 1800) : b.rng.between(60, 240), 0);
    }
    t += b.rng.exponential(240);
  }
}

void lab(Builder& b) {
  b.gpu(0, 48);
  b.gpu(1, 48);
  b.host(64);
  b.service("vllm-70b", 0, 38, 4096, 90, 5, 1.0, 120, 8);
  b.service("comfyui", 0, 16, 1024, 25, 2, 0.9, 40, 5);
  b.service("speaches", 0, 2, 512, 5, 1, 1.0, 8);
  b.service("vllm-8b", 1, 16, 6144, 40, 3, 1.0, 60, 3);
  b.service("ollama", 1, 8, 2048, 8, 1, 1.0, 10);
  b.service("comfyui-video", 1, 24, 2048, 45, 4, 0.9, 60, 6);
  for (double t : b.times(b.rng.integer(10, 16), 8, 20))
    b.burst(t, "vllm-70b", b.rng.integer(5, 30), 90, 5, 40);
  for (double t : b.times(b.rng.integer(3, 6), 9, 22))
    b.burst(t, "comfyui", b.rng.integer(5, 25), 40, 4, 15);
  for (double t : b.times(b.rng.integer(5, 10), 8, 20))
    b.burst(t, "speaches", b.rng.integer(2, 10), 30, 2, 20);
  for (double t : b.times(b.rng.integer(10, 20), 0, 24))
    b.burst(t, "vllm-8b", b.rng.integer(5, 40), 30, 1, 10);
  for (double t : b.times(b.rng.integer(8, 14), 7, 23))
    b.burst(t, "ollama", b.rng.integer(3, 15), 60, 2, 12);
  for (double t : b.times(b.rng.integer(2, 5), 10, 22))
    b.burst(t, "comfyui-video", b.rng.integer(1, 4), 60, 90, 300);
  int n = 0;
  for (double t : b.times(b.rng.integer(3, 6), 0, 24))
    b.job(t, fmt::format("train-{}", ++n), b.rng.integer(0, 1), 30, b.rng.between(1800, 5400), 10);
  for (double t : b.times(b.rng.integer(8, 14), 6, 22))
    b.job(t, fmt::format("eval-{}", ++n), b.rng.integer(0, 1), 20, b.rng.between(300, 900), 5);
  for (double t : b.times(b.rng.integer(10, 20), 0, 24))
    b.job(t, fmt::format("batch-{}", ++n), b.rng.integer(0, 1), 12, b.rng.between(600, 1800), 0);
}

void stress(Builder& b) {
  b.gpu(0, 48);
  b.host(64);
  b.service("comfyui", 0, 16, 1024, 25, 2, 0.9, 40, 5);
  b.service("ollama", 0, 8, 1024, 6, 1, 1.0, 8);
  b.service("vllm", 0, 20, 4096, 60, 3, 1.0, 90, 3);
  b.service("speaches", 0, 2, 512, 5, 1, 1.0, 8);
  const char* names[] = {"comfyui", "ollama", "vllm", "speaches"};
  // ~48,000 requests in 24 h (one every 1.8 s), in bursts on one service at a time.
  double t = 0;
  while (t < kDay) t = b.burst(t, names[b.rng.integer(0, 3)], b.rng.integer(10, 60), 0.5, 0.2, 2.0);
  int n = 0;
  for (double u : b.times(2000, 0, 24))
    b.job(u, fmt::format("job-{}", ++n), 0, b.rng.integer(4, 16), b.rng.between(10, 120), 0);
}

}  // namespace

const std::vector<std::string>& trace_generators() {
  static const std::vector<std::string> g = {"homelab", "agent", "lab", "stress"};
  return g;
}

Result<std::string> generate_trace(const std::string& name, uint64_t seed) {
  Builder b(seed);
  if (name == "homelab")
    homelab(b);
  else if (name == "agent")
    agent(b);
  else if (name == "lab")
    lab(b);
  else if (name == "stress")
    stress(b);
  else
    return make_error(
        fmt::format("no trace generator '{}': expected homelab, agent, lab or stress", name));
  return b.text();
}

}  // namespace vramd::sim
