// How deep a service sleeps when vramd frees its GPU memory, and what the sleep keeps
// (docs/proxy.md "Depths"). The core picks the depth (core/wake.h: choose_depth); the service's
// adapter turns it into its server's call; the wake undoes it.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/policies.h"
#include "core/units.h"

namespace vramd {

enum class SleepDepth {
  // Its weights kept in host RAM (vLLM level 1, SGLang's release, ComfyUI's /free with
  // unload_models only, A1111's unload-checkpoint): the wake copies them back, about a second.
  sleep1,
  // Nothing kept by the process (vLLM level 2, ComfyUI's /free with free_memory, Ollama's
  // keep_alive 0, llama.cpp's /models/unload): the wake reloads from disk or the page cache.
  sleep2,
  // The process ended by vramd (a service without an unload call, or one deepened past sleep2):
  // the wake is a start.
  stop,
  // Its processes suspended by NVIDIA's cuda-checkpoint (a service without an unload call, or
  // one whose unload was refused, where host RAM can take its bytes): its GPU memory is in host
  // RAM, its CPU side runs on, and the wake is a restore onto the same GPU.
  suspend,
};
const char* to_string(SleepDepth d);  // "sleep1", "sleep2", "stop", "suspend"
std::optional<SleepDepth> parse_sleep_depth(std::string_view s);
// For people: "level 1" for vLLM's sleep1, else to_string's word.
std::string describe_depth(SleepDepth d, std::string_view kind);

// A service vramd put to sleep, from the unload's verdict until a wake or a load is seen. It is
// asleep whatever it still holds on the GPU (a sleeping vLLM keeps its CUDA context).
struct Asleep {
  SleepDepth depth = SleepDepth::sleep2;
  MonoTime since{};
  Bytes gpu_kept = 0;  // what it still held on the GPU at the verdict
  Bytes host_ram = 0;  // what it keeps in host RAM (its RSS growth at the sleep, else estimated)
  bool host_ram_measured = false;
  std::vector<std::string> models;  // what it served when it went to sleep: still routed to it
  // Why it was put to sleep: the unload's reason (none when it says so itself). A prewarm reads
  // it (docs/proxy.md "Prewarm").
  std::optional<UnloadReason> reason;
  std::vector<int> pids;  // suspend: the processes checkpointed, restored by the wake
};

// How long a wake took from the call to ready: per service, model ("" none named) and depth.
// Learned from each wake, kept in the store across restarts.
struct WakeTime {
  std::string service;
  std::string model;
  SleepDepth depth = SleepDepth::sleep1;
  Duration took{0};
};

}  // namespace vramd
