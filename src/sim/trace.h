// A trace for the simulator (docs/sim.md): GPUs, services with their costs, requests and jobs, as
// JSON lines. Parsing checks every key and value; errors carry path:line:column.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"
#include "core/units.h"

namespace vramd::sim {

// Trace times are seconds in the file and milliseconds here (the core's Duration).
using Ms = std::int64_t;

struct TraceGpu {
  unsigned index = 0;
  Bytes total = 0;
  Bytes baseline = 0;  // the driver's own use: never anyone's to free
};

struct TraceService {
  std::string name;
  unsigned gpu = 0;
  Bytes model_bytes = 0;
  Bytes context_bytes = 0;        // held with the model while it is loaded
  Ms load = 0;                    // from unloaded to serving
  Ms unload = 0;                  // from the unload call to its memory being back
  double unload_effective = 1.0;  // fraction of unload calls that free anything
  Ms restart = 0;                 // a restart (the escalation) frees all and takes this
  // Its level-1 sleep: the wake from host RAM takes this (-1: it has none; its unload frees
  // all and its wake is a load of `load`), and the sleep keeps host_bytes in host RAM.
  Ms sleep1 = -1;
  Bytes host_bytes = 0;
  Bytes footprint() const { return model_bytes + context_bytes; }
};

struct TraceRequest {
  Ms t = 0;
  size_t service = 0;  // index into Trace::services
  Ms duration = 0;
};

struct TraceJob {
  Ms t = 0;
  std::string name;
  unsigned gpu = 0;
  Bytes bytes = 0;
  Ms duration = 0;  // held this long once granted
  int priority = 0;
  bool preemptible = false;  // vramd may suspend it (cuda-checkpoint) for other work
};

struct Trace {
  std::vector<TraceGpu> gpus;          // in file order
  std::vector<TraceService> services;  // in file order
  std::vector<TraceRequest> requests;  // by t, file order on ties
  std::vector<TraceJob> jobs;          // by t, file order on ties
  Ms end = 0;                          // the "end" line's t, else the last line's t
  Bytes host_ram = 0;                  // the "host" line's ram; 0: host RAM not modelled

  // nullptr when absent.
  const TraceGpu* gpu(unsigned index) const;
  // -1 when absent.
  int service_index(std::string_view name) const;
  size_t events() const { return requests.size() + jobs.size(); }
};

// Parses JSON-lines text. `path` names it in errors: "day.jsonl:12:31: 'duration' must be a
// number of seconds >= 0, got \"4s\"". Stops at the first error (each later line may depend on it).
Result<Trace> parse_trace(std::string_view text, const std::string& path);

}  // namespace vramd::sim
