// A fake `cuda-checkpoint` (NVIDIA's utility, github NVIDIA/cuda-checkpoint) over the test GPU
// ($FAKE_NVML_STATE, see fake_state.h). Built as fake-bin/cuda-checkpoint. Usage, states, failure
// modes: tests/fake_nvml/README.md.
//
// A checkpoint takes the pid off its GPUs' process lists and its bytes off their "used"; the
// entries and bytes are kept in a side file (STATE.cuda-checkpoint-pids.json) so that a restore
// puts exactly those back on the same GPUs. Every change happens under the state file's lock
// (src/testgpu/fake_gpu_state.h), the side file's included.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "fake_state.h"
#include "testgpu/fake_gpu_state.h"

namespace {

using nlohmann::json;

// CUDA driver errors as the real utility reports them: cuGetErrorString's text, and the code as
// its exit status (so 801 exits 33: only the low byte reaches the parent).
struct CudaError {
  int code;
  const char* text;
};
constexpr CudaError kInvalidValue{1, "invalid argument"};
constexpr CudaError kOutOfMemory{2, "out of memory"};
constexpr CudaError kNotInitialized{3, "initialization error"};
constexpr CudaError kIllegalState{401, "the operation cannot be performed in the present state"};
constexpr CudaError kNotSupported{801, "operation not supported"};
constexpr CudaError kTimeout{909, "the operation timed out"};

constexpr const char* kHelp570 = R"(CUDA checkpoint and restore utility.
Version 570.86.10. Copyright (C) 2025 NVIDIA Corporation. All rights reserved.

Operations:
--get-state --pid <pid>
        Prints the checkpoint state of <pid>: running, locked, checkpointed or failed

--action lock | checkpoint | restore | unlock --pid <pid> [--timeout <ms>]
        Performs one step on <pid>; a lock waits at most <ms> milliseconds

--toggle --pid <pid>
        Toggles <pid> between the running and checkpointed states

Options:
--pid|-p <pid>
--timeout|-t <ms>
--help|-h
)";

// The brief's 550-style utility: --toggle, and --get-state to aim it.
constexpr const char* kHelp550 = R"(CUDA checkpoint and restore utility.
Toggles the state of CUDA within a process between suspended and running.
Version 550.90.07. Copyright (C) 2024 NVIDIA Corporation. All rights reserved.

    --toggle --pid <value>
        Toggle the state of CUDA in the specified process.

    --get-state --pid <value>
        Print the state of CUDA in the specified process.

    --help
        Print help message.
)";

// 550.54's utility as its README shows it: --toggle and nothing else.
constexpr const char* kHelp550ToggleOnly = R"(CUDA checkpoint and restore utility.
Toggles the state of CUDA within a process between suspended and running.
Version 550.54.09. Copyright (C) 2024 NVIDIA Corporation. All rights reserved.

    --toggle --pid <value>
        Toggle the state of CUDA in the specified process.

    --help
        Print help message.
)";

std::string state_path() {
  const char* p = std::getenv("FAKE_NVML_STATE");
  return p == nullptr ? std::string() : std::string(p);
}

// The failure modes: words from $FAKE_CUDA_CHECKPOINT and from the control file
// STATE.cuda-checkpoint (read on every call, so a test can change them between two calls).
std::set<std::string> faults(const std::string& state) {
  std::string text;
  if (const char* env = std::getenv("FAKE_CUDA_CHECKPOINT")) text = env;
  if (!state.empty()) {
    std::ifstream in(state + ".cuda-checkpoint");
    std::stringstream buffer;
    buffer << in.rdbuf();
    text += " " + buffer.str();
  }
  for (char& c : text) {
    if (c == ',' || c == '\n' || c == '\t') c = ' ';
  }
  std::set<std::string> out;
  std::stringstream words(text);
  std::string w;
  while (words >> w) out.insert(w);
  return out;
}

[[noreturn]] void fail(const std::string& verb, unsigned pid, CudaError e) {
  std::fprintf(stderr, "Could not %s on process ID %u: \"%s\"\n", verb.c_str(), pid, e.text);
  std::exit(e.code);
}

