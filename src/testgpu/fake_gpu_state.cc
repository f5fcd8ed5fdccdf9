#include "testgpu/fake_gpu_state.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

namespace vramd {
namespace {

std::string errno_text() { return std::strerror(errno); }

// Holds flock(LOCK_EX) on PATH.lock for its lifetime.
class StateLock {
 public:
  explicit StateLock(const std::string& path) {
    lock_path_ = path + ".lock";
    fd_ = ::open(lock_path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) {
      error_ = "cannot open " + lock_path_ + ": " + errno_text();
      return;
    }
    while (::flock(fd_, LOCK_EX) != 0) {
      if (errno != EINTR) {
        error_ = "cannot lock " + lock_path_ + ": " + errno_text();
        break;
      }
    }
  }
  ~StateLock() {
    if (fd_ >= 0) ::close(fd_);  // closing releases the lock
  }
  StateLock(const StateLock&) = delete;
  StateLock& operator=(const StateLock&) = delete;
  const std::string& error() const { return error_; }

 private:
  std::string lock_path_;
  std::string error_;
  int fd_ = -1;
};

// Writes to a temporary file beside `path`, then renames it over `path`. REQUIRES: lock held.
Status write_locked(const std::string& path, const nlohmann::json& state) {
  // Same directory, so that rename is atomic.
  auto slash = path.rfind('/');
  std::string tmpl = (slash == std::string::npos ? std::string() : path.substr(0, slash + 1)) +
                     ".fake-gpu-state.XXXXXX";
  std::vector<char> name(tmpl.begin(), tmpl.end());
  name.push_back('\0');
  int fd = ::mkstemp(name.data());
  if (fd < 0)
    return make_error("cannot create a temporary file beside " + path + ": " + errno_text());
  std::string text = state.dump(2) + "\n";
  const char* p = text.data();
  std::size_t left = text.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      std::string err = errno_text();
      ::close(fd);
      ::unlink(name.data());
      return make_error("cannot write " + std::string(name.data()) + ": " + err);
    }
    p += n;
    left -= static_cast<std::size_t>(n);
  }
  ::fchmod(fd, 0644);
  ::close(fd);
  if (::rename(name.data(), path.c_str()) != 0) {
    std::string err = errno_text();
    ::unlink(name.data());
    return make_error("cannot rename onto " + path + ": " + err);
  }
  return Ok{};
}

nlohmann::json* gpu_at(nlohmann::json& state, unsigned index) {
  if (!state.contains("gpus") || !state["gpus"].is_array()) return nullptr;
  if (index >= state["gpus"].size()) return nullptr;
  return &state["gpus"][index];
}

Bytes number_or(const nlohmann::json& obj, const char* key, Bytes fallback) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_number()) return fallback;
  return it->get<Bytes>();
}

// Takes `pid` off `gpu`'s list and its bytes off "used"; true when it was there.
bool remove_from_gpu(nlohmann::json& gpu, int pid) {
  if (!gpu.contains("processes") || !gpu["processes"].is_array()) return false;
  auto& procs = gpu["processes"];
  bool found = false;
  for (auto it = procs.begin(); it != procs.end();) {
    if (it->is_object() && it->value("pid", -1) == pid) {
      Bytes bytes = number_or(*it, "card_bytes", number_or(*it, "used", 0));
      Bytes used = number_or(gpu, "used", 0);
      gpu["used"] = used > bytes ? used - bytes : 0;
      it = procs.erase(it);
      found = true;
    } else {
      ++it;
    }
  }
  return found;
}

}  // namespace

Status write_fake_gpu_state(const std::string& path, const nlohmann::json& state) {
  StateLock lock(path);
  if (!lock.error().empty()) return make_error(lock.error());
  return write_locked(path, state);
}

