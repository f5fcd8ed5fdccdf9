// vramd: the daemon and its CLI.
#include <CLI/CLI.hpp>
#include <iostream>

#include "cli/commands.h"

int main(int argc, char** argv) {
  vramd::maybe_run_demo_stand_in();

  CLI::App app{"vramd: names, frees and admits GPU memory on a shared GPU host", "vramd"};
  app.require_subcommand(1);
  app.set_version_flag("--version", VRAMD_VERSION_STRING);
  vramd::CommonOptions common;
  auto add_common = [&](CLI::App* sub) {
    sub->add_option("--config", common.config_path, "config file (default /etc/vramd/vramd.toml)");
    sub->add_option("--url", common.url,
                    "daemon address: http://HOST:PORT or unix:PATH (default $VRAMD_URL, else from the config)");
  };

  auto* serve = app.add_subcommand("serve", "run the daemon");
  add_common(serve);

  bool json = false;
  auto* status = app.add_subcommand("status", "who holds the memory of each GPU");
  add_common(status);
  status->add_flag("--json", json, "print the API's JSON");

  auto* services = app.add_subcommand("services", "configured services: state, busy, idle, memory, last unload");
  add_common(services);
  services->add_flag("--json", json, "print the API's JSON");

  std::string free_name;
  bool free_idle = false, free_force = false;
  auto* free_cmd = app.add_subcommand(
      "free", "unload a service through its own API and report what the GPU got back");
  add_common(free_cmd);
  free_cmd->add_option("service", free_name, "the service to unload");
  free_cmd->add_flag("--idle", free_idle, "unload every idle service that holds GPU memory");
  free_cmd->add_flag("--force", free_force, "unload even if busy or inside the unload backoff");
  free_cmd->add_flag("--json", json, "print the API's JSON");

  bool follow = false;  // (json flag is shared)
  std::string since;
  auto* events = app.add_subcommand("events", "what happened: unloads, GPUs lost, owners come and gone");
  add_common(events);
  events->add_flag("-f,--follow", follow, "keep printing new events");
  events->add_option("--since", since, "how far back: a duration (\"1h\") or an RFC 3339 time");
  events->add_flag("--json", json, "one JSON object per line");

  vramd::DemoOptions demo_opts;
  auto* demo = app.add_subcommand(
      "demo", "run the daemon on a simulated 24 GiB GPU with stand-in services (no GPU needed)");
  demo->add_option("--listen", demo_opts.listen, "address for the API and dashboard");
  demo->add_option("--duration", demo_opts.duration_s, "seconds to run (default: until Ctrl-C)")
      ->check(CLI::NonNegativeNumber);

  auto* version = app.add_subcommand("version", "print the version");

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return vramd::kExitUsage;
  }

  if (*serve) return vramd::cmd_serve(common);
  if (*status) return vramd::cmd_status(common, json);
  if (*demo) return vramd::cmd_demo(demo_opts);
  if (*services) return vramd::cmd_services(common, json);
  if (*free_cmd) return vramd::cmd_free(common, free_name, free_idle, free_force, json);
  if (*events) return vramd::cmd_events(common, follow, since, json);
  if (*version) {
    std::cout << "vramd " << VRAMD_VERSION_STRING << "\n";
    return 0;
  }
  return vramd::kExitUsage;
}
