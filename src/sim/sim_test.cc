// The simulator: the trace parser, the world model, each baseline on a trace small enough to
// work out by hand, and the vramd policy (the real Arbiter) on one such trace.
#include <gtest/gtest.h>

#include <cmath>

#include <fmt/format.h>

#include "sim/generate.h"
#include "sim/sim.h"
#include "sim/trace.h"

namespace vramd::sim {
namespace {

// One 24 GiB GPU (no baseline); service a: 16 GiB, loads in 10 s, frees in 2 s; one request at
// 0 s for 5 s; a 12 GiB job at 20 s for 30 s; the trace ends at 100 s.
const char* kSmall = R"({"t":0,"type":"gpu","index":0,"total":"24GiB","baseline":"0"}
{"t":0,"type":"service","name":"a","gpu":0,"model_bytes":"16GiB","load_seconds":10,"unload_seconds":2}
{"t":0,"type":"request","service":"a","duration":5}
{"t":20,"type":"job","name":"j","gpu":0,"bytes":"12GiB","duration":30}
{"t":100,"type":"end"}
)";

Trace parse(const std::string& text) {
  auto t = parse_trace(text, "t.jsonl");
  EXPECT_TRUE(t.ok()) << (t.ok() ? "" : t.error());
  return t.ok() ? *t : Trace{};
}

std::string parse_error(const std::string& text) {
  auto t = parse_trace(text, "t.jsonl");
  return t.ok() ? "(parsed)" : t.error();
}

RunResult run(const Trace& trace, const std::string& spec) {
  auto p = make_policy(spec, Config{});
  EXPECT_TRUE(p.ok()) << (p.ok() ? "" : p.error());
  return run_policy(trace, **p);
}

std::vector<std::string> decisions(const RunResult& r) {
  std::vector<std::string> out;
  for (const auto& d : r.decisions) out.push_back(fmt::format("{} {}", d.t, d.what));
  return out;
}

using Lines = std::vector<std::string>;

TEST(SimTrace, ParsesTheIssuesExampleLines) {
  Trace t = parse(
      R"({"t":0,"type":"gpu","index":0,"total":"24GiB","baseline":"1GiB"}
{"t":0,"type":"service","name":"comfyui","gpu":0,"model_bytes":"16GiB","context_bytes":"400MiB","load_seconds":25,"unload_seconds":2,"unload_effective":1.0}
{"t":100,"type":"job","name":"whisper-1","gpu":0,"bytes":"6GiB","duration":300,"priority":0}
{"t":10.5,"type":"request","service":"comfyui","duration":4.0}
)");
  ASSERT_EQ(t.gpus.size(), 1u);
  EXPECT_EQ(t.gpus[0].total, 24 * GiB);
  EXPECT_EQ(t.gpus[0].baseline, 1 * GiB);
  ASSERT_EQ(t.services.size(), 1u);
  EXPECT_EQ(t.services[0].footprint(), 16 * GiB + 400 * MiB);
  EXPECT_EQ(t.services[0].load, 25000);
  EXPECT_EQ(t.services[0].restart, 25000);  // defaults to load_seconds
  ASSERT_EQ(t.requests.size(), 1u);
  EXPECT_EQ(t.requests[0].t, 10500);
  EXPECT_EQ(t.requests[0].duration, 4000);
  ASSERT_EQ(t.jobs.size(), 1u);
  EXPECT_EQ(t.jobs[0].bytes, 6 * GiB);
  EXPECT_EQ(t.end, 100000);  // no "end" line: the last line's t
}

TEST(SimTrace, ErrorsSayLineColumnAndWhat) {
  std::string gpu = R"({"t":0,"type":"gpu","index":0,"total":"24GiB"})"
                    "\n";
  EXPECT_EQ(parse_error(gpu + R"({"t":1,"type":"request","service":"x","duration":1})"),
            "t.jsonl:2:25: no service 'x' (define it with a \"service\" line first)");
  EXPECT_EQ(
      parse_error(gpu + R"({"t":1,"type":"job","name":"j","gpu":0,"bytes":"1GiB","durration":3})"),
      "t.jsonl:2:55: unknown key 'durration' in a \"job\" line; did you mean 'duration'?");
  EXPECT_EQ(parse_error(gpu + R"({"t":-1,"type":"end"})"),
            "t.jsonl:2:2: 't' must be a number of seconds >= 0, got -1");
  EXPECT_EQ(
      parse_error(gpu + R"({"t":1,"type":"job","name":"j","gpu":0,"bytes":"12","duration":3})"),
      "t.jsonl:2:40: 'bytes': 12: give a unit, e.g. 12GiB");
  EXPECT_EQ(parse_error(gpu + R"({"t":1,"type":"gpu")"),
            "t.jsonl:2:20: not JSON: syntax error "
            "while parsing object - unexpected end of "
            "input; expected '}'");
  EXPECT_EQ(
      parse_error(
          R"({"t":0,"type":"service","name":"a","gpu":0,"model_bytes":"1GiB","load_seconds":1})"),
      "t.jsonl:1:36: no GPU 0 (define it with a \"gpu\" line first)");
  EXPECT_EQ(parse_error(gpu + "[1,2]"), "t.jsonl:2:1: each line must be a JSON object");
  EXPECT_EQ(
      parse_error(gpu + R"({"t":1,"type":"job","name":"j","gpu":0,"bytes":"30GiB","duration":3})"),
      "t.jsonl:2:40: 'bytes' must be more than 0 and fit GPU 0 (24.0 GiB free at most)");
  EXPECT_EQ(parse_error(""), "t.jsonl: no \"gpu\" line");
  std::string host = R"({"t":0,"type":"host","ram":"32GiB"})"
                     "\n";
  EXPECT_EQ(parse_error(gpu + host + host), "t.jsonl:3:22: the host is defined twice");
  EXPECT_EQ(parse_error(gpu + R"({"t":0,"type":"host","ram":"0"})"),
            "t.jsonl:2:22: 'ram' must be more than 0");
  EXPECT_EQ(
      parse_error(
          gpu +
          R"({"t":0,"type":"service","name":"a","gpu":0,"model_bytes":"1GiB","load_seconds":1,"host_bytes":"1GiB"})"),
      "t.jsonl:2:82: 'host_bytes' is what a level-1 sleep keeps: give 'sleep1_seconds' too");
  auto t = parse_trace(
      gpu + host +
          R"({"t":0,"type":"service","name":"a","gpu":0,"model_bytes":"8GiB","load_seconds":20,"sleep1_seconds":2.5})",
      "t.jsonl");
  ASSERT_TRUE(t.ok()) << t.error();
  EXPECT_EQ(t->host_ram, 32 * GiB);
  EXPECT_EQ(t->services[0].sleep1, 2500);
  EXPECT_EQ(t->services[0].host_bytes, 8 * GiB);  // its weights, by default
  // Found by fuzz_trace: nlohmann throws out_of_range, not parse_error, for this one.
  EXPECT_EQ(parse_error(gpu + R"({"t":10e400000,"type":"end"})"),
            "t.jsonl:2:1: not JSON: number overflow parsing '10e400000'");
}

TEST(SimTrace, SortsArrivalsByTimeAndStopsAtTheEndLine) {
  Trace t = parse(std::string(kSmall));
  EXPECT_EQ(t.end, 100000);
  EXPECT_EQ(parse_error(std::string(kSmall) + R"({"t":101,"type":"end"})"),
            "t.jsonl:6:10: nothing may follow the \"end\" line");
}

TEST(SimGenerate, SameNameAndSeedGiveTheSameTraceAndTheTracesParse) {
  for (const auto& name : trace_generators()) {
    auto a = generate_trace(name, 7), b = generate_trace(name, 7), c = generate_trace(name, 8);
    ASSERT_TRUE(a.ok() && b.ok() && c.ok());
    EXPECT_EQ(*a, *b) << name;
    EXPECT_NE(*a, *c) << name;
    auto t = parse_trace(*a, name);
    ASSERT_TRUE(t.ok()) << t.error();
    EXPECT_GT(t->events(), 50u) << name;
  }
  EXPECT_FALSE(generate_trace("nope", 1).ok());
}

TEST(SimMetrics, NearestRankPercentilesAndTheParetoVerdict) {
  EXPECT_EQ(percentile({}, 95), 0.0);
  EXPECT_EQ(percentile({3, 1, 2, 4}, 50), 2.0);  // rank ceil(2) = 2nd
  EXPECT_EQ(percentile({3, 1, 2, 4}, 95), 4.0);  // rank ceil(3.8) = 4th
  EXPECT_EQ(percentile({3, 1, 2, 4}, 100), 4.0);
  EXPECT_EQ(percentile({5}, 0), 5.0);
  auto row = [](std::string p, double wait, double reload) {
    Metrics m;
    m.policy = std::move(p);
    m.job_wait_p95_s = wait;
    m.reload_s = reload;
    return m;
  };
  std::vector<Metrics> rows = {row("a", 10, 100), row("b", 10, 50), row("c", 0, 200),
                               row("d", 20, 200)};
  mark_pareto(rows);
  EXPECT_EQ(rows[0].dominated_by, (std::vector<std::string>{"b"}));  // same wait, more reload
  EXPECT_TRUE(rows[1].dominated_by.empty());
  EXPECT_TRUE(rows[2].dominated_by.empty());
  EXPECT_EQ(rows[3].dominated_by, (std::vector<std::string>{"a", "b", "c"}));
  // Scaled by the ranges (wait 0-20, reload 50-200): b at (0.5, 0), d at (1, 1).
  EXPECT_DOUBLE_EQ(rows[1].distance_to_ideal, 0.5);
  EXPECT_DOUBLE_EQ(rows[3].distance_to_ideal, std::sqrt(2.0));
}

// ---- the world and the baselines, on kSmall ----

TEST(SimWorld, ARequestPaysTheLoadAndRequestsAreServedOneAtATime) {
  Trace t = parse(R"({"t":0,"type":"gpu","index":0,"total":"24GiB"}
{"t":0,"type":"service","name":"a","gpu":0,"model_bytes":"16GiB","load_seconds":10}
{"t":0,"type":"request","service":"a","duration":5}
{"t":1,"type":"request","service":"a","duration":5}
{"t":100,"type":"end"}
)");
  RunResult r = run(t, "never");
  // The first waits for the load (10 s) and runs 5 s; the second runs after it: 1 → 20 s.
  EXPECT_EQ(r.metrics.request_latency_p50_s, 15.0);
  EXPECT_EQ(r.metrics.request_latency_p95_s, 19.0);
  EXPECT_EQ(r.metrics.reloads, 0);  // the first load is no reload
  EXPECT_EQ(decisions(r), (Lines{"0 load a"}));
  // Idle from 20 s to 100 s, 16 GiB: 16 × 80 / 3600 GiB-h.
  EXPECT_NEAR(r.metrics.idle_gib_h, 16.0 * 80 / 3600, 1e-9);
}

TEST(SimBaselines, NeverKeepsTheModelAndTheJobWaitsToTheEnd) {
  RunResult r = run(parse(kSmall), "never");
  EXPECT_EQ(r.metrics.jobs_never_admitted, 1);
  EXPECT_EQ(r.metrics.job_wait_max_s, 80.0);  // 20 s → the end at 100 s
  // 8 GiB free, 16 GiB idle in the way, all 80 s.
  EXPECT_EQ(r.metrics.blocked_by_idle_job_s, 80.0);
}

TEST(SimBaselines, TtlUnloadsAfterTheIdlePeriodThenTheJobFits) {
  RunResult r = run(parse(kSmall), "ttl:30s");
  // Idle from 15 s; unloaded at 45 s, its memory back at 47 s.
  EXPECT_EQ(decisions(r), (Lines{"0 load a", "45000 unload a", "47000 grant j"}));
  EXPECT_EQ(r.metrics.job_wait_max_s, 27.0);
  EXPECT_EQ(r.metrics.blocked_by_idle_job_s, 27.0);
  EXPECT_EQ(r.metrics.unload_calls, 1);
}

TEST(SimBaselines, FreeAtEndUnloadsWhenTheQueueEmpties) {
  RunResult r = run(parse(kSmall), "free-at-end");
  EXPECT_EQ(decisions(r), (Lines{"0 load a", "15000 unload a", "20000 grant j"}));
  EXPECT_EQ(r.metrics.job_wait_max_s, 0.0);
  EXPECT_EQ(r.metrics.idle_gib_h, 16.0 * 2 / 3600);  // only while its unload ran
}

// Two services that do not fit together: a (16 GiB) then b (12 GiB) at 20 s.
const char* kSwap = R"({"t":0,"type":"gpu","index":0,"total":"24GiB"}
{"t":0,"type":"service","name":"a","gpu":0,"model_bytes":"16GiB","load_seconds":10,"unload_seconds":2}
{"t":0,"type":"service","name":"b","gpu":0,"model_bytes":"12GiB","load_seconds":4,"unload_seconds":1}
{"t":0,"type":"request","service":"a","duration":5}
{"t":20,"type":"request","service":"b","duration":5}
{"t":100,"type":"end"}
)";

