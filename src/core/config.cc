#include "core/config.h"

#include "core/config_keys.h"
#include "core/service_kinds.h"
#include "core/text.h"

#include <arpa/inet.h>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <toml++/toml.h>
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
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
const std::vector<std::string> kRestartPolicies = {"on-failure", "always", "never"};
const std::vector<std::string> kShutdownActions = {"leave", "stop"};  // OnShutdown, in order
const std::vector<std::string> kBackends = {"auto", "nvml", "nvidia-smi"};
const std::vector<std::string> kUnloadMethods = {"POST", "DELETE", "PUT"};
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

class ConfigParser;

// ---- one row per key ----
//
// Each table of the file ([daemon], [gpu], [services.NAME], …) is a list of rows: the key's
// name, the setter that checks its value and writes the field, how its default reads (from a
// default-constructed struct, so the docs cannot drift from config.h), and its line in
// docs/config.md. The parser, its "did you mean", and the reference's tables (rendered by
// render_config_doc, held to docs/config.md by config_doc_test) all read these rows.

template <class T>
using KeySetter = void (*)(ConfigParser&, const toml::node&, const std::string& field, T&);
template <class T>
using KeyShow = std::string (*)(const T&);  // the value as TOML; "" when unset

template <class T>
struct Key {
  std::string_view name;
  KeySetter<T> set;
  KeyShow<T> show;            // nullptr: `fallback` says the default in words
  std::string_view type;      // as the reference says it
  std::string_view fallback;  // the default where no TOML value says it
  std::string_view meaning;
};

template <class T>
std::vector<std::string> names_of(const std::vector<Key<T>>& keys) {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const Key<T>& k : keys) out.emplace_back(k.name);
  return out;
}

// The key nodes a table set, by name: for the checks across keys after it is read.
using Seen = std::map<std::string, const toml::node*, std::less<>>;

class ConfigParser {
 public:
  explicit ConfigParser(const std::string& path) : path_(path) {}

  Result<Config> parse(std::string_view text);

