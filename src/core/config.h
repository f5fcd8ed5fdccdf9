// vramd.toml as structs. Parsing checks every key and value; errors carry file:line:column.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/policies.h"
#include "core/result.h"
#include "core/units.h"

namespace vramd {

// How to recognise a service's processes. At most one field is set; none set means "the local
// process listening on the port of `url`".
struct MatchRule {
  std::string cmdline;          // ECMAScript regex searched in the space-joined command line
  std::string container;        // container name (or id prefix)
  std::string compose_service;  // docker compose service label
  std::string unit;             // systemd unit, "comfyui.service"
  std::string pid_file;         // file holding the main PID
  bool empty() const {
    return cmdline.empty() && container.empty() && compose_service.empty() && unit.empty() &&
           pid_file.empty();
  }
};

// ---- proxy (issue 12, docs/proxy.md): begin ----
// A service's own reverse proxy and its limits in the request path.
struct ServiceProxyConfig {
  std::string listen;  // `proxy = "127.0.0.1:8189"`; empty: no proxy of its own
  int max_concurrent = 0;  // 0: no limit
  int max_queue = 64;      // requests waiting beyond max_concurrent before 429
  // Connections to the service at most (idle kept-alive ones included); 0: the kind's default
  // (llama-server: its HTTP threads less one; the others: no limit).
  int max_connections = 0;
  std::optional<Duration> keep_alive_timeout;  // the service's own; nullopt: the kind's
  Duration first_byte_timeout = std::chrono::minutes(5);
  std::optional<Duration> wake_timeout;  // nullopt: start_timeout
};
// [proxy]: the OpenAI-compatible front door and what every proxy shares.
struct ProxyConfig {
  std::string listen;  // empty: no front door
  std::vector<std::string> api_keys;
  std::string api_keys_file;  // one key a line, read at start
  std::map<std::string, std::string> aliases;  // [proxy.aliases] "gpt-4o-mini" = "llama3.1:8b"
  Duration websocket_idle = std::chrono::seconds(10);
  bool has_keys() const { return !api_keys.empty() || !api_keys_file.empty(); }
};
// ---- proxy: end ----

// What becomes of a service vramd runs when vramd stops: left running (adopted again at the
// next start) or stopped with it (SIGTERM to its process group).
enum class OnShutdown { leave, stop };

struct ServiceConfig {
  std::string name;  // the key in [services.NAME]: [A-Za-z0-9_-]+
  std::string kind;  // adapter: one of known_service_kinds()
  std::string url;   // base URL without a trailing '/', "http://127.0.0.1:8188"; may be empty
                     // only for kind "process"
  MatchRule match;
  std::optional<Duration> unload_after_idle;
  IneffectiveUnload on_ineffective_unload = IneffectiveUnload::report;
  std::string group;                             // exclusive group
  bool pinned = false;
  // Woken before it is asked, when its GPU has room nobody wants and it is likely asked soon
  // (docs/proxy.md "Prewarm"). nullopt: [daemon] prewarm.
  std::optional<bool> prewarm;
  // Idle at least this long before vramd unloads it to make room for a lease.
  Duration min_idle = std::chrono::seconds(30);
  std::vector<std::string> start;  // argv, no shell
  std::string cwd;
  std::map<std::string, std::string> env;
  std::string env_file;  // KEY=VALUE lines added to env (env wins)
  std::string user;      // run `start` as this user (vramd running as root)
  Duration start_timeout = std::chrono::minutes(2);
  Duration stop_timeout = std::chrono::seconds(20);   // SIGTERM, then SIGKILL after this
  Duration health_interval = std::chrono::seconds(5);
  int health_failures = 5;
  RestartPolicy restart = RestartPolicy::on_failure;
  int max_restarts = 5;                // more than this within restart_window -> failed
  Duration restart_window = std::chrono::minutes(10);
  bool reclaim_port = false;  // end a stray process of the same user on the port before a start
  OnShutdown on_shutdown = OnShutdown::leave;  // what becomes of it when vramd stops
  std::optional<Bytes> vram_estimate;