TEST(SimBaselines, OllamaUnloadsTheOldestIdleRunnerWhenALoadDoesNotFit) {
  RunResult r = run(parse(kSwap), "ollama");
  // b does not fit: a (idle since 15 s) is stopped; its 16 GiB are back at 22 s; b loads.
  EXPECT_EQ(decisions(r), (Lines{"0 load a", "20000 stop a", "22000 load b"}));
  EXPECT_EQ(r.metrics.request_latency_p50_s, 11.0);  // b: 2 s unload + 4 s load + 5 s
  EXPECT_EQ(r.metrics.request_latency_p95_s, 15.0);  // a: 10 s load + 5 s
  // Keep-alive 5 min: b stays loaded to the end; and nothing unloads a job's way.
  RunResult j = run(parse(kSmall), "ollama");
  EXPECT_EQ(j.metrics.jobs_never_admitted, 1);
}

TEST(SimBaselines, OllamaWaitsAtMostFiveSecondsForTheMemoryToComeBack) {
  std::string slow = kSwap;
  slow.replace(slow.find(R"("unload_seconds":2)"), 18, R"("unload_seconds":9)");
  RunResult r = run(parse(slow), "ollama");
  // It gives up waiting at 25 s, but b still does not fit until a's memory is back at 29 s.
  EXPECT_EQ(decisions(r), (Lines{"0 load a", "20000 stop a", "29000 load b"}));
}