[[noreturn]] void usage(const char* help, const std::string& why) {
  std::fprintf(stderr, "%s\n%s", why.c_str(), help);
  std::exit(1);
}

// One GPU's share of a checkpointed pid: its list entries and the bytes that left "used".
// Side file: {"PID": {"state": "locked"|"checkpointed", "held": [{"gpu": i, "list": "processes",
// "entry": {...}, "bytes": N}, ...]}}; a pid not in it runs. On a MIG instance the entry has
// "mig": j (the index in the card's "mig_devices"), and the bytes left the card's "used" too.
std::string side_path(const std::string& state) { return state + ".cuda-checkpoint-pids.json"; }

json read_side(const std::string& state) {
  std::ifstream in(side_path(state));
  if (!in) return json::object();
  std::stringstream buffer;
  buffer << in.rdbuf();
  json j = json::parse(buffer.str(), nullptr, /*allow_exceptions=*/false);
  return j.is_object() ? j : json::object();
}

// Atomically, like the state file. REQUIRES: the state file's lock held.
void write_side(const std::string& state, const json& side) {
  std::string tmp = side_path(state) + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << side.dump(2) << "\n";
  }
  std::rename(tmp.c_str(), side_path(state).c_str());
}

// The MIG instances of a card: (index in "mig_devices", the instance), null slots skipped.
std::vector<std::pair<std::size_t, json*>> mig_instances(json& gpu) {
  std::vector<std::pair<std::size_t, json*>> out;
  if (!gpu.contains("mig_devices") || !gpu["mig_devices"].is_array()) return out;
  for (std::size_t j = 0; j < gpu["mig_devices"].size(); ++j)
    if (gpu["mig_devices"][j].is_object()) out.emplace_back(j, &gpu["mig_devices"][j]);
  return out;
}

bool on_gpu(const json& state, unsigned pid) {
  for (unsigned i = 0; i < fake_nvml::gpu_count(state); ++i) {
    const json* gpu = fake_nvml::gpu_at(state, i);
    if (gpu == nullptr) continue;
    for (const char* list : {"processes", "graphics_processes"}) {
      for (const auto& p : fake_nvml::processes(*gpu, list)) {
        if (p.pid == pid) return true;
      }
    }
    for (const auto& [j, mig] : mig_instances(const_cast<json&>(*gpu)))
      for (const char* list : {"processes", "graphics_processes"})
        if (mig->contains(list) && (*mig)[list].is_array())
          for (const auto& p : (*mig)[list])
            if (p.is_object() && fake_nvml::get_u64(p, "pid", 0) == pid) return true;
  }
  return false;
}

// The pid's state; nullopt: not a CUDA process (not on the GPU, not suspended by this fake).
std::optional<std::string> pid_state(const json& state, const json& side, unsigned pid) {
  auto it = side.find(std::to_string(pid));
  if (it != side.end()) return it->value("state", "running");
  if (on_gpu(state, pid)) return "running";
  return std::nullopt;
}

void subtract_used(json& device, unsigned long long bytes) {
  unsigned long long used = fake_nvml::get_u64(device, "used", 0);
  device["used"] = used > bytes ? used - bytes : 0;
}

// Takes the pid off `device` (a card, or one of its MIG instances: then its bytes leave the
// card's "used" too), adding what it took to `held`.
void take_off_device(json& device, json& card, std::size_t gpu, std::optional<std::size_t> mig,
                     unsigned pid, json& held) {
  bool counted = false;
  for (const char* list : {"processes", "graphics_processes"}) {
    if (!device.contains(list) || !device[list].is_array()) continue;
    json& procs = device[list];
    for (auto it = procs.begin(); it != procs.end();) {
      if (!it->is_object() || fake_nvml::get_u64(*it, "pid", 0) != pid) {
        ++it;
        continue;
      }
      // A process in both lists holds its bytes once: they leave "used" with its first entry.
      unsigned long long bytes = 0;
      if (!counted)
        bytes = fake_nvml::get_u64(*it, "card_bytes", fake_nvml::get_u64(*it, "used", 0));
      counted = true;
      subtract_used(device, bytes);
      if (&device != &card) subtract_used(card, bytes);
      json h = {{"gpu", gpu}, {"list", list}, {"entry", *it}, {"bytes", bytes}};
      if (mig) h["mig"] = *mig;
      held.push_back(std::move(h));
      it = procs.erase(it);
    }
  }
}