  // ---- what the setters use ----
  void error(const toml::source_position& pos, std::string message) {
    errors_.push_back({pos, std::move(message)});
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

  std::optional<Duration> duration_at_least(const toml::node& n, const std::string& field,
                                            Duration min) {
    std::optional<Duration> d = duration_value(n, field);
    if (d && *d < min) {
      error(n.source().begin,
            field + ": must be at least " + format_duration(min) + ", got " + describe(n));
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

  // A whole number from `min` up to `max` (a million: no count vramd keeps is larger).
  std::optional<int64_t> whole_value(const toml::node& n, const std::string& field, int64_t min,
                                     int64_t max = 1000000) {
    const toml::value<int64_t>* v = n.as_integer();
    if (!v || v->get() < min || v->get() > max) {
      wrong_type(n, field, fmt::format("a whole number, at least {}", min));
      return std::nullopt;
    }
    return v->get();
  }

  // A regular expression vramd will search with: it must compile.
  std::optional<std::string> regex_value(const toml::node& n, const std::string& field,
                                         std::string_view what) {
    std::optional<std::string> s = string_value(n, field, /*allow_empty=*/false);
    if (!s) return std::nullopt;
    try {
      std::regex re(*s, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      error(n.source().begin, field + ": " + std::string(what) + ": " + e.what());
      return std::nullopt;
    }
    return s;
  }

  void parse_match(const toml::node& n, const std::string& field, MatchRule& out);
  void parse_start(const toml::node& n, const std::string& field, std::vector<std::string>& out);
  void parse_env(const toml::node& n, const std::string& field,
                 std::map<std::string, std::string>& out);
  void proxy_listen(const toml::node& n, const std::string& field, std::string& out);
  void api_keys(const toml::node& n, const std::string& field, std::vector<std::string>& out);
  void url_or_path(const toml::node& n, const std::string& field, std::string& out);

 private:
  std::string at(const toml::source_position& pos, const std::string& message) const {
    if (!pos) return path_ + ": " + message;
    return path_ + ":" + std::to_string(pos.line) + ":" + std::to_string(pos.column) + ": " +
           message;
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

  // Reads table `t` by its rows: each key's setter, else "unknown key" (its suggestions are
  // returned, so that a misspelt key is not also reported missing). `prefix` + key names the
  // field in messages: "daemon.listen".
  template <class T>
  std::vector<std::string> read_keys(const toml::table& t, std::string_view where,
                                     const std::string& prefix, const std::vector<Key<T>>& keys,
                                     T& out, Seen& seen) {
    static const std::vector<std::string> known = names_of(keys);
    std::vector<std::string> suggested;
    for (auto&& [key, node] : t) {
      std::string_view k = key.str();
      auto row = std::find_if(keys.begin(), keys.end(), [&](const Key<T>& r) { return r.name == k; });
      if (row == keys.end()) {
        suggested.push_back(unknown_key(key, where, known));
        continue;
      }
      seen.emplace(std::string(k), &node);
      row->set(*this, node, prefix + std::string(k), out);
    }
    return suggested;
  }

  void parse_daemon(const toml::table& t, DaemonConfig& out);
  void parse_gpu(const toml::table& t, GpuConfig& out);
  void parse_host(const toml::table& t, HostConfig& out);
  void parse_proxy(const toml::table& t, ProxyConfig& out);
  void parse_services(const toml::table& t, Config& config);
  void parse_service(const toml::table& t, ServiceConfig& svc);
  void parse_crash_rules(const toml::node& node, Config& config);
  void check_api_keys(const ServiceConfig& svc, const std::string& where, const Seen& set);
  void check_proxy_listens(const Config& config);

  std::string path_;
  std::vector<Located> errors_;
  std::vector<std::pair<toml::source_position, std::string>> proxy_listens_;  // field, address
};

// ---- setters and shows by the field's type; the field is the template argument ----

template <class>
struct MemberOf;
template <class C, class V>
struct MemberOf<V C::*> {
  using Class = C;
};
template <auto M>
using ClassOf = typename MemberOf<decltype(M)>::Class;

template <auto M>
void text(ConfigParser& p, const toml::node& n, const std::string& f, ClassOf<M>& out) {
  if (auto s = p.string_value(n, f)) out.*M = *s;
}
template <auto M>
void nonempty(ConfigParser& p, const toml::node& n, const std::string& f, ClassOf<M>& out) {
  if (auto s = p.string_value(n, f, /*allow_empty=*/false)) out.*M = *s;
}
template <auto M>
void flag(ConfigParser& p, const toml::node& n, const std::string& f, ClassOf<M>& out) {
  if (auto b = p.bool_value(n, f)) out.*M = *b;
}
template <auto M>
void duration(ConfigParser& p, const toml::node& n, const std::string& f, ClassOf<M>& out) {
  if (auto d = p.duration_value(n, f)) out.*M = *d;
}
template <auto M>
void positive(ConfigParser& p, const toml::node& n, const std::string& f, ClassOf<M>& out) {
  if (auto d = p.positive_duration(n, f)) out.*M = *d;
}
template <auto M, int64_t MinMs>
void at_least(ConfigParser& p, const toml::node& n, const std::string& f, ClassOf<M>& out) {
  if (auto d = p.duration_at_least(n, f, Duration(MinMs))) out.*M = *d;
}
template <auto M>
void size(ConfigParser& p, const toml::node& n, const std::string& f, ClassOf<M>& out) {
  if (auto b = p.size_value(n, f)) out.*M = *b;
}
template <auto M, int64_t Min, int64_t Max = 1000000>
void whole(ConfigParser& p, const toml::node& n, const std::string& f, ClassOf<M>& out) {
  using V = std::remove_reference_t<decltype(out.*M)>;
  if (auto v = p.whole_value(n, f, Min, Max)) out.*M = static_cast<V>(*v);
}

// A size as it is best written: "256MiB", "16GiB".
std::string size_text(Bytes b) {
  const std::pair<Bytes, const char*> units[] = {
      {GiB * 1024, "TiB"}, {GiB, "GiB"}, {MiB, "MiB"}, {KiB, "KiB"}};
  for (auto [unit, name] : units)
    if (b >= unit && b % unit == 0) return fmt::format("{}{}", b / unit, name);
  return fmt::format("{}B", b);
}
std::string toml_text(const std::string& s) { return s.empty() ? "" : "\"" + s + "\""; }
std::string toml_text(bool b) { return b ? "true" : "false"; }
std::string toml_text(Duration d) { return "\"" + format_duration(d) + "\""; }
std::string toml_text(Bytes b) { return b == 0 ? "" : "\"" + size_text(b) + "\""; }
std::string toml_text(int v) { return std::to_string(v); }
std::string toml_text(int64_t v) { return std::to_string(v); }
template <class V>
std::string toml_text(const std::optional<V>& v) {
  return v ? toml_text(*v) : "";
}
template <auto M>
std::string shown(const ClassOf<M>& defaults) {
  return toml_text(defaults.*M);
}

// ---- [daemon] ----

// @section daemon
const std::vector<Key<DaemonConfig>> kDaemonKeys = {
    {"listen",
        +[](ConfigParser& p, const toml::node& n, const std::string& f, DaemonConfig& out) {
          if (auto s = p.string_value(n, f)) {
            Result<HostPort> hp = parse_authority(*s, /*port_required=*/true);
            if (!hp)
              p.error(n.source().begin, f + ": " + hp.error() + " (got \"" + *s + "\")");
            else
              out.listen = *s;
          }
        },
        shown<&DaemonConfig::listen>,
        R"(address)", R"()",
        R"(Where the HTTP API, `/metrics` and the dashboard listen (`host:port`, `[v6]:port`). An address beyond loopback (anything but `127.0.0.0/8`, `[::1]` and `localhost`; hostnames count as beyond) is a config error unless `token` or `token_file` is set. A unix socket is also opened in `state_dir` (mode 0660, no token). See [api.md](api.md#authentication).)"},
    {"state_dir", nonempty<&DaemonConfig::state_dir>, shown<&DaemonConfig::state_dir>,
        R"(string)", R"()",
        R"(Directory for the database, the unix socket and service logs.)"},
    {"sample_interval", (at_least<&DaemonConfig::sample_interval, 100>),
        shown<&DaemonConfig::sample_interval>,
        R"(duration)", R"()",
        R"(How often the GPUs are sampled. At least `"100ms"`.)"},
    {"token",
        +[](ConfigParser& p, const toml::node& n, const std::string& f, DaemonConfig& out) {
          if (auto s = p.string_value(n, f, /*allow_empty=*/false)) {
            // It goes in "Authorization: Bearer TOKEN": one word of visible characters.
            if (std::any_of(s->begin(), s->end(), [](char c) { return c <= ' ' || c == 0x7f; }))
              p.error(n.source().begin, f + ": must be printable ASCII without spaces");
            else
              out.token = *s;
          }
        },
        nullptr,
        R"(string)", R"(none)",
        R"(Bearer token that every TCP request to `/v1/…` and `/metrics` must carry (`Authorization: Bearer …`; never in the URL). One word of printable ASCII. The dashboard's files need none; the unix socket needs none. Prefer `token_file`, which keeps the secret out of the config.)"},
    {"token_file", nonempty<&DaemonConfig::token_file>, nullptr,
        R"(string)", R"(none)",
        R"(File holding the token (one line; a trailing newline is ignored), read when the daemon starts: the start fails when it cannot be read or is empty, and a file readable by every user gets a warning. The CLI reads it too when it can. Set `token` or `token_file`, not both.)"},
    {"docker_socket",
        +[](ConfigParser& p, const toml::node& n, const std::string& f, DaemonConfig& out) {
          if (auto s = p.string_value(n, f, /*allow_empty=*/false)) {
            out.docker_socket = *s;
            out.docker_socket_given = true;
          }
        },
        nullptr,
        R"(string)", R"(the first socket of `/run/docker.sock`, `/var/run/docker.sock`, `$XDG_RUNTIME_DIR/podman/podman.sock`, `/run/podman/podman.sock` (none: `/var/run/docker.sock`))",
        R"(The container engine's API socket, Docker's or Podman's (its Docker-compatible service: `systemctl enable --now podman.socket`, or `--user` for rootless): names the containers that hold GPU memory, and manages the services matched by `container` ([containers](#containers)). Looked for when vramd starts.)"},
    {"systemctl", nonempty<&DaemonConfig::systemctl>, nullptr,
        R"(string)", R"(`"systemctl"` (from `PATH`))",
        R"(The `systemctl` that manages and reads the services matched by `unit` ([units](#units)): a path, or a name looked up in `PATH`.)"},
    {"journalctl", nonempty<&DaemonConfig::journalctl>, nullptr,
        R"(string)", R"(`"journalctl"` (from `PATH`))",
        R"(The `journalctl` their logs come from.)"},
    {"systemd_user", flag<&DaemonConfig::systemd_user>, shown<&DaemonConfig::systemd_user>,
        R"(boolean)", R"()",
        R"(Units are the user's (`systemctl --user`, `journalctl --user`), not the system's.)"},
    {"probe_interval", (at_least<&DaemonConfig::probe_interval, 100>),
        shown<&DaemonConfig::probe_interval>,
        R"(duration)", R"()",
        R"(How often each service's API is probed (busy, loaded models). At least `"100ms"`.)"},
    {"quiet_probe_interval", duration<&DaemonConfig::quiet_probe_interval>, nullptr,
        R"(duration)", R"(`"10s"` (or `probe_interval`, when longer))",
        R"(How far the probes of a service back off while nothing about it changes: after two answers like the one before, the wait doubles from `probe_interval` up to this. Back to `probe_interval` at the next sample once its GPU memory moves by 64 MiB or its GPU works, a lease waits (always, on a shared `store`: another host's lease may be given room here at any claim round), its idle TTL is near (the TTL is decided on a probe no older than `probe_interval`), or it starts, exits or is unloaded. Set it to `probe_interval` for a probe every `probe_interval` whatever happens. At least `probe_interval`. A probe is the largest part of what vramd costs a quiet host ([bench/RESULTS.md](../bench/RESULTS.md)).)"},
    {"events_retention", (whole<&DaemonConfig::events_retention, 1, INT64_MAX>),
        shown<&DaemonConfig::events_retention>,
        R"(integer ≥ 1)", R"()",
        R"(How many events the store keeps; older ones are dropped.)"},
    {"history", flag<&DaemonConfig::history>, shown<&DaemonConfig::history>,
        R"(bool)", R"()",
        R"(Keep the durations history ([history.md](history.md)): each ComfyUI prompt read from its `/history` and each request through a vramd proxy, with the service's version, arguments and GPU. Written in batches on the store thread, never on the request path. `false`: nothing is recorded (`vramd history` answers from what was kept).)"},
    {"history_retention", positive<&DaemonConfig::history_retention>,
        shown<&DaemonConfig::history_retention>,
        R"(duration)", R"()",
        R"(How long the durations history keeps a record; older ones are dropped once an hour.)"},
    {"lease_heartbeat", positive<&DaemonConfig::lease_heartbeat>,
        shown<&DaemonConfig::lease_heartbeat>,
        R"(duration)", R"()",
        R"(A lease without a holder pid ends when no request about it (GET, heartbeat) came for this long. Leases with a pid end when that process exits.)"},
    {"discover", flag<&DaemonConfig::discover>, nullptr,
        R"(boolean)", R"(on when the config names no service, else off)",
        R"(Finds GPU services while it runs, as `vramd discover` does: every `discover_interval`, each GPU process that no service, lease or baseline owns (and its parents) is looked at, its listening ports asked each kind's fingerprint (GET only, 500 ms each), and a server found is added as a service with `"discovered": true` (event `service.discovered`), named by its container, compose service or unit, else by its kind, and matched the same way (else by its port). A GPU process is looked at three times at most (a server may hold memory before it listens). A service in the config at the same port always wins.)"},
    {"discover_unload", flag<&DaemonConfig::discover_unload>,
        shown<&DaemonConfig::discover_unload>,
        R"(boolean)", R"()",
        R"(Lets vramd act on discovered services: unload them (on request, for a lease's room) and stop or restart them through their container or unit. Off, they are only watched: an unload is refused with the reason, and a lease's wait reason names them `discovered, left alone`.)"},
    {"prewarm", flag<&DaemonConfig::prewarm>, shown<&DaemonConfig::prewarm>,
        R"(boolean)", R"()",
        R"(Every service's `prewarm` where it does not say.)"},
    {"discover_interval", (at_least<&DaemonConfig::discover_interval, 1000>),
        shown<&DaemonConfig::discover_interval>,
        R"(duration)", R"()",
        R"(How often discovery looks again. At least `"1s"`.)"},
    {"store",
        +[](ConfigParser& p, const toml::node& n, const std::string& f, DaemonConfig& out) {
          if (auto s = p.string_value(n, f, /*allow_empty=*/false)) {
            if (s->rfind("postgresql://", 0) != 0 && s->rfind("postgres://", 0) != 0)
              p.error(n.source().begin,
                      f + ": a postgresql:// URL (leave it out for SQLite in state_dir), got \"" +
                          *s + "\"");
            else
              out.store = *s;
          }
        },
        nullptr,
        R"(string)", R"(none (SQLite))",
        R"(Where events, leases, jobs, crashes and load peaks are kept. Left out: SQLite, `state_dir/vramd.db`. A `postgresql://user@host:port/db` URL (libpq's form; `postgres://` too): PostgreSQL, which several hosts can share (each row is keyed by `host`; client leases then go to one queue every host claims from: [api.md](api.md#several-hosts-one-queue)). vramd loads libpq (`libpq.so.5`; Debian: `apt install libpq5`) only then, so a daemon on SQLite maps neither it nor the TLS and Kerberos libraries it pulls in. The schema is created and migrated at start; a database whose schema is newer than this vramd knows is refused with a message saying so. An unreachable server at start is a start error naming the URL (its password shown as `***`); one lost while running is a `store` fault: lease changes are retried and no client hears of one before it is written. Prefer `store_url_file` for a URL with a password.)"},
    {"store_url_file", nonempty<&DaemonConfig::store_url_file>, nullptr,
        R"(string)", R"(none)",
        R"(File whose first line is the `postgresql://` URL (read at start). Set `store` or `store_url_file`, not both.)"},
    {"host",
        +[](ConfigParser& p, const toml::node& n, const std::string& f, DaemonConfig& out) {
          if (auto s = p.string_value(n, f, /*allow_empty=*/false)) {
            // It keys rows and is shown everywhere: a name, not a sentence.
            bool ok = s->size() <= 64 && std::all_of(s->begin(), s->end(), [](char c) {
              return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' ||
                     c == '.';
            });
            // "any" names no host in a lease; "all" every host in GET /v1/leases?host=all.
            if (!ok || *s == "any" || *s == "all")
              p.error(n.source().begin, f + ": letters, digits, '-', '_' and '.' (at most 64, "
                                            "not \"any\" or \"all\"), got \"" + *s + "\"");
            else
              out.host = *s;
          }
        },
        nullptr,
        R"(string)", R"(the machine's hostname)",
        R"(This host's name: shown as `host` in `/v1/status`, every lease and every event, and the key of its rows in a shared PostgreSQL store. Letters, digits, `-`, `_`, `.` (at most 64; not `any` nor `all`, which leases and `GET /v1/leases?host=all` use). Two hosts on one store must have different names.)"},
    {"host_timeout", positive<&DaemonConfig::host_timeout>, shown<&DaemonConfig::host_timeout>,
        R"(duration)", R"()",
        R"(With a PostgreSQL store: a host whose heartbeat (written every 2 s, or every quarter of `host_timeout` when that is shorter) is older than this is **lost**: shown `lost` in `/v1/hosts` (its services' states `unknown`), and one live host (an advisory lock) takes care of its leases: each granted lease of the shared queue is queued again for the other hosts (its `on_host_lost` = `requeue`, the default) or ended (`end`), its queued ones are kept by that live host; events `host.lost`, `lease.requeued`, `lease.host_lost`. A host that comes back finds those leases no longer its own and drops them (`lease.dropped`): none is granted twice. A host cut off from the store gives its own granted shared leases up earlier, at **half** of `host_timeout` on its own monotonic clock (they end `lost`; its `vramd run` jobs are stopped), so that no lease is held by two hosts across a partition. See docs/api.md "Guarantees" for what a shorter or longer value costs.)"},
};

// ---- [gpu] ----

// @section gpu
const std::vector<Key<GpuConfig>> kGpuKeys = {
    {"backend",
        +[](ConfigParser& p, const toml::node& n, const std::string& f, GpuConfig& out) {
          if (auto s = p.enum_value(n, f, "backend", kBackends)) out.backend = *s;
        },
        shown<&GpuConfig::backend>,
        R"(`"auto"`, `"nvml"` or `"nvidia-smi"`)", R"()",
        R"(How GPUs are read. `auto` loads NVML and falls back to running `nvidia-smi`.)"},
    {"baseline",
        +[](ConfigParser& p, const toml::node& n, const std::string& f, GpuConfig& out) {
          const toml::value<std::string>* v = n.as_string();
          if (v && v->get() == "auto")
            out.baseline.reset();
          else if (!v)
            p.wrong_type(n, f, "\"auto\" or " + std::string(kSizeHint));
          else if (auto b = p.size_value(n, f))
            out.baseline = *b;
        },
        nullptr,
        R"(`"auto"` or size)", R"(`"auto"`)",
        R"(Memory the driver and display hold with no process running. `auto` learns it: the card's used memory when no process holds any.)"},
    {"residual_tolerance", size<&GpuConfig::residual_tolerance>,
        shown<&GpuConfig::residual_tolerance>,
        R"(size)", R"()",
        R"(Used memory not explained by baseline and per-process figures is ignored below this; above it, it is attributed to a candidate or shown as `unknown`.)"},
    {"reserve", size<&GpuConfig::reserve>, shown<&GpuConfig::reserve>,
        R"(size)", R"()",
        R"(Memory kept free on every GPU: never leased.)"},
    {"process_scan_threshold", size<&GpuConfig::process_scan_threshold>,
        shown<&GpuConfig::process_scan_threshold>,
        R"(size)", R"()",
        R"(Every sample reads each GPU's memory and utilization; its process lists (`nvmlDeviceGet{Compute,Graphics,MPSCompute}RunningProcesses`, which take the driver's global lock and cost milliseconds each) only when its used memory moved by at least this much since they were last read, when vramd did something that may change them (a start, an exit, a lease granted or ended, an unload, a wake), or after `process_scan_interval`. Between two reads the last lists stand. With MIG on, every sample reads them.)"},
    {"process_scan_interval", (at_least<&GpuConfig::process_scan_interval, 100>),
        shown<&GpuConfig::process_scan_interval>,
        R"(duration)", R"()",
        R"(The longest the process lists go unread (see `process_scan_threshold`). At least `"100ms"`; set it to `sample_interval` to read them on every sample.)"},
    {"cuda_checkpoint", nonempty<&GpuConfig::cuda_checkpoint>, nullptr,
        R"(string)", R"(`"cuda-checkpoint"` (from `PATH`))",
        R"(NVIDIA's [`cuda-checkpoint`](https://github.com/NVIDIA/cuda-checkpoint) utility (driver 550 and later), which suspends a process's GPU memory into host RAM and resumes it on the same GPU: a path, or a name looked up in `PATH`. vramd asks its `--help` which form it speaks (`--action` from 555, `--toggle` with `--get-state` before). Without it, or on a driver without support, suspend is not offered: `vramd status` and `/v1/status` (`suspend`) say why, and the event `suspend.not_offered` says it once. Where it works, preemptible leases may be suspended ([api.md](api.md#preemptible-leases)) and services without an unload call sleep at `suspend` rather than being stopped ([proxy.md](proxy.md#suspend-depth)).)"},
};

// ---- [host] ----

// @section host
const std::vector<Key<HostConfig>> kHostKeys = {
    {"ram_reserve",
        +[](ConfigParser& p, const toml::node& n, const std::string& f, HostConfig& out) {
          // "8GiB", or "15%" of MemTotal.
          const toml::value<std::string>* v = n.as_string();
          std::string text = v ? v->get() : "";
          if (v && !text.empty() && text.back() == '%') {
            char* end = nullptr;
            double pct = std::strtod(text.c_str(), &end);
            if (end != text.c_str() + text.size() - 1 || pct < 0 || pct > 90)
              p.error(n.source().begin,
                      f + ": expected a share from 0% to 90%, got " + describe(n));
            else
              out.ram_reserve_pct = pct;
          } else if (!v) {
            p.wrong_type(n, f, std::string(kSizeHint) + " or a share like \"10%\"");
          } else if (auto b = p.size_value(n, f)) {
            out.ram_reserve = *b;
          }
        },
        nullptr,
        R"(size, or a share like `"15%"` (0–90%))", R"(`"10%"` of MemTotal)",
        R"(Host RAM no sleeper may keep and no RAM lease is promised past. A service put to sleep keeps its weights in host RAM (`sleep1`) only where they fit in MemAvailable, less what leases were promised, less this; else it sleeps deeper. When MemAvailable falls under it, or a RAM lease does not fit, the sleeper keeping the most host RAM is stopped first ([proxy.md](proxy.md#depths)).)"},
};

// ---- [services.NAME] ----

using Svc = ServiceConfig;

// @section services.NAME
const std::vector<Key<ServiceConfig>> kServiceKeys = {
    {"kind",
        +[](ConfigParser& p, const toml::node& n, const std::string& f, Svc& svc) {
          if (auto s = p.enum_value(n, f, "kind", known_service_kinds())) svc.kind = *s;
        },
        nullptr,
        R"(string, *required*)", R"()",
        R"(The adapter: how vramd talks to the service. One of `comfyui`, `ollama`, `vllm`, `sglang`, `a1111`, `forge`, `textgen`, `tabbyapi`, `llamacpp`, `triton`, `localai`, `speaches`, `generic_http`, `process`. `process` has no API: vramd attributes its memory and can start and stop it, but cannot unload models.)"},
    {"url",
        +[](ConfigParser& p, const toml::node& n, const std::string& f, Svc& svc) {
          if (auto s = p.string_value(n, f)) {
            Result<HttpUrl> u = parse_http_url(*s);
            if (!u) {
              p.error(n.source().begin, f + ": " + u.error() + " (got \"" + *s + "\")");
            } else {
              svc.url = *s;
              while (!svc.url.empty() && svc.url.back() == '/') svc.url.pop_back();
            }
          }
        },
        nullptr,
        R"(URL, *required* unless kind is `process`)", R"()",
        R"(Base URL of the service's API, `"http://127.0.0.1:8188"`.)"},
    {"match",
        +[](ConfigParser& p, const toml::node& n, const std::string& f, Svc& svc) {
          p.parse_match(n, f, svc.match);
        },
        nullptr,
        R"(inline table)", R"(port of `url`)",
        R"(How to recognise the service's processes; see below. Without it, the process listening on the port of `url`.)"},
    {"unload_after_idle", positive<&Svc::unload_after_idle>, shown<&Svc::unload_after_idle>,
        R"(duration)", R"()",
        R"(Unload the service's models after it has been idle this long. Without it, vramd unloads only when a lease needs the memory.)"},
    {"min_idle", duration<&Svc::min_idle>, shown<&Svc::min_idle>,
        R"(duration)", R"()",
        R"(Idle at least this long before vramd unloads the service to make room for a waiting lease.)"},
    {"on_ineffective_unload",
        +[](ConfigParser& p, const toml::node& n, const std::string& f, Svc& svc) {
          if (auto s = p.enum_value(n, f, "action", kIneffectiveActions))
            svc.on_ineffective_unload = *parse_ineffective_unload(*s);
        },
        +[](const Svc& svc) { return toml_text(std::string(to_string(svc.on_ineffective_unload))); },
        R"(`"restart"`, `"stop"` or `"report"`)", R"()",
        R"(What to do when an unload frees nothing or too little: restart the service (if vramd starts it), stop it, or only record it.)"},
    {"group", nonempty<&Svc::group>, shown<&Svc::group>,
        R"(string)", R"()",
        R"(Exclusive group: services of the same group never hold the GPU at the same time; starting one unloads or stops the others.)"},
    {"pinned", flag<&Svc::pinned>, shown<&Svc::pinned>,
        R"(bool)", R"()",
        R"(Never unloaded or stopped to make room for others.)"},
    {"prewarm", flag<&Svc::prewarm>, nullptr,
        R"(bool)", R"(`[daemon] prewarm`)",
        R"(Wakes it while asleep, before it is asked, when its GPU has room nobody wants and a request within the hour is likely (learned from when it is asked; [proxy.md](proxy.md#prewarm)). Never evicts anyone; a lease that needs the room sends it back to sleep at once. Needs a kind with a wake call.)"},
    {"start",
        +[](ConfigParser& p, const toml::node& n, const std::string& f, Svc& svc) {
          p.parse_start(n, f, svc.start);
        },
        nullptr,
        R"(array of strings)", R"(none)",
        R"(The command that starts the service, program first, run without a shell. With it, vramd can start, stop and restart the service and keep its logs.)"},
    {"cwd", nonempty<&Svc::cwd>, nullptr,
        R"(string)", R"(vramd's working directory)",
        R"(Working directory for `start`.)"},
    {"env",
        +[](ConfigParser& p, const toml::node& n, const std::string& f, Svc& svc) {
          p.parse_env(n, f, svc.env);
        },
        nullptr,
        R"(table of strings)", R"(none)",
        R"(Extra environment variables for `start`, `{ CUDA_VISIBLE_DEVICES = "0" }`.)"},
    {"env_file", nonempty<&Svc::env_file>, shown<&Svc::env_file>,
        R"(string)", R"()",
        R"(File of `KEY=VALUE` lines (`#` comments, optional `export`, quotes) added to the environment of `start`; `env` wins.)"},
    {"user", nonempty<&Svc::user>, shown<&Svc::user>,
        R"(string)", R"()",
        R"(Run `start` as this user (vramd must run as root).)"},
    {"stop_timeout", positive<&Svc::stop_timeout>, shown<&Svc::stop_timeout>,
        R"(duration)", R"()",
        R"(After SIGTERM to the service's process group, how long before SIGKILL. A container: the engine's `t` (how long before it kills it). A unit: systemd's own `TimeoutStopSec=` applies instead.)"},
    {"health_interval", positive<&Svc::health_interval>, shown<&Svc::health_interval>,
        R"(duration)", R"()",
        R"(How often a running service vramd started is health-checked. While it starts: 25 ms after its start, then each wait twice the last, up to 1 s (or this, if shorter), so a server ready at once is used at once.)"},
    {"restart",
        +[](ConfigParser& p, const toml::node& n, const std::string& f, Svc& svc) {
          if (auto e = p.enum_value(n, f, "restart policy", kRestartPolicies))
            svc.restart = *parse_restart_policy(*e);
        },
        +[](const Svc& svc) { return toml_text(std::string(to_string(svc.restart))); },
        R"(`"on-failure"`, `"always"` or `"never"`)", R"()",
        R"(Whether vramd starts the service again when it exits (a failure: non-zero status, a signal, or ended by vramd for failing health checks or the start timeout).)"},
    {"max_restarts", (whole<&Svc::max_restarts, 0>), shown<&Svc::max_restarts>,
        R"(integer ≥ 0)", R"()",
        R"(More restarts than this within `restart_window` make the service `failed`: it is stopped (a container or unit that keeps failing its health checks too) and stays down until started by hand.)"},
    {"restart_window", positive<&Svc::restart_window>, shown<&Svc::restart_window>,
        R"(duration)", R"()",
        R"(See `max_restarts`. Restarts wait 1 s, 2 s, 4 s ... up to 5 min between them.)"},
    {"reclaim_port", flag<&Svc::reclaim_port>, shown<&Svc::reclaim_port>,
        R"(bool)", R"()",
        R"(When the port of `url` is taken at start, end that process first, but only if it runs as vramd's user and `match` recognises it as this service. Otherwise the start is refused, naming the process.)"},
    {"on_shutdown",
        +[](ConfigParser& p, const toml::node& n, const std::string& f, Svc& svc) {
          if (auto e = p.enum_value(n, f, "action", kShutdownActions))
            svc.on_shutdown = *e == "stop" ? OnShutdown::stop : OnShutdown::leave;
        },
        +[](const Svc& svc) {
          return toml_text(kShutdownActions[static_cast<size_t>(svc.on_shutdown)]);
        },
        R"(`"leave"` or `"stop"`)", R"()",
        R"(What happens to the running service when vramd stops. Left running, it is adopted again when vramd starts.)"},
    {"start_timeout", positive<&Svc::start_timeout>, shown<&Svc::start_timeout>,
        R"(duration)", R"()",
        R"(How long a started service may take to answer its health check before the start counts as failed.)"},
    {"health_failures", (whole<&Svc::health_failures, 1>), shown<&Svc::health_failures>,
        R"(integer ≥ 1)", R"()",
        R"(Consecutive failed health checks after which a service vramd started is restarted.)"},
    {"vram_estimate", size<&Svc::vram_estimate>, shown<&Svc::vram_estimate>,
        R"(size)", R"()",
        R"(GPU memory the service needs when loaded, until vramd has measured it: once the service has been seen loaded, its measured peak (`load_peaks`) comes first ([proxy.md](proxy.md#wake-on-request)). For a service vramd runs (`start`), every start waits for this much room like a lease (*start admission*; also without `vram_estimate` once a peak is known): idle services are unloaded to make it, the other members of its exclusive group are stopped, and `vramd start NAME --force` (`?force=true`) starts it without waiting. The start's lease is shown in `vramd leases` (`start NAME`) and ends once the service answers its health check.)"},
    {"api_key",
        +[](ConfigParser& p, const toml::node& n, const std::string& f, Svc& svc) {
          // The value never appears in a message: only its position and what was wrong.
          if (!n.is_string())
            p.error(n.source().begin, f + ": expected a string");
          else if (n.as_string()->get().empty())
            p.error(n.source().begin, f + ": must not be empty");
          else
            svc.api_key = n.as_string()->get();
        },
        shown<&Svc::api_key>,
        R"(string)", R"()",
        R"(Sent to the service as `Authorization: Bearer …` (TabbyAPI's admin key, a vLLM `--api-key`). Never logged nor shown in errors.)"},
    {"api_key_env",
        +[](ConfigParser& p, const toml::node& n, const std::string& f, Svc& svc) {
          if (auto s = p.string_value(n, f, /*allow_empty=*/false)) {
            if (s->find('=') != std::string::npos)
              p.error(n.source().begin, f + ": '" + *s + "' is not an environment variable name");
            else
              svc.api_key_env = *s;
          }
        },
        shown<&Svc::api_key_env>,
        R"(string)", R"()",
        R"(Name of an environment variable holding the key, read when the daemon starts, so the key stays out of the file. Set `api_key` or `api_key_env`, not both.)"},
    {"probe_timeout", positive<&Svc::probe_timeout>, shown<&Svc::probe_timeout>,
        R"(duration)", R"()",
        R"(Bound on one probe of the service's API, all its calls together; a server that does not answer in time counts as unreachable.)"},
    {"connect_timeout", positive<&Svc::connect_timeout>, shown<&Svc::connect_timeout>,
        R"(duration)", R"()",
        R"(Bound on opening each connection to the service.)"},
    {"unload_timeout", positive<&Svc::unload_timeout>, nullptr,
        R"(duration)", R"(`"20s"` (`comfyui`: `"30s"`))",
        R"(How long memory may take to leave the GPU after an unload call before vramd judges the unload (freed, partial, ineffective).)"},
    {"unload_backoff", duration<&Svc::unload_backoff>, shown<&Svc::unload_backoff>,
        R"(duration)", R"()",
        R"(After a partial or ineffective unload, how long vramd waits before trying the same unload again.)"},
    {"sleep_level",
        +[](ConfigParser& p, const toml::node& n, const std::string& f, Svc& svc) {
          const toml::value<int64_t>* v = n.as_integer();
          if (!v || (v->get() != 1 && v->get() != 2))
            p.wrong_type(n, f, "1 or 2");
          else
            svc.sleep_level = static_cast<int>(v->get());
        },
        nullptr,
        R"(`1` or `2`)", R"(none: vramd chooses)",
        R"(`vllm`, `comfyui`: fixes the depth of every unload. vLLM: `POST /sleep?level=N` (1 moves the weights to host RAM and drops the KV cache; 2 drops both, and the wake reloads them from disk). ComfyUI: 1 is `/free` with `unload_models`, 2 adds `free_memory`. Unset, each unload is as shallow as the host RAM allows (`[host] ram_reserve`, [proxy.md](proxy.md#depths)).)"},
    {"router", flag<&Svc::router>, nullptr,
        R"(bool)", R"(detected)",
        R"(`llamacpp` only: the server runs in router mode (`/models/unload`). Without it, vramd asks `GET /models` and decides.)"},
    {"models",
        +[](ConfigParser& p, const toml::node& n, const std::string& f, Svc& svc) {
          const toml::array* a = n.as_array();
          if (!a) {
            p.wrong_type(n, f, "an array of model names");
            return;
          }
          std::vector<std::string> models;
          for (size_t i = 0; i < a->size(); ++i)
            if (auto s = p.string_value(*a->get(i), f + "[" + std::to_string(i) + "]", false))
              models.push_back(*s);
          svc.models = std::move(models);
        },
        nullptr,
        R"(array of strings)", R"(what the server lists)",
        R"(Model names to unload and reload where the server needs names (Triton, LocalAI, speaches, Ollama). LocalAI has no listing: set it there. The front door ([proxy.md](proxy.md)) routes these names to the service too, even while it is down.)"},
    {"busy_url",
        +[](ConfigParser& p, const toml::node& n, const std::string& f, Svc& svc) {
          p.url_or_path(n, f, svc.busy_url);
        },
        shown<&Svc::busy_url>,
        R"(URL or path)", R"()",
        R"(`generic_http` only: where to ask whether the service is busy. Needs `busy_json_pointer` or `busy_metric`.)"},
    {"busy_json_pointer",
        +[](ConfigParser& p, const toml::node& n, const std::string& f, Svc& svc) {
          if (auto s = p.string_value(n, f)) {
            if (!s->empty() && s->front() != '/')
              p.error(n.source().begin,
                      f + ": a JSON pointer is empty or starts with '/' (got \"" + *s + "\")");
            else
              svc.busy_json_pointer = *s;
          }
        },
        shown<&Svc::busy_json_pointer>,
        R"(string)", R"()",
        R"(`generic_http`: RFC 6901 pointer into `busy_url`'s JSON; `true`, a number > 0 or a non-empty string/list = busy.)"},
    {"busy_metric", nonempty<&Svc::busy_metric>, shown<&Svc::busy_metric>,
        R"(string)", R"()",
        R"(`generic_http`: a Prometheus metric at `busy_url`; its sum over label sets > 0 = busy.)"},
    {"unload_method",
        +[](ConfigParser& p, const toml::node& n, const std::string& f, Svc& svc) {
          if (auto s = p.enum_value(n, f, "method", kUnloadMethods)) svc.unload_method = *s;
        },
        shown<&Svc::unload_method>,
        R"(`"POST"`, `"DELETE"` or `"PUT"`)", R"()",
        R"(`generic_http`: the method of the unload call.)"},
    {"unload_url",
        +[](ConfigParser& p, const toml::node& n, const std::string& f, Svc& svc) {
          p.url_or_path(n, f, svc.unload_url);
        },
        shown<&Svc::unload_url>,
        R"(URL or path)", R"()",
        R"(`generic_http`: the unload call. Without it the service cannot be unloaded, only stopped.)"},
    {"unload_body", text<&Svc::unload_body>, nullptr,
        R"(string)", R"(empty)",
        R"(`generic_http`: the unload call's body (sent as `application/json`).)"},
    {"health_url",
        +[](ConfigParser& p, const toml::node& n, const std::string& f, Svc& svc) {
          p.url_or_path(n, f, svc.health_url);
        },
        nullptr,
        R"(URL or path)", R"(`"/"`)",
        R"(`generic_http`: the health check; any 2xx is healthy.)"},
    // The request path (docs/proxy.md).
    {"proxy",
        +[](ConfigParser& p, const toml::node& n, const std::string& f, Svc& svc) {
          p.proxy_listen(n, f, svc.proxy.listen);
        },
        nullptr,
        R"(`host:port`)", R"(none)",
        R"(Listen here and forward every request to `url` (a reverse proxy of the service's own; [proxy.md](proxy.md)). Loopback unless `[proxy] api_keys` are set.)"},
    {"max_concurrent",
        +[](ConfigParser& p, const toml::node& n, const std::string& f, Svc& svc) {
          if (auto v = p.whole_value(n, f, 1)) svc.proxy.max_concurrent = static_cast<int>(*v);
        },
        nullptr,
        R"(integer ≥ 1)", R"(no limit)",
        R"(Requests through vramd's proxies in flight at most; more wait in order.)"},
    {"max_queue",
        +[](ConfigParser& p, const toml::node& n, const std::string& f, Svc& svc) {
          if (auto v = p.whole_value(n, f, 0)) svc.proxy.max_queue = static_cast<int>(*v);
        },
        +[](const Svc& svc) { return toml_text(svc.proxy.max_queue); },
        R"(integer ≥ 0)", R"()",
        R"(Requests waiting for `max_concurrent`; the next gets 429.)"},
    {"max_connections",
        +[](ConfigParser& p, const toml::node& n, const std::string& f, Svc& svc) {
          if (auto v = p.whole_value(n, f, 1)) svc.proxy.max_connections = static_cast<int>(*v);
        },
        nullptr,
        R"(integer ≥ 1)", R"(by kind)",
        R"(Connections vramd's proxies keep to the service at most, idle ones included; more requests wait in vramd's queue, not in the server's. Default: `llamacpp` its HTTP threads less one (max(`total_slots` + 2, CPUs − 1), `total_slots` from `/props`; one left for vramd's probes and other clients), other kinds no limit ([proxy.md](proxy.md#upstream-connections)).)"},
    {"keep_alive_timeout",
        +[](ConfigParser& p, const toml::node& n, const std::string& f, Svc& svc) {
          if (auto d = p.positive_duration(n, f)) svc.proxy.keep_alive_timeout = *d;
        },
        nullptr,
        R"(duration)", R"(by kind)",
        R"(How long the service keeps an idle connection open (its own keep-alive timeout); vramd closes its idle connections to it before that, and a shorter `Keep-Alive: timeout=N` from the service wins. Default: 5 s (llama.cpp, vLLM, SGLang and uvicorn's), `a1111` 30 s, `localai` 120 s, `comfyui` 3630 s, `ollama` none.)"},
    {"first_byte_timeout",
        +[](ConfigParser& p, const toml::node& n, const std::string& f, Svc& svc) {
          if (auto d = p.positive_duration(n, f)) svc.proxy.first_byte_timeout = *d;
        },
        +[](const Svc& svc) { return toml_text(svc.proxy.first_byte_timeout); },
        R"(duration)", R"()",
        R"(How long the proxy waits for the service's answer to begin, and the longest gap within its body (then 504).)"},
    {"wake_timeout",
        +[](ConfigParser& p, const toml::node& n, const std::string& f, Svc& svc) {
          if (auto d = p.positive_duration(n, f)) svc.proxy.wake_timeout = *d;
        },
        nullptr,
        R"(duration)", R"(`start_timeout`)",
        R"(How long the proxy holds a request while the service wakes (then 503 with `Retry-After`).)"},
};

// @section match
const std::vector<Key<MatchRule>> kMatchKeys = {
    {"cmdline",
        +[](ConfigParser& p, const toml::node& n, const std::string& f, MatchRule& out) {
          if (auto s = p.regex_value(n, f, "invalid regular expression")) out.cmdline = *s;
        },
        nullptr,
        R"(string)", R"(none)",
        R"(ECMAScript regular expression searched in the process's command line, arguments joined by spaces: `"main\\.py.*--port 8188"` (in a TOML basic string, `\\` is one backslash). It must compile.)"},
    {"container", nonempty<&MatchRule::container>, nullptr,
        R"(string)", R"(none)",
        R"(Docker container name or id prefix. vramd also **manages** it (below).)"},
    {"compose_service", nonempty<&MatchRule::compose_service>, nullptr,
        R"(string)", R"(none)",
        R"(Docker Compose service name (the `com.docker.compose.service` label).)"},
    {"unit", nonempty<&MatchRule::unit>, nullptr,
        R"(string)", R"(none)",
        R"(systemd unit, `"comfyui.service"`: the processes in its cgroup, and the tree of its `MainPID`. vramd also **manages** it (below).)"},
    {"pid_file", nonempty<&MatchRule::pid_file>, nullptr,
        R"(string)", R"(none)",
        R"(File holding the main process id; its process tree is the service.)"},
};

// ---- [proxy] ----

// @section proxy
const std::vector<Key<ProxyConfig>> kProxyKeys = {
    {"listen",
        +[](ConfigParser& p, const toml::node& n, const std::string& f, ProxyConfig& out) {
          p.proxy_listen(n, f, out.listen);
        },
        shown<&ProxyConfig::listen>,
        R"(`host:port`)", R"()",
        R"(The front door's address. Beyond loopback it needs `api_keys` or `api_keys_file` (a config error says so otherwise).)"},
    {"api_keys",
        +[](ConfigParser& p, const toml::node& n, const std::string& f, ProxyConfig& out) {
          p.api_keys(n, f, out.api_keys);
        },
        nullptr,
        R"(array of strings)", R"(none)",
        R"(Keys every proxied request must carry as `Authorization: Bearer KEY` (compared in constant time, never forwarded).)"},
    {"api_keys_file", nonempty<&ProxyConfig::api_keys_file>, shown<&ProxyConfig::api_keys_file>,
        R"(string)", R"()",
        R"(A file of keys, one a line (`#` comments).)"},
    {"websocket_idle", positive<&ProxyConfig::websocket_idle>,
        shown<&ProxyConfig::websocket_idle>,
        R"(duration)", R"()",
        R"(An open WebSocket keeps its service busy only while messages flowed within this.)"},
    {"aliases",
        +[](ConfigParser& p, const toml::node& n, const std::string& f, ProxyConfig& out) {
          const toml::table* at = p.table_or_error(n, f);
          if (!at) return;
          for (auto&& [alias, target] : *at)
            if (auto s = p.string_value(target, f + "." + std::string(alias.str()), false))
              out.aliases[std::string(alias.str())] = *s;
        },
        nullptr,
        R"(table of strings, `[proxy.aliases]`)", R"(none)",
        R"(Other names for served models: `"gpt-4o-mini" = "llama3.1:8b"`.)"},
};

// ---- [[crash_rules]] ----

void rule_regex_pattern(ConfigParser& p, const toml::node& n, const std::string& f,
                        CrashRuleConfig& r) {
  if (auto s = p.regex_value(n, f, "not a valid regular expression")) r.pattern = *s;
}

// @section crash_rules
const std::vector<Key<CrashRuleConfig>> kCrashRuleKeys = {
    {"pattern", rule_regex_pattern, nullptr,
        R"(string, *required*)", R"()",
        R"(ECMAScript regular expression searched in each line of the log's last 200 lines.)"},
    {"title", nonempty<&CrashRuleConfig::title>, nullptr,
        R"(string, *required*)", R"()",
        R"(Short name shown by `vramd doctor`. `{0}`..`{9}` are the pattern's groups.)"},
    {"requires",
        +[](ConfigParser& p, const toml::node& n, const std::string& f, CrashRuleConfig& r) {
          if (auto s = p.regex_value(n, f, "not a valid regular expression"))
            r.requires_pattern = *s;
        },
        nullptr,
        R"(string)", R"(none)",
        R"(A regular expression that must also match somewhere in the log since the start (e.g. a boot message).)"},
    {"explanation", nonempty<&CrashRuleConfig::explanation>, nullptr,
        R"(string)", R"(none)",
        R"(Why it happens. `{holders}` names who held GPU memory at the crash.)"},
    {"suggestion", nonempty<&CrashRuleConfig::suggestion>, nullptr,
        R"(string)", R"(none)",
        R"(What to change.)"},
    {"signature", nonempty<&CrashRuleConfig::signature>, nullptr,
        R"(string)", R"(the title in lower case with dashes)",
        R"(Stable id for grouping.)"},
};

// ---- the tables, read ----

Result<Config> ConfigParser::parse(std::string_view text) {
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
    } else if (k == "proxy") {
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
  check_proxy_listens(config);
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

const toml::node* seen_node(const Seen& seen, std::string_view key) {
  auto it = seen.find(key);
  return it == seen.end() ? nullptr : it->second;
}

// Of two keys that may not both be set, the one written later.
const toml::node* later_of(const toml::node* a, const toml::node* b) {
  return a->source().begin.line > b->source().begin.line ? a : b;
}

void ConfigParser::parse_daemon(const toml::table& t, DaemonConfig& out) {
  Seen seen;
  read_keys(t, "[daemon]", "daemon.", kDaemonKeys, out, seen);
  const toml::node* listen = seen_node(seen, "listen");
  const toml::node* token = seen_node(seen, "token");
  const toml::node* token_file = seen_node(seen, "token_file");
  const toml::node* store = seen_node(seen, "store");
  const toml::node* store_url_file = seen_node(seen, "store_url_file");
  const toml::node* quiet = seen_node(seen, "quiet_probe_interval");
  bool quiet_set = quiet && quiet->is_string() && parse_duration(quiet->as_string()->get());
  if (quiet_set && out.quiet_probe_interval < out.probe_interval)
    error(quiet->source().begin,
          fmt::format("daemon.quiet_probe_interval: must be at least probe_interval ({}), got {}",
                      format_duration(out.probe_interval), describe(*quiet)));
  if (!quiet_set) out.quiet_probe_interval = std::max(out.quiet_probe_interval, out.probe_interval);
  if (store && store_url_file)
    error(later_of(store, store_url_file)->source().begin,
          "daemon: set store or store_url_file, not both");
  if (token && token_file)
    error(later_of(token, token_file)->source().begin, "daemon: set token or token_file, not both");
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

void ConfigParser::parse_crash_rules(const toml::node& node, Config& config) {
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
    Seen seen;
    read_keys(*t, "[[crash_rules]]", where + ".", kCrashRuleKeys, r, seen);
    if (r.pattern.empty() || r.title.empty()) {
      error(t->source().begin, where + ": needs pattern and title");
      continue;
    }
    if (r.signature.empty()) {  // "Flux #7: OOM!!" -> "flux-7-oom"
      for (char c : r.title) {
        if (std::isalnum(static_cast<unsigned char>(c)))
          r.signature += static_cast<char>(std::tolower(c));
        else if (!r.signature.empty() && r.signature.back() != '-')
          r.signature += '-';
      }
      while (!r.signature.empty() && r.signature.back() == '-') r.signature.pop_back();
    }
    config.crash_rules.push_back(std::move(r));
  }
}

void ConfigParser::parse_gpu(const toml::table& t, GpuConfig& out) {
  Seen seen;
  read_keys(t, "[gpu]", "gpu.", kGpuKeys, out, seen);
}

void ConfigParser::parse_host(const toml::table& t, HostConfig& out) {
  Seen seen;
  read_keys(t, "[host]", "host.", kHostKeys, out, seen);
}

void ConfigParser::parse_services(const toml::table& t, Config& config) {
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

void ConfigParser::parse_service(const toml::table& t, ServiceConfig& svc) {
  const std::string where = "[services." + svc.name + "]";
  Seen seen;
  // A misspelt key is not also reported missing.
  std::vector<std::string> suggested =
      read_keys(t, where, "services." + svc.name + ".", kServiceKeys, svc, seen);
  check_api_keys(svc, where, seen);
  auto was_suggested = [&](std::string_view k) {
    return std::find(suggested.begin(), suggested.end(), k) != suggested.end();
  };
  if (!seen.count("kind") && !was_suggested("kind")) {
    error(t.source().begin, where + ": missing required key 'kind' (one of " +
                                join(known_service_kinds(), " or ") + ")");
  }
  const ServiceKind* kind = find_service_kind(svc.kind);
  if (!seen.count("url") && !was_suggested("url") && kind && kind->needs_url) {
    error(t.source().begin, where + ": missing required key 'url' (kind \"" + svc.kind +
                                "\" is reached over HTTP)");
  }
}

// An address the proxy listens on: host:port, remembered for the loopback check at the end.
void ConfigParser::proxy_listen(const toml::node& node, const std::string& field,
                                std::string& out) {
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

void ConfigParser::api_keys(const toml::node& node, const std::string& field,
                            std::vector<std::string>& out) {
  const toml::array* a = node.as_array();
  if (!a) {
    wrong_type(node, field, "an array of keys");
    return;
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
      out.push_back(item.as_string()->get());
    }
  }
}

void ConfigParser::parse_proxy(const toml::table& t, ProxyConfig& out) {
  Seen seen;
  read_keys(t, "[proxy]", "proxy.", kProxyKeys, out, seen);
}

// Beyond loopback, anyone on the network could use the GPU's services without a key.
void ConfigParser::check_proxy_listens(const Config& config) {
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

// An absolute URL, or a path relative to the service's `url`.
void ConfigParser::url_or_path(const toml::node& node, const std::string& field,
                               std::string& out) {
  std::optional<std::string> s = string_value(node, field, /*allow_empty=*/false);
  if (!s) return;
  if (s->find("://") != std::string::npos) {
    Result<HttpUrl> u = parse_http_url(s->substr(0, s->find('?')));
    if (!u) {
      error(node.source().begin, field + ": " + u.error() + " (got \"" + *s + "\")");
      return;
    }
  } else if (s->front() != '/') {
    error(node.source().begin,
          field + ": expected an absolute URL or a path starting with '/' (got \"" + *s + "\")");
    return;
  }
  out = *s;
}

void ConfigParser::check_api_keys(const ServiceConfig& svc, const std::string& where,
                                  const Seen& set) {
  auto at_key = [&](std::string_view k) { return seen_node(set, k)->source().begin; };
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
        if (set.count(key) && !(own && reads(*own, key)))
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

// An inline table with exactly one of kMatchKeys.
void ConfigParser::parse_match(const toml::node& n, const std::string& field, MatchRule& out) {
  static const std::vector<std::string> known = names_of(kMatchKeys);
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
    std::string_view k = key->str();
    auto row = std::find_if(kMatchKeys.begin(), kMatchKeys.end(),
                            [&](const Key<MatchRule>& r) { return r.name == k; });
    if (row == kMatchKeys.end()) {
      unknown_key(*key, field, known);
      continue;
    }
    if (first) {
      error(key->source().begin, fmt::format("{}: set only one of {}; got both '{}' and '{}'",
                                             field, join(known, " or "), first->str(), k));
      continue;
    }
    first = key;
    row->set(*this, *node, fmt::format("{}.{}", field, k), out);
  }
  if (items.empty()) {
    error(n.source().begin,
          field + ": set exactly one of " + join(known, " or ") + ", or leave match out");
  }
}

void ConfigParser::parse_start(const toml::node& n, const std::string& field,
                               std::vector<std::string>& out) {
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

void ConfigParser::parse_env(const toml::node& n, const std::string& field,
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

// The rows as the reference shows them: the default from a default-constructed struct.
template <class T>
void add_docs(std::vector<ConfigKeyDoc>& out, std::string_view table,
              const std::vector<Key<T>>& keys) {
  const T defaults{};
  for (const Key<T>& k : keys) {
    std::string fallback(k.fallback), value;
    if (k.show) {
      value = k.show(defaults);
      fallback = value.empty() ? "none" : "`" + value + "`";
    }
    out.push_back({std::string(table), std::string(k.name), std::string(k.type), fallback,
                   std::string(k.meaning), value});
  }
}

}  // namespace

std::vector<ConfigKeyDoc> config_key_docs() {
  std::vector<ConfigKeyDoc> out;
  add_docs(out, "daemon", kDaemonKeys);
  add_docs(out, "gpu", kGpuKeys);
  add_docs(out, "host", kHostKeys);
  add_docs(out, "services.NAME", kServiceKeys);
  add_docs(out, "match", kMatchKeys);
  add_docs(out, "proxy", kProxyKeys);
  add_docs(out, "crash_rules", kCrashRuleKeys);
  return out;
}

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