TEST(SimBaselines, LocalAiReclaimsAboveNinetyFivePercentAndCapsActiveBackends) {
  RunResult r = run(parse(kSwap), "localai");
  EXPECT_EQ(decisions(r), (Lines{"0 load a", "20000 stop a", "22000 load b"}));
  // Two small ones fit together: no limit keeps both; max=1 swaps them.
  std::string small = kSwap;
  small.replace(small.find(R"("model_bytes":"16GiB")"), 21, R"("model_bytes":"4GiB")");
  small.replace(small.find(R"("model_bytes":"12GiB")"), 21, R"("model_bytes":"4GiB")");
  EXPECT_EQ(decisions(run(parse(small), "localai")), (Lines{"0 load a", "20000 load b"}));
  EXPECT_EQ(decisions(run(parse(small), "localai:max=1")),
            (Lines{"0 load a", "20000 stop a", "22000 load b"}));
}

TEST(SimBaselines, LlamaSwapLoadsOneGroupMemberAtATimeAndHonoursItsTtl) {
  std::string small = kSwap;
  small.replace(small.find(R"("model_bytes":"16GiB")"), 21, R"("model_bytes":"4GiB")");
  EXPECT_EQ(decisions(run(parse(small), "llama-swap")),
            (Lines{"0 load a", "20000 stop a", "22000 load b"}));
  // ttl=10s: a, idle from 15 s, is stopped at 25 s; its memory is back at 27 s: the job fits.
  EXPECT_EQ(decisions(run(parse(kSmall), "llama-swap:ttl=10s")),
            (Lines{"0 load a", "25000 stop a", "27000 grant j"}));
}

