#include "core/config.h"
#include "core/text.h"

#include "core/service_kinds.h"

#include <arpa/inet.h>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <toml++/toml.h>
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <regex>
#include <sstream>
#include <utility>

namespace vramd {
namespace {

// ---- small text helpers ----


// Optimal string alignment distance: Levenshtein plus adjacent transpositions ("servcies").
size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

std::string join(const std::vector<std::string>& words, std::string_view last_sep) {
  std::string out;
  for (size_t i = 0; i < words.size(); ++i) {
    if (i > 0) out += i + 1 == words.size() ? std::string(last_sep) : std::string(", ");
    out += words[i];
  }
  return out;
}

bool is_service_name(std::string_view name) {
  if (name.empty()) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
  });
}

std::optional<std::uint16_t> parse_port(std::string_view s) {
  if (s.empty() || s.size() > 5) return std::nullopt;
  unsigned value = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + static_cast<unsigned>(c - '0');
  }
  if (value == 0 || value > 65535) return std::nullopt;
  return static_cast<std::uint16_t>(value);
}

bool is_hostname(std::string_view s) {
  if (s.empty() || s.size() > 253) return false;
  size_t start = 0;
  while (start <= s.size()) {
    size_t dot = s.find('.', start);
    std::string_view label = s.substr(start, dot == std::string_view::npos ? s.npos : dot - start);
    if (label.empty() || label.size() > 63 || label.front() == '-' || label.back() == '-') {
      return false;
    }
    for (char c : label) {
      // '_' is not in RFC 1123 but docker compose names containers "app_1" and resolves them.
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') return false;
    }
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  return true;
}

// Splits "host:port" / "[v6]:port" / "host" (port optional when `port_required` is false).
Result<HostPort> parse_authority(std::string_view text, bool port_required) {
  std::string_view host;
  std::string_view port;
  bool has_port = false;
  bool bracketed = false;
  if (!text.empty() && text.front() == '[') {
    size_t close = text.find(']');
    if (close == std::string_view::npos) return make_error("missing ']' after IPv6 address");
    host = text.substr(1, close - 1);
    bracketed = true;
    std::string_view rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return make_error("expected ':' and a port after ']'");
      port = rest.substr(1);
      has_port = true;
    }
  } else {
    size_t colon = text.rfind(':');
    if (colon != std::string_view::npos) {
      if (text.find(':') != colon)
        return make_error("IPv6 addresses go in brackets: \"[::1]:7100\"");
      host = text.substr(0, colon);
      port = text.substr(colon + 1);
      has_port = true;
    } else {
      host = text;
    }
  }
  if (host.empty()) return make_error("missing host");
  if (!has_port && port_required) return make_error("missing port; expected \"host:port\"");
  HostPort out;
  out.host = std::string(host);
  if (bracketed) {
    std::string addr(host.substr(0, host.find('%')));  // a zone ("%eth0") is allowed
    in6_addr a6;
    if (inet_pton(AF_INET6, addr.c_str(), &a6) != 1) {
      return make_error("'" + out.host + "' is not an IPv6 address");
    }
  } else if (host.find_first_not_of("0123456789.") == std::string_view::npos) {
    in_addr a4;
    if (inet_pton(AF_INET, out.host.c_str(), &a4) != 1) {
      return make_error("'" + out.host + "' is not an IPv4 address");
    }
  } else if (!is_hostname(host)) {
    return make_error("'" + out.host + "' is not a hostname or an IP address");
  }
  if (!has_port) return out;
  std::optional<std::uint16_t> p = parse_port(port);
  if (!p) return make_error("'" + std::string(port) + "' is not a port (1-65535)");
  out.port = *p;
  return out;
}

// ---- the TOML walk ----

constexpr std::string_view kDurationHint = "a duration like \"1s\" or \"300ms\"";
constexpr std::string_view kSizeHint = "a size like \"16GiB\" or \"512MiB\"";

const std::vector<std::string> kTopKeys = {"daemon", "gpu", "host", "services", "crash_rules",
                                           "proxy"};
const std::vector<std::string> kHostKeys = {"ram_reserve"};
const std::vector<std::string> kCrashRuleKeys = {"signature", "title", "pattern", "requires",
                                                 "explanation", "suggestion"};
const std::vector<std::string> kRestartPolicies = {"on-failure", "always", "never"};
const std::vector<std::string> kShutdownActions = {"leave", "stop"};  // OnShutdown, in order
const std::vector<std::string> kDaemonKeys = {
    "listen",     "state_dir",     "sample_interval", "token",
    "token_file", "docker_socket", "probe_interval",  "quiet_probe_interval", "events_retention",
    "lease_heartbeat",
    "discover",   "discover_unload", "discover_interval", "systemctl", "journalctl", "systemd_user",
    "store",      "store_url_file", "host",          "host_timeout", "prewarm",
    "history",    "history_retention"};
const std::vector<std::string> kGpuKeys = {"backend",        "baseline",
                                           "residual_tolerance", "reserve",
                                           "process_scan_threshold", "process_scan_interval",
                                           "cuda_checkpoint"};
const std::vector<std::string> kBackends = {"auto", "nvml", "nvidia-smi"};
const std::vector<std::string> kServiceKeys = {
    "kind",  "url", "match", "unload_after_idle", "min_idle", "on_ineffective_unload", "group",        "pinned",
    "start", "cwd", "env",   "start_timeout",     "health_failures",       "vram_estimate",
    "env_file", "user", "stop_timeout", "health_interval", "restart", "max_restarts",
    "restart_window", "reclaim_port", "on_shutdown",
    "api_key", "api_key_env", "probe_timeout", "connect_timeout", "unload_timeout",
    "unload_backoff", "sleep_level", "router", "models", "busy_url", "busy_json_pointer",
    "busy_metric", "unload_method", "unload_url", "unload_body", "health_url",
    // proxy (issue 12)
    "proxy", "max_concurrent", "max_queue", "first_byte_timeout", "wake_timeout",
    // prewarm (issue 26)
    "prewarm"};
