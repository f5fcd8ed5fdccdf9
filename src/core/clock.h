// The two kinds of time the core is handed with every event (STYLE.md: monotonic for every
// deadline and duration, wall time only for what people read).
#pragma once

#include "core/units.h"

namespace vramd {

// Both clocks read at one moment. The core decides on `mono` alone; `wall` only stamps what
// people read (events). Snapshots keep MonoTime; wall_of() turns one into a time to show, by the
// offset between the clocks now (so after an NTP step, times shown follow the corrected clock).
struct Now {
  MonoTime mono{};
  TimePoint wall{};

  Now() = default;
  Now(MonoTime m, TimePoint w) : mono(m), wall(w) {}
  // A virtual clock (tests, the simulator): wall time = the Unix epoch + monotonic time.
  Now(MonoTime m) : mono(m), wall(m.time_since_epoch()) {}  // NOLINT: implicit on purpose

  TimePoint wall_of(MonoTime t) const { return wall + (t - mono); }
  MonoTime mono_of(TimePoint t) const { return mono + (t - wall); }
  Now operator+(Duration d) const { return {mono + d, wall + d}; }
};

}  // namespace vramd