  // How vramd talks to the service's API (docs/adapters.md).
  std::string api_key;      // sent as "Authorization: Bearer"; never logged or shown in errors
  std::string api_key_env;  // name of an environment variable holding the key (read by adapters)
  Duration probe_timeout = std::chrono::seconds(5);  // one probe, all its calls together
  Duration connect_timeout = std::chrono::seconds(2);
  std::optional<Duration> unload_timeout;  // nullopt: the adapter's default (20s; comfyui 30s)
  Duration unload_backoff = std::chrono::minutes(10);
  // vllm, comfyui: fixes the depth of every unload (1: sleep1, 2: sleep2); unset, the core
  // chooses by the host RAM free (core/wake.h choose_depth).
  std::optional<int> sleep_level;
  std::optional<bool> router;          // llamacpp: nullopt = detect with GET /models
  std::vector<std::string> models;     // models to unload/reload; empty: what the probe lists
  // generic_http: URLs are absolute or paths relative to `url`.
  std::string busy_url;
  std::string busy_json_pointer;  // RFC 6901 into busy_url's JSON; truthy or > 0 = busy
  std::string busy_metric;        // Prometheus metric at busy_url; sum > 0 = busy
  std::string unload_method = "POST";  // POST | DELETE | PUT
  std::string unload_url;
  std::string unload_body;
  std::string health_url;
  ServiceProxyConfig proxy;  // proxy (issue 12)
  // Found at run time by `[daemon] discover` (never in a file): shown as such, and left alone
  // (never unloaded, evicted, stopped or started) unless `discover_unload`.
  bool discovered = false;
  std::string discovered_by;  // the fingerprint's evidence: "GET /system_stats: system and devices"
};

struct DaemonConfig {
  std::string listen = "127.0.0.1:7100";
  std::string state_dir = "/var/lib/vramd";
  Duration sample_interval = std::chrono::seconds(1);
  std::string token;
  std::string token_file;
  // The container engine's API socket (Docker, or Podman's Docker-compatible one). Empty in the
  // file: the shell finds one (daemon/config_file.cc: find_engine_socket).
  std::string docker_socket = "/var/run/docker.sock";
  bool docker_socket_given = false;  // set in the file (else the shell may look for Podman's)
  // Units (match.unit): the tools, by path or looked up in PATH; `systemd_user`: the user's
  // manager (`systemctl --user`, `journalctl --user`) instead of the system's.
  std::string systemctl = "systemctl";
  std::string journalctl = "journalctl";
  bool systemd_user = false;
  Duration probe_interval = std::chrono::seconds(2);  // how often each service is probed
  // ... while its answers repeat and nothing about it moves (core/probe_pacing.h); at least
  // probe_interval (equal: no backing off). Unset, 10 s or probe_interval if that is longer.
  Duration quiet_probe_interval = std::chrono::seconds(10);
  std::int64_t events_retention = 10000;              // events kept in the store
  // The durations history (docs/history.md): prompts' and proxied requests' times, kept this
  // long; off, nothing is recorded.
  bool history = true;
  Duration history_retention = std::chrono::hours(24 * 90);
  // A lease without a holder pid ends when no request about it came for this long.
  Duration lease_heartbeat = std::chrono::seconds(30);
  // Finds GPU services at run time (`vramd discover`'s scan) and adds them as `discovered`.
  // nullopt: on when the config names no service.
  std::optional<bool> discover;
  bool discover_unload = false;  // discovered services may be unloaded, evicted, stopped
  bool prewarm = false;  // every service's `prewarm` where it does not say (docs/proxy.md)
  Duration discover_interval = std::chrono::seconds(15);
  bool discovers(bool has_services) const { return discover.value_or(!has_services); }
  // Several hosts (issue 17): the store, this host's name, when another host counts as lost.
  std::string store;           // empty: SQLite in state_dir; else a postgresql:// URL
  std::string store_url_file;  // a file whose first line is that URL (it may hold a password)
  std::string host;            // empty: the machine's hostname (the daemon reads it)
  Duration host_timeout = std::chrono::seconds(30);
};

// daemon.sample_interval may not be shorter than this.
constexpr Duration kMinSampleInterval = std::chrono::milliseconds(100);

struct GpuConfig {
  std::string backend = "auto";   // auto | nvml | nvidia-smi
  std::optional<Bytes> baseline;  // nullopt: "auto" (learned)
  Bytes residual_tolerance = 256 * MiB;
  Bytes reserve = 0;  // kept free on every GPU, never leased
  // The driver's process lists (a global lock each) are read when a GPU's used memory moved by
  // this much since they were last read, when vramd did something that may change them, and
  // at least every process_scan_interval (core/process_scan.h).
  Bytes process_scan_threshold = 32 * MiB;
  Duration process_scan_interval = std::chrono::seconds(10);
  // NVIDIA's cuda-checkpoint, which suspends a process's GPU memory into host RAM (host/
  // cuda_checkpoint.h): a path, or a name looked up in PATH. Without it, suspend is not offered.
  std::string cuda_checkpoint = "cuda-checkpoint";
};

// [host]: the host's RAM as vramd shares it (docs/config.md).
struct HostConfig {
  // Host RAM never promised to a sleeper or a RAM lease: a size, or a share of MemTotal
  // (ram_reserve_pct, 10 by default) when none is given.
  std::optional<Bytes> ram_reserve;
  double ram_reserve_pct = 10;
  Bytes reserve_of(Bytes mem_total) const {
    return ram_reserve ? *ram_reserve : Bytes(double(mem_total) * ram_reserve_pct / 100);
  }
};

// A [[crash_rules]] entry: a regex over a crashed service's log, and what it means.
struct CrashRuleConfig {
  std::string signature;  // defaults to the title, lower-cased with dashes
  std::string title;
  std::string pattern;           // ECMAScript regex searched in each line of the log's tail
  std::string requires_pattern;  // optional: must also match somewhere in the log since start
  std::string explanation;
  std::string suggestion;
};

struct Config {
  std::string path;  // where it was read from; empty for built-in defaults
  DaemonConfig daemon;
  GpuConfig gpu;
  HostConfig host;
  // In file order, then those discovered at run time. A deque: adding one keeps every pointer
  // and reference to the others valid (the shell holds them across awaits).
  std::deque<ServiceConfig> services;
  std::vector<CrashRuleConfig> crash_rules;
  ProxyConfig proxy;  // proxy (issue 12)