Result<nlohmann::json> read_fake_gpu_state(const std::string& path) {
  std::ifstream in(path);
  if (!in) return make_error("cannot read " + path + ": " + errno_text());
  std::stringstream buffer;
  buffer << in.rdbuf();
  nlohmann::json state = nlohmann::json::parse(buffer.str(), nullptr, /*allow_exceptions=*/false);
  if (state.is_discarded()) return make_error(path + " is not valid JSON");
  return state;
}

Status update_fake_gpu_state(const std::string& path,
                             const std::function<void(nlohmann::json&)>& mutate) {
  StateLock lock(path);
  if (!lock.error().empty()) return make_error(lock.error());
  nlohmann::json state = nlohmann::json{{"gpus", nlohmann::json::array()}};
  if (::access(path.c_str(), F_OK) == 0) {
    Result<nlohmann::json> current = read_fake_gpu_state(path);
    if (!current.ok()) return make_error(current.error());
    state = std::move(current.value());
  }
  try {
    mutate(state);
  } catch (const std::exception& e) {
    return make_error(std::string("updating ") + path + ": " + e.what());
  }
  return write_locked(path, state);
}

nlohmann::json make_fake_gpu_state(const std::vector<std::pair<std::string, Bytes>>& gpus,
                                   const std::string& driver_version) {
  nlohmann::json state = {{"driver_version", driver_version}, {"gpus", nlohmann::json::array()}};
  for (std::size_t i = 0; i < gpus.size(); ++i) {
    char uuid[64];
    std::snprintf(uuid, sizeof uuid, "GPU-fa4e0000-0000-0000-0000-%012zu", i);
    state["gpus"].push_back({{"name", gpus[i].first},
                             {"uuid", uuid},
                             {"total", gpus[i].second},
                             {"used", 0},
                             {"utilization", 0},
                             {"processes", nlohmann::json::array()}});
  }
  return state;
}

Status add_fake_process(const std::string& path, unsigned gpu_index, int pid,
                        std::optional<Bytes> used, Bytes card_bytes) {
  bool found_gpu = true;
  Status s = update_fake_gpu_state(path, [&](nlohmann::json& state) {
    nlohmann::json* gpu = gpu_at(state, gpu_index);
    if (gpu == nullptr) {
      found_gpu = false;
      return;
    }
    remove_from_gpu(*gpu, pid);
    nlohmann::json entry = {{"pid", pid}, {"used", nullptr}};
    if (used) entry["used"] = *used;
    if (!used || *used != card_bytes) entry["card_bytes"] = card_bytes;
    if (!gpu->contains("processes") || !(*gpu)["processes"].is_array()) {
      (*gpu)["processes"] = nlohmann::json::array();
    }
    (*gpu)["processes"].push_back(entry);
    Bytes total = number_or(*gpu, "total", 0);
    (*gpu)["used"] = std::min(total, number_or(*gpu, "used", 0) + card_bytes);
  });
  if (!s.ok()) return s;
  if (!found_gpu) return make_error("no GPU " + std::to_string(gpu_index) + " in " + path);
  return Ok{};
}

Status remove_fake_process(const std::string& path, int pid) {
  return update_fake_gpu_state(path, [&](nlohmann::json& state) {
    if (!state.contains("gpus") || !state["gpus"].is_array()) return;
    for (auto& gpu : state["gpus"]) {
      if (gpu.is_object()) remove_from_gpu(gpu, pid);
    }
  });
}

Status set_fake_gpu_used(const std::string& path, unsigned gpu_index, Bytes used) {
  bool found_gpu = true;
  Status s = update_fake_gpu_state(path, [&](nlohmann::json& state) {
    nlohmann::json* gpu = gpu_at(state, gpu_index);
    if (gpu == nullptr) {
      found_gpu = false;
      return;
    }
    (*gpu)["used"] = used;
  });
  if (!s.ok()) return s;
  if (!found_gpu) return make_error("no GPU " + std::to_string(gpu_index) + " in " + path);
  return Ok{};
}

}  // namespace vramd
