// A private PostgreSQL server for tests: Debian's postgresql (initdb, postgres) on a cluster under
// /tmp (one folder per build folder: wherever the clone is, `nobody` can reach it), on a free
// port of 127.0.0.1, started once per test binary and stopped when it exits. As root, the
// cluster is owned and run by `nobody` (PostgreSQL refuses to run as root).
// When it cannot start, `PostgresServer::get()` returns null and `skip_reason()` says why. Only a
// machine without PostgreSQL skips (VRAMD_REQUIRE_POSTGRES): installed but failing to start is a
// failure, so that a skip never hides a broken test server.
#pragma once

#include <memory>
#include <string>

#include <gtest/gtest.h>

// In a test body: skip when PostgreSQL is not installed, fail (with the reason) when it is but
// could not start.
#define VRAMD_REQUIRE_POSTGRES(pg)                                                  \
  do {                                                                             \
    if (!(pg)) {                                                                   \
      if (::vramd::testing::PostgresServer::installed())                           \
        FAIL() << ::vramd::testing::PostgresServer::skip_reason();                 \
      GTEST_SKIP() << ::vramd::testing::PostgresServer::skip_reason();             \
    }                                                                              \
  } while (false)

namespace vramd::testing {

class PostgresServer {
 public:
  // The server, started on the first call; null when it could not start.
  static PostgresServer* get();
  static const std::string& skip_reason();
  // Whether Debian's postgresql (or $VRAMD_PG_BIN) is there: a server that is and does not
  // start is a failure, not a skip.
  static bool installed();

  ~PostgresServer();

  int port() const { return port_; }
  // A URL for database `db` (which create_database makes).
  std::string url(const std::string& db) const;
  // Creates a fresh, empty database; its name is unique within this server's life.
  std::string create_database(const std::string& prefix);
  // Runs SQL through psql on `db`; its output (tuples only, unaligned); throws on failure.
  std::string psql(const std::string& db, const std::string& sql) const;
  // Stops the server (fast shutdown, or SIGKILL with `crash`) and starts it again on the same
  // port and data; false when it did not come back.
  bool stop();
  bool start();
  bool restart() { return stop() && start(); }
  bool running() const { return pid_ > 0; }

 private:
  PostgresServer() = default;
  bool init(std::string& why);
  bool wait_ready(std::string& why) const;

  std::string bin_, root_, data_, socket_dir_, log_;
  int port_ = 0;
  int pid_ = -1;
  bool as_nobody_ = false;
  int databases_ = 0;
};

}  // namespace vramd::testing