// ---- proxy (issue 12): begin ----
const std::vector<std::string> kProxyKeys = {"listen", "api_keys", "api_keys_file", "aliases",
                                             "websocket_idle"};
// ---- proxy: end ----
const std::vector<std::string> kUnloadMethods = {"POST", "DELETE", "PUT"};
const std::vector<std::string> kMatchKeys = {"cmdline", "container", "compose_service", "unit",
                                             "pid_file"};
const std::vector<std::string> kIneffectiveActions = {"restart", "stop", "report"};

// How a value reads in an error: its TOML text for scalars ("5", "\"abc\""), a word otherwise.
std::string describe(const toml::node& n) {
  if (n.is_table()) return "a table";
  if (n.is_array()) return "an array";
  if (const toml::value<std::string>* v = n.as_string()) {
    // Double quotes, as most people write TOML strings (toml++ prints 'literal' strings).
    std::string out = "\"";
    for (char c : v->get()) {
      if (c == '"' || c == '\\') out += '\\';
      if (c == '\n') {
        out += "\\n";
      } else {
        out += c;
      }
    }
    return out + "\"";
  }
  std::ostringstream os;
  n.visit([&](const auto& v) { os << v; });
  return os.str();
}

struct Located {
  toml::source_position pos;
  std::string message;
};

class ConfigParser {
 public:
  explicit ConfigParser(const std::string& path) : path_(path) {}

  Result<Config> parse(std::string_view text) {
    Config config;
    config.path = path_;
    toml::table root;
    try {
      root = toml::parse(text, path_);
    } catch (const toml::parse_error& e) {
      return make_error(at(e.source().begin, std::string(e.description())));
    }
    for (auto&& [key, node] : root) {
      std::string k(key.str());
      if (k == "daemon") {
        if (const toml::table* t = table_or_error(node, "daemon")) parse_daemon(*t, config.daemon);
      } else if (k == "gpu") {
        if (const toml::table* t = table_or_error(node, "gpu")) parse_gpu(*t, config.gpu);
      } else if (k == "host") {
        if (const toml::table* t = table_or_error(node, "host")) parse_host(*t, config.host);
      } else if (k == "services") {
        if (const toml::table* t = table_or_error(node, "services")) parse_services(*t, config);
      } else if (k == "crash_rules") {
        parse_crash_rules(node, config);
      } else if (k == "proxy") {  // proxy (issue 12)
        if (const toml::table* t = table_or_error(node, "proxy")) parse_proxy(*t, config.proxy);
      } else {
        std::string s = suggest(k, kTopKeys);
        if (node.is_table()) {
          error(key.source().begin, "unknown table [" + k + "]" +
                                        (s.empty() ? "; expected [daemon], [gpu] or [services.NAME]"
                                                   : "; did you mean [" + s + "]?"));
        } else {
          error(key.source().begin, "unknown key '" + k + "' at top level" +
                                        (s.empty() ? "" : "; did you mean '" + s + "'?"));
        }
      }
    }
    check_proxy_listens(config);  // proxy (issue 12)
    if (errors_.empty()) return config;
    std::stable_sort(errors_.begin(), errors_.end(), [](const Located& a, const Located& b) {
      return std::pair(a.pos.line, a.pos.column) < std::pair(b.pos.line, b.pos.column);
    });
    std::string all;
    for (const Located& e : errors_) {
      if (!all.empty()) all += '\n';
      all += at(e.pos, e.message);
    }
    return make_error(std::move(all));
  }

 private:
  std::string at(const toml::source_position& pos, const std::string& message) const {
    if (!pos) return path_ + ": " + message;
    return path_ + ":" + std::to_string(pos.line) + ":" + std::to_string(pos.column) + ": " +
           message;
  }
  void error(const toml::source_position& pos, std::string message) {
    errors_.push_back({pos, std::move(message)});
  }
  // Returns the suggestion made, if any.
  std::string unknown_key(const toml::key& key, std::string_view where,
                          const std::vector<std::string>& known) {
    std::string k(key.str());
    std::string s = suggest(k, known);
    error(key.source().begin, "unknown key '" + k + "' in " + std::string(where) +
                                  (s.empty() ? "; known keys: " + join(known, " and ")
                                             : "; did you mean '" + s + "'?"));
    return s;
  }
  void wrong_type(const toml::node& n, const std::string& field, std::string_view expected) {
    error(n.source().begin, field + ": expected " + std::string(expected) + ", got " + describe(n));
  }

  const toml::table* table_or_error(const toml::node& n, const std::string& field) {
    if (const toml::table* t = n.as_table()) return t;
    wrong_type(n, field, "a table [" + field + "]");
    return nullptr;
  }

  std::optional<std::string> string_value(const toml::node& n, const std::string& field,
                                          bool allow_empty = true) {
    const toml::value<std::string>* v = n.as_string();
    if (!v) {
      wrong_type(n, field, "a string");
      return std::nullopt;
    }
    if (!allow_empty && v->get().empty()) {
      error(n.source().begin, field + ": must not be empty");
      return std::nullopt;
    }
    return v->get();
  }

  // A string that must be one of `choices`; unknown words get a suggestion.
  std::optional<std::string> enum_value(const toml::node& n, const std::string& field,
                                        std::string_view what,
                                        const std::vector<std::string>& choices) {
    std::optional<std::string> s = string_value(n, field);
    if (!s) return std::nullopt;
    if (std::find(choices.begin(), choices.end(), *s) != choices.end()) return s;
    std::string guess = suggest(*s, choices);
    error(n.source().begin, field + ": unknown " + std::string(what) + " '" + *s + "'" +
                                (guess.empty() ? "" : "; did you mean '" + guess + "'?") +
                                " (expected " + join(choices, " or ") + ")");
    return std::nullopt;
  }

