// vramd: the daemon and its CLI.
#include <CLI/CLI.hpp>
#include <cstdlib>
#include <functional>
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
    sub->add_option(
        "--url", common.url,
        "daemon address: http://HOST:PORT or unix:PATH (default $VRAMD_URL, else from the config)");
  };

  auto* serve = app.add_subcommand("serve", "run the daemon");
  add_common(serve);

  bool json = false;
  vramd::StatusOptions status_opts;
  auto* status = app.add_subcommand("status", "who holds the memory of each GPU");
  add_common(status);
  status->add_flag("--json", json, "print the API's JSON (with --watch: one object per line)");
  auto* watch = status->add_flag(
      "-w,--watch", status_opts.watch,
      "refresh until Ctrl-C, like watch(1); keeps trying while the daemon is away");
  status
      ->add_option("-n,--interval", status_opts.interval_s, "seconds between refreshes (default 2)")
      ->check([](const std::string& s) -> std::string {
        char* end = nullptr;
        double v = std::strtod(s.c_str(), &end);
        if (end == s.c_str() || *end) return "expected seconds, e.g. 2 or 0.5, got '" + s + "'";
        return v >= 0.1 && v <= 86400 ? "" : "between 0.1 and 86400 seconds, got " + s;
      })
      ->needs(watch);
  status->add_option("--count", status_opts.count, "stop after this many refreshes (like top -n)")
      ->check(CLI::PositiveNumber)
      ->needs(watch);
  status
      ->add_flag("--all-hosts", status_opts.all_hosts,
                 "every host's last status, from the shared PostgreSQL store (GET /v1/hosts)")
      ->excludes(watch);

  auto* services =
      app.add_subcommand("services", "configured services: state, busy, idle, memory, last unload");
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
  auto* events =
      app.add_subcommand("events", "what happened: unloads, GPUs lost, owners come and gone");
  add_common(events);
  events->add_flag("-f,--follow", follow, "keep printing new events");
  events->add_option("--since", since, "how far back: a duration (\"1h\") or an RFC 3339 time");
  events->add_flag("--json", json, "one JSON object per line");

  vramd::RunOptions run_opts;
  auto* run = app.add_subcommand("run",
                                 "wait until the GPU memory a command needs is free, then run it: "
                                 "vramd run --vram 12GiB -- CMD ARGS...");
  add_common(run);
  run->add_option("--vram", run_opts.vram, "GPU memory the command needs: 12GiB, 800MiB")
      ->required();
  run->add_option("--gpu", run_opts.gpu,
                  "GPU index, or any (default: where it fits at the least cost)");
  run->add_option("--ram", run_opts.ram,
                  "host RAM the command needs, checked against MemAvailable");
  run->add_option("--priority", run_opts.priority, "higher goes first (default 0)");
  run->add_option("--label", run_opts.label, "name in job history (default: the program's name)");
  run->add_option("--timeout", run_opts.timeout,
                  "give up when not granted within this long: 30m, 1h");
  run->add_option("--host", run_opts.host,
                  "the host it must run on, or any (hosts on one PostgreSQL store; default any); "
                  "granted on another host, it is printed, not run here");
  run->add_option("--on-host-lost", run_opts.on_host_lost,
                  "when the granting host is lost: requeue (default) or end");
  run->add_option("--on-lease-lost", run_opts.on_lease_lost,
                  "when this host gives the lease up (cut off from a shared store): stop the "
                  "command (default with requeue) or keep it running (default with end; the "
                  "lease then ends rather than being re-queued)");
  run->add_option("--stop-timeout", run_opts.stop_timeout,
                  "after SIGTERM, how long a stopped command has before SIGKILL (default 10s)");
  run->add_flag("--preemptible", run_opts.preemptible,
                "the command may be suspended (its GPU memory moved to host RAM with NVIDIA's "
                "cuda-checkpoint) for work of higher priority, and resumed on the same GPU");
  run->add_flag("--detach", run_opts.detach, "wait and run in the background; print the lease id");
  run->add_flag("--no-cuda-env", run_opts.no_cuda_env,
                "do not set CUDA_VISIBLE_DEVICES to the granted GPU");
  run->add_option("command", run_opts.command, "the command and its arguments, after --")
      ->required();
  auto* leases = app.add_subcommand("leases", "leases granted and queued, with why each one waits");
  add_common(leases);
  leases->add_flag("--json", json, "print the API's JSON");
  bool leases_all_hosts = false;
  std::string leases_host;
  auto* leases_all = leases->add_flag(
      "--all-hosts", leases_all_hosts,
      "every host's leases, from the shared PostgreSQL store (GET /v1/leases?host=all)");
  leases->add_option("--host", leases_host, "the leases of this host (hosts on one PostgreSQL store)")
      ->excludes(leases_all);
  std::vector<std::string> jobs_args;
  size_t jobs_limit = 20;
  auto* jobs = app.add_subcommand(
      "jobs", "finished jobs: wait, run time, peak memory; 'jobs stats LABEL' for percentiles");
  add_common(jobs);
  jobs->add_option("stats", jobs_args, "stats LABEL");
  jobs->add_option("-n,--limit", jobs_limit, "how many jobs to list (default 20)")
      ->check(CLI::PositiveNumber);
  jobs->add_flag("--json", json, "print the API's JSON");
  std::string life_name;
  bool life_wait = false, life_force = false;
  std::vector<std::pair<std::string, CLI::App*>> life_cmds;
  for (const char* action : {"start", "stop", "restart"}) {
    auto* c = app.add_subcommand(
        action, std::string(action) + " a service vramd runs (or its container or unit)");
    add_common(c);
    c->add_option("service", life_name, "the service")->required();
    c->add_flag("--wait", life_wait,
                action == std::string("stop") ? "until it stopped and its GPU memory is gone"
                                              : "until it answers its health check");
    if (action == std::string("start"))
      c->add_flag("--force", life_force,
                  "start now, without waiting for GPU room for its vram_estimate (it may not fit)");
    life_cmds.emplace_back(action, c);
  }
  std::string logs_name;
  bool logs_follow = false;
  size_t logs_lines = 50;
  auto* logs = app.add_subcommand("logs", "the output of a service vramd runs");
  add_common(logs);
  logs->add_option("service", logs_name, "the service")->required();
  logs->add_flag("-f,--follow", logs_follow, "keep printing new lines");
  logs->add_option("-n,--lines", logs_lines, "how many lines (default 50)")
      ->check(CLI::PositiveNumber);
  vramd::HistoryOptions history_opts;
  auto* history = app.add_subcommand(
      "history", "durations by version or arguments: did the update, or the new flag, help?");
  add_common(history);
  history->add_option("service", history_opts.service, "the service")->required();
  history->add_option("--by", history_opts.by, "compare medians by: version | args")
      ->check(CLI::IsMember({"version", "args"}));
  history->add_option("--workflow", history_opts.workflow, "only this workflow (fingerprint)");
  history->add_option("--model", history_opts.model, "only this model");
  history->add_option("--since", history_opts.since, "only since: RFC 3339, or back from now (7d)");
  history->add_option("-n,--limit", history_opts.limit, "how many records to list (default 20)")
      ->check(CLI::Range(1, 100000));
  history->add_flag("--json", json, "print the API's JSON");
  std::string doctor_name;
  auto* doctor =
      app.add_subcommand("doctor", "why services crashed: signatures, evidence, suggested fixes");
  add_common(doctor);
  doctor->add_option("service", doctor_name, "only this service");
  doctor->add_flag("--json", json, "print the API's JSON");
  vramd::DemoOptions demo_opts;
  auto* demo = app.add_subcommand(
      "demo", "run the daemon on a simulated 24 GiB GPU with stand-in services (no GPU needed)");
  demo->add_option("--listen", demo_opts.listen, "address for the API and dashboard");
  demo->add_option("--duration", demo_opts.duration_s, "seconds to run (default: until Ctrl-C)")
      ->check(CLI::NonNegativeNumber);

  std::string discover_write;
  int discover_timeout_ms = 500;
  auto* discover = app.add_subcommand(
      "discover", "find the model servers holding GPU memory (no config needed); --write a config");
  add_common(discover);
  discover->add_flag("--json", json, "print JSON");
  discover->add_option("--write", discover_write, "write what was found as a config file");
  discover->add_option("--timeout-ms", discover_timeout_ms, "per HTTP request (default 500)")
      ->check(CLI::Range(10, 10000));

  vramd::SimOptions sim_opts;
  auto* sim = app.add_subcommand(
      "sim", "replay a trace through vramd's policy and the field's baselines, side by side");
  sim->add_option("trace", sim_opts.trace, "the trace: JSON lines (docs/sim.md)");
  sim->add_option("--policy", sim_opts.policies,
                  "never, ttl:300s, free-at-end, ollama, localai[:max=N], llama-swap[:ttl=D], "
                  "vramd; repeat for several (default: all)");
  sim->add_option("--config", sim_opts.config_path, "vramd.toml for the vramd policy");
  sim->add_flag("--json", sim_opts.json, "print JSON");
  sim->add_flag("--markdown", sim_opts.markdown, "print the table as markdown");
  sim->add_option("--plot", sim_opts.plot, "write an SVG timeline of memory by owner here");
  auto* gen = sim->add_option("--generate", sim_opts.generate,
                              "print a seeded trace instead: homelab, agent, lab or stress");
  sim->add_option("--seed", sim_opts.seed, "seed for --generate (default 1)")->needs(gen);

  auto* version = app.add_subcommand("version", "print the version");

  // An unknown first word: CLI11 would only say "A subcommand is required", not which word.
  if (argc > 1 && argv[1][0] != '-') {
    const std::string word = argv[1];
    std::function<bool(CLI::App*)> named = [&](CLI::App* sub) { return sub->check_name(word); };
    if (app.get_subcommands(named).empty()) {
      std::cerr << "vramd: unknown command '" << word << "'\nRun with --help for the commands.\n";
      return vramd::kExitUsage;
    }
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return vramd::kExitUsage;
  }

  if (*serve) return vramd::cmd_serve(common);
  if (*status) {
    status_opts.json = json;
    return vramd::cmd_status(common, status_opts);
  }
  if (*demo) return vramd::cmd_demo(demo_opts);
  if (*sim) return vramd::cmd_sim(sim_opts);
  if (*services) return vramd::cmd_services(common, json);
  if (*free_cmd) return vramd::cmd_free(common, free_name, free_idle, free_force, json);
  if (*events) return vramd::cmd_events(common, follow, since, json);
  if (*run) return vramd::cmd_run(common, run_opts);
  for (const auto& [action, c] : life_cmds)
    if (*c) return vramd::cmd_lifecycle(common, action, life_name, life_wait, life_force);
  if (*logs) return vramd::cmd_logs(common, logs_name, logs_follow, logs_lines);
  if (*doctor) return vramd::cmd_doctor(common, doctor_name, json);
  if (*history) return vramd::cmd_history(common, history_opts, json);
  if (*leases) return vramd::cmd_leases(common, json, leases_all_hosts ? "all" : leases_host);
  if (*discover) return vramd::cmd_discover(common, json, discover_write, discover_timeout_ms);
  if (*jobs) {
    if (jobs_args.empty()) return vramd::cmd_jobs(common, "", jobs_limit, json);
    if (jobs_args.size() != 2 || jobs_args[0] != "stats") {
      std::cerr << "vramd jobs: expected 'vramd jobs' or 'vramd jobs stats LABEL'\n";
      return vramd::kExitUsage;
    }
    return vramd::cmd_jobs(common, jobs_args[1], jobs_limit, json);
  }
  if (*version) {
    std::cout << "vramd " << VRAMD_VERSION_STRING << "\n";
    return 0;
  }
  return vramd::kExitUsage;
}
