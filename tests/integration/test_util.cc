#include "integration/test_util.h"

#include "host/free_port.h"

#include <netinet/in.h>
#include <sys/socket.h>

namespace vramd::testing {

int free_port() { return free_tcp_port(); }

}  // namespace vramd::testing