  std::optional<Duration> duration_value(const toml::node& n, const std::string& field) {
    const toml::value<std::string>* v = n.as_string();
    if (!v) {
      wrong_type(n, field, kDurationHint);
      return std::nullopt;
    }
    Result<Duration> d = parse_duration(v->get());
    if (!d) {
      error(n.source().begin, field + ": " + d.error());
      return std::nullopt;
    }
    return *d;
  }

  std::optional<Duration> positive_duration(const toml::node& n, const std::string& field) {
    std::optional<Duration> d = duration_value(n, field);
    if (d && d->count() <= 0) {
      error(n.source().begin, field + ": must be longer than 0");
      return std::nullopt;
    }
    return d;
  }

  std::optional<Bytes> size_value(const toml::node& n, const std::string& field) {
    const toml::value<std::string>* v = n.as_string();
    if (!v) {
      wrong_type(n, field, kSizeHint);
      return std::nullopt;
    }
    Result<Bytes> b = parse_size(v->get());
    if (!b) {
      error(n.source().begin, field + ": " + b.error());
      return std::nullopt;
    }
    return *b;
  }

  std::optional<bool> bool_value(const toml::node& n, const std::string& field) {
    if (const toml::value<bool>* v = n.as_boolean()) return v->get();
    wrong_type(n, field, "true or false");
    return std::nullopt;
  }

  // The keys of several hosts (issue 17); false when `k` is none of them.
  bool parse_daemon_store_key(const std::string& k, const toml::node& node, const std::string& field,
                              DaemonConfig& out, const toml::node*& store,
                              const toml::node*& store_url_file) {
    if (k == "store") {
      store = &node;
      if (auto s = string_value(node, field, /*allow_empty=*/false)) {
        if (s->rfind("postgresql://", 0) != 0 && s->rfind("postgres://", 0) != 0)
          error(node.source().begin,
                field + ": a postgresql:// URL (leave it out for SQLite in state_dir), got \"" + *s +
                    "\"");
        else
          out.store = *s;
      }
    } else if (k == "store_url_file") {
      store_url_file = &node;
      if (auto s = string_value(node, field, /*allow_empty=*/false)) out.store_url_file = *s;
    } else if (k == "host") {
      if (auto s = string_value(node, field, /*allow_empty=*/false)) {
        // It keys rows and is shown everywhere: a name, not a sentence.
        bool ok = s->size() <= 64 && std::all_of(s->begin(), s->end(), [](char c) {
          return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
        });
        // "any" names no host in a lease; "all" every host in GET /v1/leases?host=all.
        if (!ok || *s == "any" || *s == "all")
          error(node.source().begin,
                field + ": letters, digits, '-', '_' and '.' (at most 64, not \"any\" or \"all\"), got \"" +
                    *s + "\"");
        else
          out.host = *s;
      }
    } else if (k == "host_timeout") {
      if (auto d = positive_duration(node, field)) out.host_timeout = *d;
    } else {
      return false;
    }
    return true;
  }

  void parse_daemon(const toml::table& t, DaemonConfig& out) {
    const toml::node* listen = nullptr;
    const toml::node* token = nullptr;
    const toml::node* token_file = nullptr;
    const toml::node* store = nullptr;
    const toml::node* store_url_file = nullptr;
    const toml::node* quiet_probe = nullptr;
    for (auto&& [key, node] : t) {
      std::string k(key.str());
      std::string field = "daemon." + k;
      if (k == "listen") {
        listen = &node;
        if (auto s = string_value(node, field)) {
          Result<HostPort> hp = parse_authority(*s, /*port_required=*/true);
          if (!hp) {
            error(node.source().begin, field + ": " + hp.error() + " (got \"" + *s + "\")");
          } else {
            out.listen = *s;
          }
        }
      } else if (k == "state_dir") {
        if (auto s = string_value(node, field, /*allow_empty=*/false)) out.state_dir = *s;
      } else if (k == "sample_interval") {
        if (auto d = duration_value(node, field)) {
          if (*d < kMinSampleInterval) {
            error(node.source().begin, field + ": must be at least 100ms, got " + describe(node));
          } else {
            out.sample_interval = *d;
          }
        }
      } else if (k == "token") {
        if (auto s = string_value(node, field, /*allow_empty=*/false)) {
          // It goes in "Authorization: Bearer TOKEN": one word of visible characters.
          if (std::any_of(s->begin(), s->end(), [](char c) { return c <= ' ' || c == 0x7f; })) {
            error(node.source().begin, field + ": must be printable ASCII without spaces");
          } else {
            out.token = *s;
          }
        }
        token = &node;
      } else if (k == "token_file") {
        if (auto s = string_value(node, field, /*allow_empty=*/false)) out.token_file = *s;
        token_file = &node;
      } else if (k == "docker_socket") {
        if (auto s = string_value(node, field, /*allow_empty=*/false)) {
          out.docker_socket = *s;
          out.docker_socket_given = true;
        }
      } else if (k == "systemctl") {
        if (auto s = string_value(node, field, /*allow_empty=*/false)) out.systemctl = *s;
      } else if (k == "journalctl") {
        if (auto s = string_value(node, field, /*allow_empty=*/false)) out.journalctl = *s;
      } else if (k == "systemd_user") {
        if (auto b = bool_value(node, field)) out.systemd_user = *b;
      } else if (k == "probe_interval") {
        if (auto d = duration_value(node, field)) {
          if (*d < kMinSampleInterval) {
            error(node.source().begin, field + ": must be at least 100ms, got " + describe(node));
          } else {
            out.probe_interval = *d;
          }
        }
      } else if (k == "quiet_probe_interval") {
        if (auto d = duration_value(node, field)) {
          quiet_probe = &node;
          out.quiet_probe_interval = *d;
        }
      } else if (k == "events_retention") {
        const toml::value<int64_t>* v = node.as_integer();
        if (!v || v->get() < 1) {
          wrong_type(node, field, "a whole number, at least 1");
        } else {
          out.events_retention = v->get();
        }
      } else if (k == "lease_heartbeat") {
        if (auto d = positive_duration(node, field)) out.lease_heartbeat = *d;
      } else if (k == "history") {
        if (auto b = bool_value(node, field)) out.history = *b;
      } else if (k == "history_retention") {
        if (auto d = positive_duration(node, field)) out.history_retention = *d;
      } else if (k == "discover") {
        if (auto b = bool_value(node, field)) out.discover = *b;
      } else if (k == "discover_unload") {
        if (auto b = bool_value(node, field)) out.discover_unload = *b;
      } else if (k == "prewarm") {
        if (auto b = bool_value(node, field)) out.prewarm = *b;
      } else if (k == "discover_interval") {
        if (auto d = duration_value(node, field)) {
          if (*d < std::chrono::seconds(1)) {
            error(node.source().begin, field + ": must be at least 1s, got " + describe(node));
          } else {
            out.discover_interval = *d;
          }
        }
      } else if (!parse_daemon_store_key(k, node, field, out, store, store_url_file)) {
        unknown_key(key, "[daemon]", kDaemonKeys);
      }
    }
    if (quiet_probe && out.quiet_probe_interval < out.probe_interval)
      error(quiet_probe->source().begin,
            fmt::format("daemon.quiet_probe_interval: must be at least probe_interval ({}), got {}",
                        format_duration(out.probe_interval), describe(*quiet_probe)));
    if (!quiet_probe)
      out.quiet_probe_interval = std::max(out.quiet_probe_interval, out.probe_interval);
    if (store && store_url_file) {
      const toml::node* later =
          store->source().begin.line > store_url_file->source().begin.line ? store : store_url_file;
      error(later->source().begin, "daemon: set store or store_url_file, not both");
    }
    if (token && token_file) {
      const toml::node* later =
          token->source().begin.line > token_file->source().begin.line ? token : token_file;
      error(later->source().begin, "daemon: set token or token_file, not both");
    }
    // Beyond loopback, anyone on the network could free, stop and lease GPUs without a token.
    if (listen && !token && !token_file) {
      Result<HostPort> hp = parse_authority(out.listen, /*port_required=*/true);
      if (hp && !is_loopback_host(hp->host)) {
        error(listen->source().begin,
              "daemon.listen: " + out.listen +
                  " is reachable from other hosts; set daemon.token or daemon.token_file");
      }
    }
  }