  const ServiceConfig* find_service(std::string_view name) const;
};

// Parses TOML text. `path` is used in error messages: "vramd.toml:12:5: unknown key 'urll'
// in [services.comfyui]; did you mean 'url'?". On failure the error lists every mistake found,
// one per line, in file order (a syntax error stops parsing, so it comes alone).
// (The core parses text; reading the file is the shell's: daemon/config_file.h.)
Result<Config> parse_config(std::string_view text, const std::string& path);

// The adapters a service's `kind` may name, in documentation order.
const std::vector<std::string>& known_service_kinds();

// A listen address: "127.0.0.1:7100", "[::1]:7100", "gpu-box:7100". The port is required.
struct HostPort {
  std::string host;  // IPv4, IPv6 (without brackets) or a hostname
  std::uint16_t port = 0;
};
Result<HostPort> parse_host_port(std::string_view text);
// "localhost", an address in 127.0.0.0/8 or ::1 (brackets allowed). Other hostnames are not
// loopback: they may resolve anywhere. A listen address that is not loopback needs a token.
bool is_loopback_host(std::string_view host);

// A service's base URL: "http://host:port[/path]" or https. Without a port, 80 or 443.
struct HttpUrl {
  std::string scheme;  // "http" or "https"
  std::string host;    // as in HostPort
  std::uint16_t port = 0;
  std::string path;  // "" or "/prefix", never ending in '/'
};
Result<HttpUrl> parse_http_url(std::string_view text);

// Closest candidate by edit distance, or empty when nothing is close.
std::string suggest(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace vramd