TEST(SimBaselines, IneffectiveUnloadsFollowTheTracesFractionTheSameWayForEveryPolicy) {
  std::string text = R"({"t":0,"type":"gpu","index":0,"total":"24GiB"}
{"t":0,"type":"service","name":"a","gpu":0,"model_bytes":"4GiB","load_seconds":1,"unload_seconds":1,"unload_effective":0.8}
)";
  for (int k = 0; k < 1000; ++k)
    text += fmt::format(R"({{"t":{},"type":"request","service":"a","duration":1}})"
                        "\n",
                        k * 10);
  text += R"({"t":10000,"type":"end"})";
  Trace t = parse(text);
  RunResult a = run(t, "free-at-end"), b = run(t, "free-at-end");
  EXPECT_EQ(a.metrics.unload_calls, 1000);
  EXPECT_GT(a.metrics.unload_ineffective, 150);
  EXPECT_LT(a.metrics.unload_ineffective, 250);
  EXPECT_EQ(a.metrics.unload_ineffective, b.metrics.unload_ineffective);
  // An ineffective unload left the model loaded: the next request needs no load.
  EXPECT_EQ(a.metrics.reloads, 1000 - 1 - a.metrics.unload_ineffective);
}

TEST(SimPolicies, UnknownOrMalformedPoliciesAreRefusedWithTheChoices) {
  EXPECT_EQ(make_policy("ttl", Config{}).error(), "policy 'ttl': expected a duration: ttl:300s");
  EXPECT_EQ(make_policy("ttl:5x", Config{}).error().substr(0, 15), "policy 'ttl:5x'");
  EXPECT_NE(make_policy("lru", Config{}).error().find("unknown policy 'lru': expected never"),
            std::string::npos);
  EXPECT_FALSE(make_policy("localai:max=-1", Config{}).ok());
  for (const auto& p : all_policies()) EXPECT_TRUE(make_policy(p, Config{}).ok()) << p;
}