  void parse_crash_rules(const toml::node& node, Config& config) {
    const toml::array* arr = node.as_array();
    if (!arr) {
      wrong_type(node, "crash_rules", "[[crash_rules]] tables");
      return;
    }
    for (size_t i = 0; i < arr->size(); ++i) {
      const toml::table* t = (*arr)[i].as_table();
      std::string where = "crash_rules[" + std::to_string(i) + "]";
      if (!t) {
        wrong_type((*arr)[i], where, "a table with pattern and title");
        continue;
      }
      CrashRuleConfig r;
      for (auto&& [key, value] : *t) {
        std::string k(key.str());
        std::string field = fmt::format("{}.{}", where, k);
        if (std::find(kCrashRuleKeys.begin(), kCrashRuleKeys.end(), k) == kCrashRuleKeys.end()) {
          unknown_key(key, "[[crash_rules]]", kCrashRuleKeys);
          continue;
        }
        auto v = string_value(value, field, /*allow_empty=*/false);
        if (!v) continue;
        if ((k == "pattern" || k == "requires")) {
          try {
            std::regex re(*v, std::regex::ECMAScript);
          } catch (const std::regex_error& e) {
            error(value.source().begin, field + ": not a valid regular expression: " + e.what());
            continue;
          }
        }
        (k == "signature"     ? r.signature
         : k == "title"       ? r.title
         : k == "pattern"     ? r.pattern
         : k == "requires"    ? r.requires_pattern
         : k == "explanation" ? r.explanation
                              : r.suggestion) = *v;
      }
      if (r.pattern.empty() || r.title.empty()) {
        error(t->source().begin, where + ": needs pattern and title");
        continue;
      }
      if (r.signature.empty()) {  // "Flux #7: OOM!!" -> "flux-7-oom"
        for (char c : r.title) {
          if (std::isalnum(static_cast<unsigned char>(c))) r.signature += static_cast<char>(std::tolower(c));
          else if (!r.signature.empty() && r.signature.back() != '-') r.signature += '-';
        }
        while (!r.signature.empty() && r.signature.back() == '-') r.signature.pop_back();
      }
      config.crash_rules.push_back(std::move(r));
    }
  }

  void parse_gpu(const toml::table& t, GpuConfig& out) {
    for (auto&& [key, node] : t) {
      std::string k(key.str());
      std::string field = "gpu." + k;
      if (k == "backend") {
        if (auto s = enum_value(node, field, "backend", kBackends)) out.backend = *s;
      } else if (k == "baseline") {
        const toml::value<std::string>* v = node.as_string();
        if (v && v->get() == "auto") {
          out.baseline.reset();
        } else if (!v) {
          wrong_type(node, field, "\"auto\" or " + std::string(kSizeHint));
        } else if (auto b = size_value(node, field)) {
          out.baseline = *b;
        }
      } else if (k == "residual_tolerance") {
        if (auto b = size_value(node, field)) out.residual_tolerance = *b;
      } else if (k == "reserve") {
        if (auto b = size_value(node, field)) out.reserve = *b;
      } else if (k == "process_scan_threshold") {
        if (auto b = size_value(node, field)) out.process_scan_threshold = *b;
      } else if (k == "process_scan_interval") {
        if (auto d = duration_value(node, field)) {
          if (*d < kMinSampleInterval)
            error(node.source().begin, field + ": must be at least 100ms, got " + describe(node));
          else
            out.process_scan_interval = *d;
        }
      } else if (k == "cuda_checkpoint") {
        if (auto s = string_value(node, field, /*allow_empty=*/false)) out.cuda_checkpoint = *s;
      } else {
        unknown_key(key, "[gpu]", kGpuKeys);
      }
    }
  }

