// Taking one sample: the GPUs and the host, read together. Blocking: runs off the event loop.
#pragma once

#include "core/arbiter.h"
#include "gpu/gpu_reader.h"
#include "host/host_scanner.h"

namespace vramd {

SampleTaken take_sample(GpuReader& reader, HostScanner& scanner, const HostScanRequest& request);

// The clocks at millisecond resolution: the shell's only clock reads. The core decides on the
// monotonic one; the wall clock is for what people read.
TimePoint system_now();
MonoTime mono_now();
Now read_clocks();

}  // namespace vramd
