// A TCP port on loopback that nothing listens on right now (the kernel picks it).
#pragma once

namespace vramd {

// 0 when none could be had. Racy by nature: another process may take it before the caller.
int free_tcp_port();

}  // namespace vramd