  void parse_host(const toml::table& t, HostConfig& out) {
    for (auto&& [key, node] : t) {
      std::string k(key.str());
      std::string field = "host." + k;
      if (k == "ram_reserve") {
        // "8GiB", or "15%" of MemTotal.
        const toml::value<std::string>* v = node.as_string();
        std::string text = v ? v->get() : "";
        if (v && !text.empty() && text.back() == '%') {
          char* end = nullptr;
          double pct = std::strtod(text.c_str(), &end);
          if (end != text.c_str() + text.size() - 1 || pct < 0 || pct > 90)
            error(node.source().begin, field + ": expected a share from 0% to 90%, got " +
                                           describe(node));
          else
            out.ram_reserve_pct = pct;
        } else if (!v) {
          wrong_type(node, field, std::string(kSizeHint) + " or a share like \"10%\"");
        } else if (auto b = size_value(node, field)) {
          out.ram_reserve = *b;
        }
      } else {
        unknown_key(key, "[host]", kHostKeys);
      }
    }
  }

  void parse_services(const toml::table& t, Config& config) {
    std::vector<std::pair<toml::source_position, ServiceConfig>> services;
    for (auto&& [key, node] : t) {
      std::string name(key.str());
      if (!is_service_name(name)) {
        error(key.source().begin,
              "invalid service name '" + name + "': use letters, digits, '_' and '-'");
        continue;
      }
      const toml::table* st = table_or_error(node, "services." + name);
      if (!st) continue;
      ServiceConfig svc;
      svc.name = name;
      parse_service(*st, svc);
      services.emplace_back(key.source().begin, std::move(svc));
    }
    // toml::table iterates in key order; the file's order is the one people expect to see.
    std::stable_sort(services.begin(), services.end(), [](const auto& a, const auto& b) {
      return std::pair(a.first.line, a.first.column) < std::pair(b.first.line, b.first.column);
    });
    for (auto& [pos, svc] : services) config.services.push_back(std::move(svc));
  }

  void parse_service(const toml::table& t, ServiceConfig& svc) {
    const std::string prefix = "services." + svc.name + ".";
    const std::string where = "[services." + svc.name + "]";
    const toml::node* url_node = nullptr;
    std::map<std::string, const toml::node*> set_nodes;  // API keys seen, for the checks after
    bool has_kind = false;
    std::vector<std::string> suggested;  // a misspelt key is not also reported missing
    for (auto&& [key, node] : t) {
      std::string k(key.str());
      std::string field = prefix + k;
      if (k == "kind") {
        has_kind = true;
        if (auto s = enum_value(node, field, "kind", known_service_kinds())) svc.kind = *s;
      } else if (k == "url") {
        url_node = &node;
        if (auto s = string_value(node, field)) {
          Result<HttpUrl> u = parse_http_url(*s);
          if (!u) {
            error(node.source().begin, field + ": " + u.error() + " (got \"" + *s + "\")");
          } else {
            svc.url = *s;
            while (!svc.url.empty() && svc.url.back() == '/') svc.url.pop_back();
          }
        }
      } else if (k == "match") {
        parse_match(node, field, svc.match);
      } else if (k == "unload_after_idle") {
        if (auto d = positive_duration(node, field)) svc.unload_after_idle = *d;
      } else if (k == "on_ineffective_unload") {
        if (auto s = enum_value(node, field, "action", kIneffectiveActions)) {
          svc.on_ineffective_unload = *s;
        }
      } else if (k == "group") {
        if (auto s = string_value(node, field, /*allow_empty=*/false)) svc.group = *s;
      } else if (k == "pinned") {
        if (auto b = bool_value(node, field)) svc.pinned = *b;
      } else if (k == "prewarm") {
        if (auto b = bool_value(node, field)) svc.prewarm = *b;
      } else if (k == "start") {
        parse_start(node, field, svc.start);
      } else if (k == "cwd") {
        if (auto s = string_value(node, field, /*allow_empty=*/false)) svc.cwd = *s;
      } else if (k == "env") {
        parse_env(node, field, svc.env);
      } else if (k == "start_timeout") {
        if (auto d = positive_duration(node, field)) svc.start_timeout = *d;
      } else if (k == "stop_timeout") {
        if (auto d = positive_duration(node, field)) svc.stop_timeout = *d;
      } else if (k == "health_interval") {
        if (auto d = positive_duration(node, field)) svc.health_interval = *d;
      } else if (k == "restart_window") {
        if (auto d = positive_duration(node, field)) svc.restart_window = *d;
      } else if (k == "restart") {
        if (auto e = enum_value(node, field, "restart policy", kRestartPolicies)) svc.restart = *e;
      } else if (k == "on_shutdown") {
        if (auto e = enum_value(node, field, "action", kShutdownActions))
          svc.on_shutdown = *e == "stop" ? OnShutdown::stop : OnShutdown::leave;
      } else if (k == "reclaim_port") {
        if (auto b = bool_value(node, field)) svc.reclaim_port = *b;
      } else if (k == "env_file" || k == "user") {
        if (auto v = string_value(node, field, /*allow_empty=*/false))
          (k == "user" ? svc.user : svc.env_file) = *v;
      } else if (k == "max_restarts") {
        const toml::value<int64_t>* v = node.as_integer();
        if (!v || v->get() < 0 || v->get() > 1000000) {
          wrong_type(node, field, "a whole number, at least 0");
        } else {
          svc.max_restarts = static_cast<int>(v->get());
        }
      } else if (k == "health_failures") {
        const toml::value<int64_t>* v = node.as_integer();
        if (!v || v->get() < 1 || v->get() > 1000000) {
          wrong_type(node, field, "a whole number, at least 1");
        } else {
          svc.health_failures = static_cast<int>(v->get());
        }
      } else if (k == "vram_estimate") {
        if (auto b = size_value(node, field)) svc.vram_estimate = *b;
      } else if (parse_service_proxy_key(k, node, field, svc)) {  // proxy (issue 12)
      } else if (!parse_api_key(k, node, field, svc, set_nodes)) {
        suggested.push_back(unknown_key(key, where, kServiceKeys));
      }
    }
    check_api_keys(svc, where, set_nodes);
    auto was_suggested = [&](std::string_view k) {
      return std::find(suggested.begin(), suggested.end(), k) != suggested.end();
    };
    if (!has_kind && !was_suggested("kind")) {
      error(t.source().begin, where + ": missing required key 'kind' (one of " +
                                  join(known_service_kinds(), " or ") + ")");
    }
    const ServiceKind* kind = find_service_kind(svc.kind);
    if (!url_node && !was_suggested("url") && kind && kind->needs_url) {
      error(t.source().begin, where + ": missing required key 'url' (kind \"" + svc.kind +
                                  "\" is reached over HTTP)");
    }
  }