// Takes the pid off every GPU and MIG instance: its entries and bytes, for the restore to put
// back.
json take_off(json& state, unsigned pid) {
  json held = json::array();
  if (!state.contains("gpus") || !state["gpus"].is_array()) return held;
  for (std::size_t i = 0; i < state["gpus"].size(); ++i) {
    json& gpu = state["gpus"][i];
    take_off_device(gpu, gpu, i, std::nullopt, pid, held);
    for (const auto& [j, mig] : mig_instances(gpu)) take_off_device(*mig, gpu, i, j, pid, held);
  }
  return held;
}

// Puts back what take_off took; false (nothing changed) when a GPU has no room for it.
bool put_back(json& state, const json& held) {
  std::vector<unsigned long long> need(fake_nvml::gpu_count(state), 0);
  for (const auto& h : held) {
    std::size_t i = h.value("gpu", std::size_t{0});
    if (i >= need.size()) return false;
    need[i] += fake_nvml::get_u64(h, "bytes", 0);
  }
  for (std::size_t i = 0; i < need.size(); ++i) {
    const json& gpu = state["gpus"][i];
    unsigned long long total = fake_nvml::get_u64(gpu, "total", 0);
    unsigned long long used = fake_nvml::get_u64(gpu, "used", 0);
    if (need[i] > 0 && (used > total || total - used < need[i])) return false;
  }
  for (const auto& h : held) {
    json& gpu = state["gpus"][h.value("gpu", std::size_t{0})];
    json* device = &gpu;
    if (h.contains("mig") && gpu.contains("mig_devices") && gpu["mig_devices"].is_array() &&
        h["mig"].get<std::size_t>() < gpu["mig_devices"].size())
      device = &gpu["mig_devices"][h["mig"].get<std::size_t>()];
    std::string list = h.value("list", "processes");
    if (!device->contains(list) || !(*device)[list].is_array()) (*device)[list] = json::array();
    (*device)[list].push_back(h["entry"]);
    unsigned long long bytes = fake_nvml::get_u64(h, "bytes", 0);
    (*device)["used"] = fake_nvml::get_u64(*device, "used", 0) + bytes;
    if (device != &gpu) gpu["used"] = fake_nvml::get_u64(gpu, "used", 0) + bytes;
  }
  return true;
}

struct Outcome {
  std::optional<CudaError> error;
  std::string verb;  // for the error's "Could not VERB on process ID"
};

