// The container engine's word on the containers vramd supervises, on a thread of its own: the
// /events stream (die with its exit code, oom, start, destroy) and, each time that stream
// (re)connects, a read of every watched container's state, posted as ContainerChanged. When the
// engine goes away it reports a fault and reconnects with backoff (500 ms doubling to 30 s).
#pragma once

#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/events.h"
#include "host/docker_engine.h"

namespace vramd {

class ContainerWatch {
 public:
  struct Watched {
    std::string service;
    std::string container;  // match.container: a name, or an id prefix
  };
  using Post = std::function<void(ContainerChanged)>;
  // The engine answers again (ok) or not (with why): called on changes only.
  using Fault = std::function<void(bool ok, const std::string& why)>;

  ContainerWatch(std::string socket_path, std::vector<Watched> watched, Post post, Fault fault);
  ~ContainerWatch();  // stop()
  ContainerWatch(const ContainerWatch&) = delete;
  ContainerWatch& operator=(const ContainerWatch&) = delete;

  // Ends the thread (the stream is closed under it). Idempotent.
  void stop();

 private:
  void run();
  void read_states();
  void on_event(const DockerEvent& e);
  const Watched* find(const DockerEvent& e) const;
  void post_state(const Watched& w, bool died, std::optional<int> exit_code, bool oom);
  void report(bool ok, const std::string& why);
  // Sleeps `d` unless stop() comes first; false when stopping.
  bool sleep_for(std::chrono::milliseconds d);

  std::string socket_;
  std::vector<Watched> watched_;
  Post post_;
  Fault fault_;
  DockerEventStream stream_;
  std::map<std::string, bool> oom_seen_;  // by service: an oom event before its die
  std::optional<bool> reported_ok_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread thread_;  // last: started once the rest is built
};

}  // namespace vramd