  // ---- proxy (issue 12): begin ----
  std::vector<std::pair<toml::source_position, std::string>> proxy_listens_;  // field, address

  // An address the proxy listens on: host:port, remembered for the loopback check at the end.
  void proxy_listen(const toml::node& node, const std::string& field, std::string& out) {
    if (auto s = string_value(node, field, /*allow_empty=*/false)) {
      Result<HostPort> hp = parse_host_port(*s);
      if (!hp) {
        error(node.source().begin, field + ": " + hp.error() + " (got \"" + *s + "\")");
      } else {
        out = *s;
        proxy_listens_.emplace_back(node.source().begin, field);
      }
    }
  }

  void parse_proxy(const toml::table& t, ProxyConfig& out) {
    for (auto&& [key, node] : t) {
      std::string k(key.str());
      std::string field = "proxy." + k;
      if (k == "listen") {
        proxy_listen(node, field, out.listen);
      } else if (k == "api_keys") {
        const toml::array* a = node.as_array();
        if (!a) {
          wrong_type(node, field, "an array of keys");
          continue;
        }
        for (size_t i = 0; i < a->size(); ++i) {
          const toml::node& item = *a->get(i);
          // A key never appears in a message: only where it is and what is wrong.
          if (!item.is_string() || item.as_string()->get().empty()) {
            error(item.source().begin, field + "[" + std::to_string(i) + "]: expected a non-empty string");
          } else if (std::any_of(item.as_string()->get().begin(), item.as_string()->get().end(),
                                 [](char c) { return c <= ' ' || c == 0x7f; })) {
            error(item.source().begin,
                  field + "[" + std::to_string(i) + "]: must be printable ASCII without spaces");
          } else {
            out.api_keys.push_back(item.as_string()->get());
          }
        }
      } else if (k == "api_keys_file") {
        if (auto s = string_value(node, field, /*allow_empty=*/false)) out.api_keys_file = *s;
      } else if (k == "websocket_idle") {
        if (auto d = positive_duration(node, field)) out.websocket_idle = *d;
      } else if (k == "aliases") {
        const toml::table* at = table_or_error(node, field);
        if (!at) continue;
        for (auto&& [alias, target] : *at) {
          if (auto s = string_value(target, field + "." + std::string(alias.str()), false))
            out.aliases[std::string(alias.str())] = *s;
        }
      } else {
        unknown_key(key, "[proxy]", kProxyKeys);
      }
    }
  }

  bool parse_service_proxy_key(const std::string& k, const toml::node& node,
                               const std::string& field, ServiceConfig& svc) {
    if (k == "proxy") {
      proxy_listen(node, field, svc.proxy.listen);
    } else if (k == "max_concurrent" || k == "max_queue") {
      const toml::value<int64_t>* v = node.as_integer();
      int min = k == "max_concurrent" ? 1 : 0;
      if (!v || v->get() < min || v->get() > 1000000) {
        wrong_type(node, field, min ? "a whole number, at least 1" : "a whole number, at least 0");
      } else {
        (k == "max_concurrent" ? svc.proxy.max_concurrent : svc.proxy.max_queue) =
            static_cast<int>(v->get());
      }
    } else if (k == "first_byte_timeout") {
      if (auto d = positive_duration(node, field)) svc.proxy.first_byte_timeout = *d;
    } else if (k == "wake_timeout") {
      if (auto d = positive_duration(node, field)) svc.proxy.wake_timeout = *d;
    } else {
      return false;
    }
    return true;
  }

  // Beyond loopback, anyone on the network could use the GPU's services without a key.
  void check_proxy_listens(const Config& config) {
    if (config.proxy.has_keys()) return;
    for (const auto& [pos, field] : proxy_listens_) {
      std::string addr = field == "proxy.listen" ? config.proxy.listen : "";
      for (const auto& s : config.services)
        if (field == "services." + s.name + ".proxy") addr = s.proxy.listen;
      Result<HostPort> hp = parse_host_port(addr);
      if (hp && !is_loopback_host(hp->host))
        error(pos, fmt::format("{}: {} is reachable from other hosts; set [proxy] api_keys or "
                               "api_keys_file",
                               field, addr));
    }
  }
  // ---- proxy: end ----