// ---- the vramd policy: the real Arbiter ----

TEST(SimVramd, EvictsTheIdleServiceAfterMinIdleAndGrantsTheJobOnceItsMemoryIsGone) {
  RunResult r = run(parse(kSmall), "vramd");
  // a loads at once (its wake lease fits). The job asks at 20 s: a has been idle 5 s, under
  // min_idle (30 s), so the lease waits; the sample at 45 s finds a idle 30 s and evicts it.
  // The unload frees its 16 GiB evenly over 2 s, sampled every 250 ms while it runs: at 45.25 s
  // a still holds 14 GiB (10 free), at 45.5 s 12 GiB: 12 GiB free, the job's need: granted.
  EXPECT_EQ(decisions(r), (Lines{"0 load a", "45000 unload a", "45500 grant j"}));
  EXPECT_EQ(r.metrics.job_wait_max_s, 25.5);
  EXPECT_EQ(r.metrics.unload_calls, 1);
  EXPECT_EQ(r.metrics.reloads, 0);
}

TEST(SimVramd, WithPrewarmTheEvictedServiceComesBackWhenTheJobEnds) {
  RunResult r = run(parse(kSmall), "vramd:prewarm");
  // As above until the job ends at 75.5 s; a, asked within the hour and evicted for the job, is
  // woken at the next prewarm look (every 10 s), with nobody asking: a load counted as a reload.
  EXPECT_EQ(decisions(r), (Lines{"0 load a", "45000 unload a", "45500 grant j", "80500 load a"}));
  EXPECT_EQ(r.metrics.reloads, 1);
  EXPECT_EQ(r.metrics.job_wait_max_s, 25.5);  // the job waited no longer for it
}

// Four 10 GiB servers with a level-1 sleep on a 24 GiB GPU (two fit) and 16 GiB of host RAM
// (one sleeper's weights fit): asked in turn, each evicts the one asked longest ago, so two
// sleep at once.
const char* kDepths = R"({"t":0,"type":"gpu","index":0,"total":"24GiB","baseline":"0"}
{"t":0,"type":"host","ram":"16GiB"}
{"t":0,"type":"service","name":"a","gpu":0,"model_bytes":"10GiB","load_seconds":30,"sleep1_seconds":3}
{"t":0,"type":"service","name":"b","gpu":0,"model_bytes":"10GiB","load_seconds":30,"sleep1_seconds":3}
{"t":0,"type":"service","name":"c","gpu":0,"model_bytes":"10GiB","load_seconds":30,"sleep1_seconds":3}
{"t":0,"type":"service","name":"d","gpu":0,"model_bytes":"10GiB","load_seconds":30,"sleep1_seconds":3}
{"t":0,"type":"request","service":"a","duration":5}
{"t":100,"type":"request","service":"b","duration":5}
{"t":200,"type":"request","service":"c","duration":5}
{"t":300,"type":"request","service":"d","duration":5}
{"t":400,"type":"request","service":"a","duration":5}
{"t":500,"type":"request","service":"b","duration":5}
{"t":700,"type":"end"}
)";

