// One way for the CLI to call the daemon: reach it, read its JSON, and say in words why not.
// Every subcommand that talks to the API goes through DaemonClient, so exit codes (DESIGN.md) and
// error texts (the API's {"error":{"code","message"}}) are the same everywhere.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "cli/client.h"
#include "core/config.h"

namespace vramd {

struct CommonOptions;

// The outcome of one call.
struct DaemonCall {
  int code = 0;         // kExitOk on 2xx; kExitUnreachable when no answer; else kExitFailure
  unsigned status = 0;  // HTTP status; 0 when the daemon did not answer
  nlohmann::json body;  // the answer; null when there was none or it was not JSON
  // Why not ok, for people: "the daemon is not reachable at URL: ...", "the daemon answered HTTP
  // 502 with a body that is not JSON", or the API's error message. Empty when ok.
  std::string error;
  bool ok() const { return code == 0; }
  bool reached() const { return status != 0; }
};

// The API's message in a body: error.message, else a top-level "message", else "".
std::string api_message(const nlohmann::json& body);

class DaemonClient {
 public:
  DaemonClient(DaemonAddress addr, std::string token)
      : addr_(std::move(addr)), token_(std::move(token)) {}

  // The daemon named by the CLI options (--url, $VRAMD_URL, the config), with the token of
  // client_token() (daemon.token or token_file). nullopt, with the config's error printed, when the
  // config is broken: exit kExitFailure.
  static std::optional<DaemonClient> from_options(const CommonOptions& opts);
  // The same from a config already loaded.
  static DaemonClient from_config(const CommonOptions& opts, const Config& config);

  // One request; prints nothing. `body` is sent as JSON when not empty.
  DaemonCall request(const std::string& method, const std::string& target,
                     const std::string& body = "", int timeout_ms = 10000) const;

  // One request; on anything but 2xx prints why to stderr and returns nullopt with the exit code
  // in `code`. Transport and JSON failures read "vramd: ..."; the API's errors "<who>: message".
  std::optional<nlohmann::json> call(const std::string& method, const std::string& target,
                                     int& code, const std::string& body = "",
                                     int timeout_ms = 10000, std::string_view who = "vramd") const;

  const DaemonAddress& address() const { return addr_; }

 private:
  DaemonAddress addr_;
  std::string token_;
};

// Prints a failed call's error to stderr as call() does.
void print_call_error(const DaemonCall& c, std::string_view who = "vramd");

}  // namespace vramd