  // The keys that say how to talk to the service's API. False when `k` is not one of them.
  bool parse_api_key(const std::string& k, const toml::node& node, const std::string& field,
                     ServiceConfig& svc, std::map<std::string, const toml::node*>& set_nodes) {
    if (k == "api_key") {
      // The value never appears in a message: only its position and what was wrong.
      if (!node.is_string()) {
        error(node.source().begin, field + ": expected a string");
      } else if (node.as_string()->get().empty()) {
        error(node.source().begin, field + ": must not be empty");
      } else {
        svc.api_key = node.as_string()->get();
      }
    } else if (k == "api_key_env") {
      if (auto s = string_value(node, field, /*allow_empty=*/false)) {
        if (s->find('=') != std::string::npos) {
          error(node.source().begin, field + ": '" + *s + "' is not an environment variable name");
        } else {
          svc.api_key_env = *s;
        }
      }
    } else if (k == "probe_timeout") {
      if (auto d = positive_duration(node, field)) svc.probe_timeout = *d;
    } else if (k == "connect_timeout") {
      if (auto d = positive_duration(node, field)) svc.connect_timeout = *d;
    } else if (k == "unload_timeout") {
      if (auto d = positive_duration(node, field)) svc.unload_timeout = *d;
    } else if (k == "min_idle") {
      if (auto d = duration_value(node, field)) svc.min_idle = *d;
    } else if (k == "unload_backoff") {
      if (auto d = duration_value(node, field)) svc.unload_backoff = *d;
    } else if (k == "sleep_level") {
      const toml::value<int64_t>* v = node.as_integer();
      if (!v || (v->get() != 1 && v->get() != 2)) {
        wrong_type(node, field, "1 or 2");
      } else {
        svc.sleep_level = static_cast<int>(v->get());
      }
    } else if (k == "router") {
      if (auto b = bool_value(node, field)) svc.router = *b;
    } else if (k == "models") {
      const toml::array* a = node.as_array();
      if (!a) {
        wrong_type(node, field, "an array of model names");
      } else {
        std::vector<std::string> models;
        for (size_t i = 0; i < a->size(); ++i) {
          auto s = string_value(*a->get(i), field + "[" + std::to_string(i) + "]", false);
          if (s) models.push_back(*s);
        }
        svc.models = std::move(models);
      }
    } else if (k == "busy_url" || k == "unload_url" || k == "health_url") {
      if (auto s = string_value(node, field, /*allow_empty=*/false)) {
        if (s->find("://") != std::string::npos) {
          Result<HttpUrl> u = parse_http_url(s->substr(0, s->find('?')));
          if (!u) {
            error(node.source().begin, field + ": " + u.error() + " (got \"" + *s + "\")");
            set_nodes[k] = &node;
            return true;
          }
        } else if (s->front() != '/') {
          error(node.source().begin, field + ": expected an absolute URL or a path starting with "
                                             "'/' (got \"" + *s + "\")");
          set_nodes[k] = &node;
          return true;
        }
        (k == "busy_url" ? svc.busy_url : k == "unload_url" ? svc.unload_url : svc.health_url) =
            *s;
      }
    } else if (k == "busy_json_pointer") {
      if (auto s = string_value(node, field)) {
        if (!s->empty() && s->front() != '/') {
          error(node.source().begin, field + ": a JSON pointer is empty or starts with '/' (got \"" +
                                         *s + "\")");
        } else {
          svc.busy_json_pointer = *s;
        }
      }
    } else if (k == "busy_metric") {
      if (auto s = string_value(node, field, /*allow_empty=*/false)) svc.busy_metric = *s;
    } else if (k == "unload_method") {
      if (auto s = enum_value(node, field, "method", kUnloadMethods)) svc.unload_method = *s;
    } else if (k == "unload_body") {
      if (auto s = string_value(node, field)) svc.unload_body = *s;
    } else {
      return false;
    }
    set_nodes[k] = &node;
    return true;
  }

  void check_api_keys(const ServiceConfig& svc, const std::string& where,
                      const std::map<std::string, const toml::node*>& set) {
    auto at_key = [&](const std::string& k) { return set.at(k)->source().begin; };
    if (set.count("api_key") && set.count("api_key_env")) {
      error(at_key("api_key_env"), where + ": set api_key or api_key_env, not both");
    }
    if (!svc.kind.empty()) {
      // Keys that only one kind reads (core/service_kinds): on another kind, a mistake.
      const ServiceKind* own = find_service_kind(svc.kind);
      auto reads = [](const ServiceKind& kind, std::string_view key) {
        return std::find(kind.own_keys.begin(), kind.own_keys.end(), key) != kind.own_keys.end();
      };
      std::map<std::string, std::vector<std::string>> readers;  // key -> the kinds that read it
      for (const auto& kind : service_kinds())
        for (std::string_view key : kind.own_keys)
          if (set.count(std::string(key)) && !(own && reads(*own, key)))
            readers[std::string(key)].push_back(fmt::format("\"{}\"", kind.name));
      for (const auto& [k, kinds] : readers)
        error(at_key(k), fmt::format("{}: '{}' applies only to kind {}, not \"{}\"", where, k,
                                     fmt::join(kinds, " or "), svc.kind));
    }
    if (set.count("busy_json_pointer") && set.count("busy_metric")) {
      error(at_key("busy_metric"), where + ": set busy_json_pointer or busy_metric, not both");
    }
    for (const char* k : {"busy_json_pointer", "busy_metric"}) {
      if (set.count(k) && !set.count("busy_url")) {
        error(at_key(k), where + ": '" + k + "' needs busy_url");
      }
    }
    if (set.count("busy_url") && !set.count("busy_json_pointer") && !set.count("busy_metric")) {
      error(at_key("busy_url"), where + ": busy_url needs busy_json_pointer or busy_metric");
    }
    for (const char* k : {"unload_body", "unload_method"}) {
      if (set.count(k) && !set.count("unload_url")) {
        error(at_key(k), where + ": '" + k + "' needs unload_url");
      }
    }
  }