TEST(SimVramd, TheDepthFollowsTheHostRamAndAFixedLevelOneRunsOutOfIt) {
  Trace t = parse(kDepths);
  RunResult chosen = run(t, "vramd"), fixed = run(t, "vramd:fixed-depth");
  // Fixed at level 1, a second sleeper's weights do not fit the host's 16 GiB: the kernel kills
  // it, and it comes back from a restart and a load from disk.
  EXPECT_GT(fixed.metrics.host_ooms, 0);
  // vramd sleeps the first at level 1 (its weights fit) and the next at level 2 while they are
  // there: no OOM, the level-1 sleeper's wake takes 3 s and the other's a load (30 s), where
  // the killed one pays a restart and a load.
  EXPECT_EQ(chosen.metrics.host_ooms, 0);
  EXPECT_GT(chosen.metrics.reload_s_sleep1, 0);
  EXPECT_GT(chosen.metrics.reload_s_cold, 0);
  EXPECT_LT(chosen.metrics.reload_s, fixed.metrics.reload_s);
  EXPECT_LE(chosen.metrics.reload_wait_p95_s, fixed.metrics.reload_wait_p95_s);
  bool woke_from_ram = false;
  for (const auto& d : decisions(chosen)) woke_from_ram |= d.find(" wake ") != std::string::npos;
  EXPECT_TRUE(woke_from_ram) << fmt::format("{}", fmt::join(decisions(chosen), "\n"));
}

TEST(SimVramd, AnUnloadThatFreesNothingIsEscalatedToARestartAfterItsTimeout) {
  std::string text = kSmall;
  text.replace(text.find(R"("unload_seconds":2)"), 18,
               R"("unload_seconds":2,"unload_effective":0)");
  RunResult r = run(parse(text), "vramd");
  // Evicted at 45 s as above, but nothing comes back: the generic_http unload timeout (20 s)
  // gives the verdict "ineffective" at the 65 s sample, and the escalation restarts a (its
  // memory goes at once). The next sample, back at the 1 s interval, sees the room: 66 s.
  EXPECT_EQ(decisions(r),
            (Lines{"0 load a", "45000 unload a", "65000 restart a", "66000 grant j"}));
  EXPECT_EQ(r.metrics.unload_ineffective, 1);
  EXPECT_EQ(r.metrics.restarts, 1);
  EXPECT_EQ(r.metrics.job_wait_max_s, 46.0);
}

TEST(SimVramd, AFirstLoadOfAKnownSizeIsAdmittedAndTheIdleServiceEvictedForIt) {
  // As the daemon's proxy (core/wake.h, WakeStep::admit): b has never been loaded, but its size
  // is known (the sim's vram_estimate, the trace's footprint), so its first request waits for
  // room like a lease. a (idle since 15 s) is evicted once past min_idle (30 s), at 45 s; b's
  // lease is granted on the first sample that shows a's memory going, and it loads. (Before, the request went to the server unadmitted, failed for memory
  // and waited to the end of the trace: 80 s, never served.)
  RunResult r = run(parse(kSwap), "vramd");
  EXPECT_EQ(decisions(r), (Lines{"0 load a", "45000 unload a", "45500 load b"}));
  EXPECT_EQ(r.metrics.unadmitted_load_ooms, 0);
  EXPECT_EQ(r.metrics.requests_never_served, 0);
  EXPECT_EQ(r.metrics.request_latency_p95_s, 34.5);  // b: 20 s → 45.5 s, + 4 s load + 5 s
}

