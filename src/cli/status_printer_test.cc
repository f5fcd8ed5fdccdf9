#include "cli/status_printer.h"

#include "core/arbiter.h"
#include "core/gpu_select.h"
#include "server/json_view.h"

#include <gtest/gtest.h>

#include <sstream>

namespace vramd {
namespace {

using nlohmann::json;

json service(const std::string& name, const std::string& probe, json process = nullptr) {
  return {{"name", name},           {"kind", "comfyui"},       {"state", probe},
          {"busy", false},          {"idle_since", nullptr},   {"bytes", 2 * GiB},
          {"last_unload", nullptr}, {"models", json::array()}, {"probe_error", nullptr},
          {"process", process}};
}

json process(const std::string& state, const std::string& reason = "") {
  return {{"state", state}, {"reason", reason.empty() ? json(nullptr) : json(reason)}};
}

TEST(ServiceStateText, ServiceVramdDoesNotRunShowsTheProbeStateAlone) {
  EXPECT_EQ(service_state_text(service("ollama", "up")), "up");
  EXPECT_EQ(service_state_text(service("ollama", "unreachable")), "unreachable");
}

TEST(ServiceStateText, ServiceVramdRunsShowsProbeAndProcessWhileItRuns) {
  EXPECT_EQ(service_state_text(service("comfyui", "up", process("running"))), "up · running");
  EXPECT_EQ(service_state_text(service("comfyui", "unloading", process("running"))),
            "unloading · running");
  // Running but not answering is worth both words.
  EXPECT_EQ(service_state_text(service("comfyui", "unreachable", process("running"))),
            "unreachable · running");
  EXPECT_EQ(service_state_text(service("comfyui", "up", process("stopping"))), "up · stopping");
}

TEST(ServiceStateText, ProcessNotRunningShowsTheProcessStateAlone) {
  for (const char* s : {"stopped", "queued", "starting", "backoff", "failed"}) {
    EXPECT_EQ(service_state_text(service("comfyui", "unreachable", process(s))), s);
    EXPECT_EQ(service_state_text(service("comfyui", "unknown", process(s))), s);
  }
}

TEST(PrintServices, StateColumnFitsItsWidestValueAndReasonsFollowTheRow) {
  json body = {{"services",
                {service("comfyui", "unreachable", process("failed", "start timed out after 10m")),
                 service("whisper", "unreachable", process("running")), service("ollama", "up")}}};
  std::ostringstream out;
  print_services(out, body, TimePoint{});
  std::string text = out.str();
  EXPECT_NE(text.find("STATE                 BUSY"), std::string::npos) << text;
  EXPECT_NE(text.find("unreachable · running no"), std::string::npos) << text;
  EXPECT_NE(text.find("failed                no"), std::string::npos) << text;
  EXPECT_NE(text.find("\n    failed: start timed out after 10m\n"), std::string::npos) << text;
}

TEST(PrintServices, ProbeErrorOfAStoppedServiceIsNoise) {
  json stopped = service("comfyui", "unreachable", process("stopped"));
  stopped["probe_error"] = "connect: Connection refused";
  json away = service("ollama", "unreachable");
  away["probe_error"] = "connect: Connection timed out";
  std::ostringstream out;
  print_services(out, json{{"services", {stopped, away}}}, TimePoint{});
  EXPECT_EQ(out.str().find("Connection refused"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("    connect: Connection timed out\n"), std::string::npos) << out.str();
}

TEST(PrintServices, NoServices) {
  std::ostringstream out;
  print_services(out, json{{"services", json::array()}}, TimePoint{});
  EXPECT_EQ(out.str(), "No services configured or discovered yet.\n");
}

TEST(WatchFrame, TerminalClearsTheScreenBeforeEveryFrame) {
  EXPECT_EQ(watch_frame("Every 2s", "table\n", true, true), "\033[H\033[2JEvery 2s\n\ntable\n");
  EXPECT_EQ(watch_frame("Every 2s", "table\n", true, false), "\033[H\033[2JEvery 2s\n\ntable\n");
}

TEST(WatchFrame, PipeSeparatesSnapshotsWithABlankLine) {
  std::string both =
      watch_frame("h1", "t1\n", false, true) + watch_frame("h2", "t2\n", false, false);
  EXPECT_EQ(both, "h1\n\nt1\n\nh2\n\nt2\n");
}

TEST(PrintStatus, MigInstancesUnderTheirCardWithLabelUuidAndProfile) {
  // Through the API's own JSON (server/json_view), as `vramd status` gets it.
  StatusSnapshot st;
  st.sampled = true;
  GpuStatus card;
  card.sample.index = 0;
  card.sample.label = "0";
  card.sample.name = "NVIDIA H200";
  card.sample.mig_enabled = true;
  card.sample.note = "card-wide memory: Insufficient Permissions";
  st.gpus.push_back(card);
  GpuStatus gi2;
  gi2.sample.index = mig_flat_index(0, 2);
  gi2.sample.label = "0/2";
  gi2.sample.parent = 0;
  gi2.sample.uuid = "MIG-aaaaaaaa-0000";
  gi2.sample.mig_profile = "3g.71gb";
  gi2.sample.total = 70 * GiB;
  gi2.sample.used = 16 * GiB;
  Holding h;
  h.owner = {OwnerKind::process, "gpu_burn[12267]"};
  h.bytes = 16 * GiB;
  h.source = Source::process;
  h.pids = {12267};
  gi2.holdings.push_back(h);
  st.gpus.push_back(gi2);
  nlohmann::json j = to_json(st, Now(MonoTime{}));
  EXPECT_EQ(j["gpus"][1]["label"], "0/2");
  EXPECT_EQ(j["gpus"][1]["parent"], "0");
  EXPECT_EQ(j["gpus"][1]["mig_profile"], "3g.71gb");
  EXPECT_EQ(j["gpus"][0]["mig_enabled"], true);
  std::ostringstream out;
  print_status(out, j, TimePoint{});
  std::string text = out.str();
  EXPECT_NE(text.find("GPU 0  NVIDIA H200  0 B used of 0 B (0%), 0 B free, MIG on\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("  note: card-wide memory: Insufficient Permissions\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("\n  GPU 0/2  MIG 3g.71gb  MIG-aaaaaaaa-0000  16.0 GiB used of 70.0 GiB"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("\n    gpu_burn[12267]"), std::string::npos) << text;
}

TEST(PrintServices, ASleeperShowsItsDepthAndTheHostRamItKeeps) {
  // Through the API's own JSON (server/json_view), as `vramd status` gets it.
  ServiceStatus st;
  st.name = "vllm";
  st.kind = "vllm";
  st.state = ServiceState::up;
  st.bytes = 500 * MiB;
  Asleep a;
  a.depth = SleepDepth::sleep1;
  a.since = MonoTime(std::chrono::minutes(1));
  a.gpu_kept = 500 * MiB;
  a.host_ram = Bytes(14.2 * double(GiB));
  a.host_ram_measured = true;
  st.asleep = a;
  Now now(MonoTime(std::chrono::minutes(4)));
  nlohmann::json body = {{"services", nlohmann::json::array({to_json(st, now)})}};
  EXPECT_EQ(body["services"][0]["asleep"]["depth"], "sleep1");
  EXPECT_EQ(body["services"][0]["wake_seconds"]["sleep1"]["seconds"], 3.0);
  std::ostringstream out;
  print_services(out, body, now.wall);
  std::string text = out.str();
  EXPECT_NE(text.find("    asleep (level 1) for 3 min: 500 MiB kept on the GPU, 14.2 GiB of host "
                      "RAM\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("Host RAM: vllm asleep (level 1): 14.2 GiB of host RAM\n"), std::string::npos)
      << text;
}

}  // namespace
}  // namespace vramd