  void parse_match(const toml::node& n, const std::string& field, MatchRule& out) {
    const toml::table* t = n.as_table();
    if (!t) {
      wrong_type(n, field, "a table like { cmdline = \"main\\\\.py\" }");
      return;
    }
    const toml::key* first = nullptr;
    // Keys in file order, so "got both" names them as written.
    std::vector<std::pair<const toml::key*, const toml::node*>> items;
    for (auto&& [key, node] : *t) items.emplace_back(&key, &node);
    std::stable_sort(items.begin(), items.end(), [](const auto& a, const auto& b) {
      const auto& pa = a.first->source().begin;
      const auto& pb = b.first->source().begin;
      return std::pair(pa.line, pa.column) < std::pair(pb.line, pb.column);
    });
    for (auto [key, node] : items) {
      std::string k(key->str());
      std::string sub = fmt::format("{}.{}", field, k);
      if (std::find(kMatchKeys.begin(), kMatchKeys.end(), k) == kMatchKeys.end()) {
        unknown_key(*key, field, kMatchKeys);
        continue;
      }
      if (first) {
        error(key->source().begin, fmt::format("{}: set only one of {}; got both '{}' and '{}'",
                                               field, join(kMatchKeys, " or "), first->str(), k));
        continue;
      }
      first = key;
      std::optional<std::string> s = string_value(*node, sub, /*allow_empty=*/false);
      if (!s) continue;
      if (k == "cmdline") {
        try {
          std::regex re(*s, std::regex::ECMAScript);
          out.cmdline = *s;
        } catch (const std::regex_error& e) {
          error(node->source().begin, sub + ": invalid regular expression: " + e.what());
        }
      } else if (k == "container") {
        out.container = *s;
      } else if (k == "compose_service") {
        out.compose_service = *s;
      } else if (k == "unit") {
        out.unit = *s;
      } else {
        out.pid_file = *s;
      }
    }
    if (items.empty()) {
      error(n.source().begin,
            field + ": set exactly one of " + join(kMatchKeys, " or ") + ", or leave match out");
    }
  }

  void parse_start(const toml::node& n, const std::string& field, std::vector<std::string>& out) {
    const toml::array* a = n.as_array();
    if (!a || a->empty()) {
      wrong_type(n, field, "a non-empty array of strings, the program and its arguments");
      return;
    }
    std::vector<std::string> argv;
    for (size_t i = 0; i < a->size(); ++i) {
      const toml::node& item = *a->get(i);
      auto s = string_value(item, field + "[" + std::to_string(i) + "]", /*allow_empty=*/i > 0);
      if (!s) return;
      argv.push_back(*s);
    }
    out = std::move(argv);
  }

  void parse_env(const toml::node& n, const std::string& field,
                 std::map<std::string, std::string>& out) {
    const toml::table* t = n.as_table();
    if (!t) {
      wrong_type(n, field, "a table of strings like { CUDA_VISIBLE_DEVICES = \"0\" }");
      return;
    }
    for (auto&& [key, node] : *t) {
      std::string k(key.str());
      if (k.empty() || k.find('=') != std::string::npos) {
        error(key.source().begin,
              fmt::format("{}: '{}' is not an environment variable name", field, k));
        continue;
      }
      if (auto s = string_value(node, fmt::format("{}.{}", field, k))) out[k] = *s;
    }
  }

  std::string path_;
  std::vector<Located> errors_;
};

}  // namespace

const std::vector<std::string>& known_service_kinds() {
  static const std::vector<std::string> kinds = [] {
    std::vector<std::string> out;
    for (const auto& k : service_kinds()) out.emplace_back(k.name);
    return out;
  }();
  return kinds;
}

Result<HostPort> parse_host_port(std::string_view text) {
  return parse_authority(text, /*port_required=*/true);
}

bool is_loopback_host(std::string_view host) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  std::string h = lower(host);
  if (h == "localhost" || h == "localhost.") return true;
  in_addr a4;
  if (inet_pton(AF_INET, h.c_str(), &a4) == 1) return (ntohl(a4.s_addr) >> 24) == 127;
  in6_addr a6;
  if (inet_pton(AF_INET6, h.substr(0, h.find('%')).c_str(), &a6) == 1) {
    if (IN6_IS_ADDR_LOOPBACK(&a6)) return true;
    return IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127;  // ::ffff:127.0.0.1
  }
  return false;
}

Result<HttpUrl> parse_http_url(std::string_view text) {
  HttpUrl out;
  size_t sep = text.find("://");
  if (sep == std::string_view::npos) {
    return make_error("expected a URL like \"http://127.0.0.1:8188\"");
  }
  out.scheme = lower(text.substr(0, sep));
  if (out.scheme != "http" && out.scheme != "https") {
    return make_error("scheme must be http or https, not '" + std::string(text.substr(0, sep)) +
                      "'");
  }
  std::string_view rest = text.substr(sep + 3);
  size_t slash = rest.find_first_of("/?#");
  std::string_view authority = rest.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? std::string_view() : rest.substr(slash);
  if (authority.find('@') != std::string_view::npos) {
    return make_error("user names and passwords in URLs are not supported");
  }
  if (path.find_first_of("?#") != std::string_view::npos) {
    return make_error("a base URL has no query or fragment");
  }
  Result<HostPort> hp = parse_authority(authority, /*port_required=*/false);
  if (!hp) return make_error(hp.error());
  out.host = hp->host;
  out.port = hp->port != 0 ? hp->port : (out.scheme == "https" ? 443 : 80);
  out.path = std::string(path);
  while (!out.path.empty() && out.path.back() == '/') out.path.pop_back();
  return out;
}

const ServiceConfig* Config::find_service(std::string_view name) const {
  for (const ServiceConfig& s : services) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

std::string suggest(std::string_view word, const std::vector<std::string>& candidates) {
  // Short words are close to everything at distance 2 ("url" vs "cwd" is 3, "env" vs "end" 1).
  const size_t limit = word.size() <= 3 ? 1 : 2;
  std::string lw = lower(word);
  std::string best;
  size_t best_distance = limit + 1;
  for (const std::string& c : candidates) {
    size_t d = edit_distance(lw, lower(c));
    if (d < best_distance) {
      best_distance = d;
      best = c;
    }
  }
  return best;
}

Result<Config> parse_config(std::string_view text, const std::string& path) {
  return ConfigParser(path).parse(text);
}


}  // namespace vramd
