// systemd's word on the units vramd supervises (match.unit without `start`), on a thread of its
// own: each unit's state read with `systemctl show` every 500 ms and turned into ContainerChanged
// (the same event as a container's: core/supervision_containers.cc decides for both). A run that
// ended (it was active and is not, or systemd started a new run of it: another InvocationID; or a
// whole run came and went between two reads) is a die with how it ended (ExecMainCode,
// ExecMainStatus, Result); a unit that became active is a state read. A systemctl that fails or hangs is a fault ("systemd"), never a stuck loop.
#pragma once

#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/events.h"
#include "host/systemd.h"

namespace vramd {

class UnitWatch {
 public:
  struct Watched {
    std::string service;
    std::string unit;  // match.unit
  };
  using Post = std::function<void(ContainerChanged)>;
  using Fault = std::function<void(bool ok, const std::string& why)>;

  UnitWatch(SystemdTools tools, std::vector<Watched> watched, Post post, Fault fault,
            std::chrono::milliseconds interval = std::chrono::milliseconds(500));
  ~UnitWatch();  // stop()
  UnitWatch(const UnitWatch&) = delete;
  UnitWatch& operator=(const UnitWatch&) = delete;

  void stop();  // idempotent

  // What the reads of one unit mean, from its previous read (nullopt: the first) to this one.
  // Pure: the watch's rule, tested on its own (unit_watch_test.cc).
  static std::vector<ContainerChanged> changes(const std::string& service,
                                               const std::optional<UnitShow>& before,
                                               const UnitShow& now);

 private:
  void run();
  bool sleep_for(std::chrono::milliseconds d);

  SystemdTools tools_;
  std::vector<Watched> watched_;
  Post post_;
  Fault fault_;
  std::chrono::milliseconds interval_;
  std::map<std::string, UnitShow> last_;  // by service
  std::optional<bool> reported_ok_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread thread_;  // last: started once the rest is built
};

}  // namespace vramd
