// Writers of the test GPU's state file (DESIGN.md "Contracts: Test GPU"), served by the fake
// libnvidia-ml and the fake nvidia-smi. Used by `vramd demo`, the fake GPU servers and tests.
// Every write replaces the file atomically (temporary file in the same directory, then rename)
// while holding flock on PATH + ".lock", so concurrent read-modify-writes lose nothing.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/result.h"
#include "core/units.h"

namespace vramd {

// Replaces the state file with `state`.
Status write_fake_gpu_state(const std::string& path, const nlohmann::json& state);

// Reads the state file (no lock: writers replace it atomically). Error when missing or not JSON.
Result<nlohmann::json> read_fake_gpu_state(const std::string& path);

// Read-modify-write under the lock. A missing file starts as {"gpus": []}. `mutate` must not
// throw; if it does, the file is left unchanged and the exception's message is the error.
Status update_fake_gpu_state(const std::string& path,
                             const std::function<void(nlohmann::json&)>& mutate);

// A state with one GPU per (name, total) pair, no processes, used = 0.
nlohmann::json make_fake_gpu_state(const std::vector<std::pair<std::string, Bytes>>& gpus,
                                   const std::string& driver_version = "550.54.14");

// Adds a process to gpu `gpu_index` ("used": null when `used` is nullopt) and adds
// `card_bytes` to that GPU's "used" (clamped to "total"), as an allocation does. For a process
// whose bytes are known, pass card_bytes = *used; for an N/A process pass what it really takes.
// A pid already listed on that GPU is replaced (its old bytes leave "used" first).
Status add_fake_process(const std::string& path, unsigned gpu_index, int pid,
                        std::optional<Bytes> used, Bytes card_bytes);
inline Status add_fake_process(const std::string& path, unsigned gpu_index, int pid, Bytes used) {
  return add_fake_process(path, gpu_index, pid, used, used);
}

// Removes `pid` from every GPU's process list and takes its bytes back from "used": its listed
// bytes, or for an N/A process the card_bytes it was added with (remembered in the entry as
// "card_bytes"). No error when the pid is not listed.
Status remove_fake_process(const std::string& path, int pid);

// Sets a GPU's "used" (card used bytes, total - free) directly.
Status set_fake_gpu_used(const std::string& path, unsigned gpu_index, Bytes used);

}  // namespace vramd
