// Taking one sample: the GPUs and the host, read together. Blocking: runs off the event loop.
#pragma once

#include "core/arbiter.h"
#include "gpu/gpu_reader.h"
#include "host/host_scanner.h"

namespace vramd {

SampleTaken take_sample(GpuReader& reader, HostScanner& scanner, const HostScanRequest& request);

// The wall clock at millisecond resolution: the shell's only clock read.
TimePoint system_now();

}  // namespace vramd