// One step on the pid under the lock: lock, checkpoint, restore, unlock or toggle.
Outcome step(const std::string& op, unsigned pid, const std::set<std::string>& f) {
  Outcome o;
  o.verb = op;
  std::string path = state_path();
  vramd::Status s = vramd::update_fake_gpu_state(path, [&](json& state) {
    json side = read_side(path);
    std::string key = std::to_string(pid);
    std::optional<std::string> now = pid_state(state, side, pid);
    if (!now) {
      o.error = ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH ? kInvalidValue
                                                                          : kNotInitialized;
      return;
    }
    auto set = [&](const std::string& to) {
      if (to == "running") {
        side.erase(key);
      } else {
        side[key]["state"] = to;
      }
    };
    auto checkpoint = [&]() -> bool {
      if (f.count("uvm") != 0) {  // UVM memory cannot be checkpointed: the driver refuses
        o.error = kNotSupported;
        return false;
      }
      side[key]["held"] = take_off(state, pid);
      set("checkpointed");
      return true;
    };
    auto restore = [&]() -> bool {
      if (f.count("restore-fails") != 0 || !put_back(state, side[key]["held"])) {
        o.error = kOutOfMemory;  // the state stays checkpointed, as the real driver's does
        return false;
      }
      side[key].erase("held");
      set("locked");
      return true;
    };
    if (op == "lock") {
      if (*now != "running")
        o.error = kIllegalState;
      else if (f.count("lock-timeout") != 0)
        o.error = kTimeout;
      else
        set("locked");
    } else if (op == "checkpoint") {
      if (*now != "locked")
        o.error = kIllegalState;
      else
        checkpoint();
    } else if (op == "restore") {
      if (*now != "checkpointed")
        o.error = kIllegalState;
      else
        restore();
    } else if (op == "unlock") {
      if (*now != "locked")
        o.error = kIllegalState;
      else
        set("running");
    } else if (op == "toggle") {
      // A toggle that fails half way undoes its own lock: the pid stays where it was.
      if (*now == "running") {
        set("locked");
        if (!checkpoint()) set("running");
      } else if (*now == "checkpointed") {
        if (restore()) set("running");
      } else {
        o.error = kIllegalState;
      }
    }
    write_side(path, side);
  });
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.error().c_str());
    std::exit(1);
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  std::string state = state_path();
  std::set<std::string> f = faults(state);
  if (f.count("old-driver") != 0) {  // the utility's own check of the driver's version
    std::fprintf(stderr, "Insufficient driver\n");
    return 1;
  }
  bool form550 = f.count("driver-550") != 0;
  bool toggle_only = f.count("driver-550-toggle-only") != 0;
  const char* help = toggle_only ? kHelp550ToggleOnly : form550 ? kHelp550 : kHelp570;

  std::string op;  // help, get-state, lock, checkpoint, restore, unlock, toggle
  std::optional<unsigned> pid;
  std::optional<long> timeout_ms;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(help, "Missing value for " + a);
      return argv[++i];
    };
    if (a == "--help" || a == "-h") {
      op = "help";
    } else if (a == "--toggle") {
      op = "toggle";
    } else if (a == "--get-state" && !toggle_only) {
      op = "get-state";
    } else if (a == "--action" && !form550 && !toggle_only) {
      op = value();
      if (op != "lock" && op != "checkpoint" && op != "restore" && op != "unlock")
        usage(help, "Invalid action: " + op);
    } else if (a == "--pid" || a == "-p") {
      pid = static_cast<unsigned>(std::strtoul(value().c_str(), nullptr, 10));
    } else if ((a == "--timeout" || a == "-t") && !form550 && !toggle_only) {
      timeout_ms = std::strtol(value().c_str(), nullptr, 10);
    } else {
      usage(help, "Unrecognized option: " + a);
    }
  }
  if (op.empty()) usage(help, "No operation given");
  // A hung driver call (hang-lock, hang-checkpoint, ...): never answers; killed by its caller.
  if (f.count("hang-" + op) != 0) std::this_thread::sleep_for(std::chrono::hours(1));
  if (op == "help") {
    std::fputs(help, stdout);
    return 0;
  }
  if (!pid) usage(help, "A --pid is required");
  if (state.empty()) fail(op == "get-state" ? "get state" : op, *pid, kNotInitialized);

  if (op == "get-state") {
    // Under the writers' lock (shared): the state file and the side file of one moment.
    int lock = ::open((state + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    while (lock >= 0 && ::flock(lock, LOCK_SH) != 0 && errno == EINTR) {
    }
    vramd::Result<json> s = vramd::read_fake_gpu_state(state);
    json side = read_side(state);
    if (lock >= 0) ::close(lock);
    if (!s.ok()) fail("get state", *pid, kNotInitialized);
    std::optional<std::string> now = pid_state(*s, side, *pid);
    if (!now)
      fail("get state", *pid,
           ::kill(static_cast<pid_t>(*pid), 0) != 0 && errno == ESRCH ? kInvalidValue
                                                                      : kNotInitialized);
    std::printf("%s\n", now->c_str());
    return 0;
  }
  // A lock that cannot get hold of the process waits out its timeout (without one: for ever).
  if (op == "lock" && f.count("lock-timeout") != 0) {
    if (timeout_ms) {
      std::this_thread::sleep_for(std::chrono::milliseconds(*timeout_ms));
    } else {
      std::this_thread::sleep_for(std::chrono::hours(1));
    }
  }
  Outcome o = step(op, *pid, f);
  if (o.error) fail(o.verb, *pid, *o.error);
  return 0;
}