TEST(SimVramd, WithTheConfigsTtlTheArbiterUnloadsWhenTheTtlBaselineDoes) {
  // Two implementations of one rule, the Arbiter's idle TTL and the sidecar's, on the homelab
  // day: the same unloads, each within a sample (1 s) of the other.
  auto text = generate_trace("homelab", 1);
  ASSERT_TRUE(text.ok());
  Trace t = parse(*text);
  auto config = parse_config(R"([services.comfyui]
kind = "comfyui"
url = "http://127.0.0.1:8188"
unload_after_idle = "300s"
[services.ollama]
kind = "ollama"
url = "http://127.0.0.1:11434"
unload_after_idle = "300s"
)",
                             "t.toml");
  ASSERT_TRUE(config.ok()) << config.error();
  auto vramd = make_policy("vramd", *config, true);
  RunResult a = run_policy(t, **vramd), b = run(t, "ttl:300s");
  auto unloads = [](const RunResult& r) {
    std::vector<Decision> out;
    for (const auto& d : r.decisions)
      if (d.what.rfind("unload ", 0) == 0) out.push_back(d);
    return out;
  };
  auto ua = unloads(a), ub = unloads(b);
  ASSERT_EQ(ua.size(), ub.size());
  ASSERT_GT(ua.size(), 5u);
  for (size_t i = 0; i < ua.size(); ++i) {
    EXPECT_EQ(ua[i].what, ub[i].what) << i;
    EXPECT_GE(ua[i].t, ub[i].t) << i;  // the Arbiter sees the idle period at its next sample
    EXPECT_LE(ua[i].t - ub[i].t, 1000) << i;
  }
  EXPECT_EQ(a.metrics.reloads, b.metrics.reloads);
}

// Issue 28: a preemptible 16 GiB job for 600 s on a 24 GiB card, and one request at 60 s for a
// 10 GiB service that is not loaded. vramd suspends the job for the request's load, serves it,
// unloads the service once it has been idle min_idle (30 s) for the job's resume, and the job
// ends late by its time suspended; without suspend, the request waits for the job's end.
const char* kPreemptible = R"({"t":0,"type":"gpu","index":0,"total":"24GiB","baseline":"0"}
{"t":0,"type":"host","ram":"64GiB"}
{"t":0,"type":"service","name":"chat","gpu":0,"model_bytes":"10GiB","load_seconds":5,"unload_seconds":1}
{"t":0,"type":"job","name":"batch","gpu":0,"bytes":"16GiB","duration":600,"preemptible":true}
{"t":60,"type":"request","service":"chat","duration":5}
{"t":1200,"type":"end"}
)";

TEST(SimVramd, APreemptibleJobIsSuspendedForARequestAndResumedOnceTheServiceIsIdle) {
  Trace t = parse(kPreemptible);
  ASSERT_TRUE(t.jobs[0].preemptible);
  RunResult with = run(t, "vramd"), without = run(t, "vramd:no-suspend");
  Lines d = decisions(with);
  auto at = [&](const std::string& what) {
    for (const auto& x : with.decisions)
      if (x.what == what) return x.t;
    return Ms{-1};
  };
  ASSERT_GE(at("suspend batch"), 60000) << fmt::format("{}", fmt::join(d, "; "));
  EXPECT_LT(at("suspend batch"), at("load chat")) << fmt::format("{}", fmt::join(d, "; "));
  EXPECT_LT(at("load chat"), at("unload chat")) << fmt::format("{}", fmt::join(d, "; "));
  EXPECT_LE(at("unload chat"), at("resume batch")) << fmt::format("{}", fmt::join(d, "; "));
  EXPECT_EQ(with.metrics.suspends, 1);
  EXPECT_EQ(without.metrics.suspends, 0);
  // The request is served in seconds, not after the job's 600 s.
  EXPECT_LT(with.metrics.request_latency_p95_s, 20) << fmt::format("{}", fmt::join(d, "; "));
  EXPECT_GT(without.metrics.request_latency_p95_s, 500);
  // The job pays its time suspended (the request, min_idle, the copies), no more.
  double suspended_s = double(at("resume batch") - at("suspend batch")) / 1000.0;
  EXPECT_GT(with.metrics.job_completion_p95_s, 600 + suspended_s);
  EXPECT_LT(with.metrics.job_completion_p95_s, 600 + suspended_s + 5);
  EXPECT_NEAR(without.metrics.job_completion_p95_s, 600, 1);
  EXPECT_EQ(with.metrics.requests_never_served, 0);
}

TEST(SimTrace, PreemptibleMustBeTrueOrFalse) {
  EXPECT_EQ(parse_error(R"({"t":0,"type":"gpu","index":0,"total":"24GiB"}
{"t":1,"type":"job","name":"j","gpu":0,"bytes":"1GiB","duration":3,"preemptible":"yes"})"),
            "t.jsonl:2:68: 'preemptible' must be true or false");
}

}  // namespace
}  // namespace vramd::sim
