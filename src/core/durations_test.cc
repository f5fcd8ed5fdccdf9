// The durations history's pure parts: comparisons, argument diffs, fingerprints; and the core's
// side through the Arbiter on a virtual clock: versions and arguments seen, service.changed,
// prompts recorded once.
#include "core/durations.h"

#include <gtest/gtest.h>

#include "core/arbiter.h"

namespace vramd {
namespace durations_test {

using namespace std::chrono_literals;

DurationRecord prompt(const std::string& workflow, const std::string& version, double seconds,
                      int minute, const std::string& outcome = "success") {
  DurationRecord r;
  r.kind = RecordKind::prompt;
  r.service = "comfy";
  r.workflow = workflow;
  r.model = "flux1-dev-Q8_0.gguf";
  r.version = version;
  r.args_fp = version == "0.28.0" ? "bbbbbbbbbbbb" : "aaaaaaaaaaaa";
  r.outcome = prompt_outcome_from(outcome);
  r.seconds = seconds;
  r.at = TimePoint(std::chrono::minutes(minute));
  return r;
}

TEST(Durations, ComparedByVersionPerWorkflowWithTheChangeFromTheVersionBefore) {
  std::vector<DurationRecord> rs;
  // Given newest first, as the store lists them: the order must not matter.
  for (int i = 0; i < 5; ++i) rs.push_back(prompt("wf1", "0.28.0", 89.5 + i * 0.1, 100 - i));
  for (int i = 0; i < 5; ++i) rs.push_back(prompt("wf1", "0.27.0", 101.4 + i * 0.1, 50 - i));
  rs.push_back(prompt("wf1", "0.27.0", 3.0, 10, "error"));  // failed: counted apart
  rs.push_back(prompt("wf2", "0.28.0", 20, 99));
  auto groups = compare_durations(rs, CompareBy::version);
  ASSERT_EQ(groups.size(), 3u);
  EXPECT_EQ(groups[0].subject, "wf1");
  EXPECT_EQ(groups[0].variant, "0.27.0");
  EXPECT_EQ(groups[0].count, 5u);
  EXPECT_EQ(groups[0].failed, 1u);
  EXPECT_DOUBLE_EQ(groups[0].p50, 101.6);
  EXPECT_DOUBLE_EQ(groups[0].p95, 101.8);
  EXPECT_FALSE(groups[0].change_pct);
  EXPECT_EQ(groups[1].variant, "0.28.0");
  EXPECT_DOUBLE_EQ(groups[1].p50, 89.7);
  ASSERT_TRUE(groups[1].change_pct);
  EXPECT_NEAR(*groups[1].change_pct, (89.7 - 101.6) / 101.6 * 100, 1e-9);
  EXPECT_EQ(groups[2].subject, "wf2");
  EXPECT_FALSE(groups[2].change_pct);
  EXPECT_EQ(groups[2].model, "flux1-dev-Q8_0.gguf");
  // By arguments: the same split here (each version ran with its own argument set).
  auto by_args = compare_durations(rs, CompareBy::args);
  ASSERT_EQ(by_args.size(), 3u);
  EXPECT_EQ(by_args[0].variant, "aaaaaaaaaaaa");
}

TEST(Durations, RequestsGroupByModelAndOnlyTwoHundredsCount) {
  std::vector<DurationRecord> rs;
  for (int i = 0; i < 4; ++i) {
    DurationRecord r;
    r.kind = RecordKind::request;
    r.model = "llama3.2";
    r.version = "0.6.8";
    r.status = i == 3 ? 503 : 200;
    r.seconds = 1.0 + i;
    r.wait_s = 0.5;
    if (i < 2) r.tokens_per_s = 40.0 + i;
    r.at = TimePoint(std::chrono::seconds(i));
    rs.push_back(r);
  }
  auto g = compare_durations(rs, CompareBy::version);
  ASSERT_EQ(g.size(), 1u);
  EXPECT_EQ(g[0].subject, "llama3.2");
  EXPECT_EQ(g[0].count, 3u);
  EXPECT_EQ(g[0].failed, 1u);
  EXPECT_DOUBLE_EQ(g[0].p50, 2.0);
  EXPECT_DOUBLE_EQ(*g[0].wait_p50, 0.5);
  EXPECT_DOUBLE_EQ(*g[0].tokens_per_s_p50, 40.0);
}

TEST(Durations, PercentileIsNearestRank) {
  std::vector<double> none;
  EXPECT_EQ(percentile(none, 50), 0);
  std::vector<double> v = {5, 1, 4, 2, 3};
  EXPECT_EQ(percentile(v, 50), 3);
  EXPECT_EQ(percentile(v, 95), 5);
  EXPECT_EQ(percentile(v, 1), 1);
}

TEST(Durations, ArgsDiffReadsAddedRemovedAndChangedOptions) {
  std::vector<std::string> a = {"python", "main.py", "--listen", "0.0.0.0", "--port", "8188",
                                "--lowvram"};
  std::vector<std::string> b = {"python", "main.py", "--listen", "0.0.0.0", "--port", "8189",
                                "--disable-async-offload"};
  auto d = args_diff(a, b);
  ASSERT_EQ(d.size(), 3u);
  EXPECT_EQ(d[0], "--port 8188 → --port 8189");
  EXPECT_EQ(d[1], "+--disable-async-offload");
  EXPECT_EQ(d[2], "---lowvram");
  EXPECT_TRUE(args_diff(a, a).empty());
  EXPECT_EQ(args_diff({"x", "A=1"}, {"x", "A=2"}), (std::vector<std::string>{"+A=2", "-A=1"}));
}

TEST(Durations, ArgsFingerprintIsStableAndOrderMatters) {
  EXPECT_EQ(args_fingerprint({}), "");
  std::string f = args_fingerprint({"main.py", "--port", "8188"});
  EXPECT_EQ(f.size(), 12u);
  EXPECT_EQ(f, args_fingerprint({"main.py", "--port", "8188"}));
  EXPECT_NE(f, args_fingerprint({"main.py", "--port8188"}));  // the boundary counts
  EXPECT_NE(f, args_fingerprint({"--port", "8188", "main.py"}));
  EXPECT_EQ(record_kind_from("prompt"), RecordKind::prompt);
  EXPECT_FALSE(record_kind_from("job"));
  EXPECT_EQ(compare_by_from("args"), CompareBy::args);
  EXPECT_FALSE(compare_by_from("Version"));
}

// ---- the core's side ----

class World {
 public:
  explicit World(std::vector<ServiceConfig> services) {
    Config c;
    c.gpu.baseline = 400 * MiB;
    c.services.assign(services.begin(), services.end());
    arbiter_ = std::make_unique<Arbiter>(c);
  }
  std::vector<Action> probe(const std::string& service, const std::string& version,
                            std::vector<std::string> args,
                            std::vector<DurationRecord> finished = {}) {
    ServiceProbe p;
    p.reachable = true;
    p.busy = false;
    p.version = version;
    p.args = std::move(args);
    p.finished = std::move(finished);
    return feed(ProbeDone{service, p});
  }
  std::vector<Action> feed(const Event& e) {
    t_ += 1s;
    return arbiter_->handle(e, Now(t_));
  }
  Arbiter& arbiter() { return *arbiter_; }

 private:
  std::unique_ptr<Arbiter> arbiter_;
  MonoTime t_{std::chrono::hours(1)};
};

ServiceConfig comfy(std::vector<std::string> start = {}) {
  ServiceConfig s;
  s.name = "comfy";
  s.kind = "comfyui";
  s.url = "http://127.0.0.1:8188";
  s.start = std::move(start);
  return s;
}

template <class T>
std::vector<T> all_of(const std::vector<Action>& actions) {
  std::vector<T> out;
  for (const auto& a : actions)
    if (const T* t = std::get_if<T>(&a)) out.push_back(*t);
  return out;
}

std::vector<EventRecord> changes(const std::vector<Action>& actions) {
  std::vector<EventRecord> out;
  for (const auto& e : all_of<EmitEvent>(actions))
    if (e.event.type == "service.changed") out.push_back(e.event);
  return out;
}

TEST(ServiceVariants, FirstSightIsKeptAndAChangeOfVersionOrArgsIsTold) {
  World w({comfy()});
  auto a = w.probe("comfy", "0.27.0", {"main.py", "--port", "8188"});
  EXPECT_TRUE(changes(a).empty());  // first sight: nothing changed
  auto kept = all_of<RememberVariant>(a);
  ASSERT_EQ(kept.size(), 1u);
  EXPECT_EQ(kept[0].variant.version, "0.27.0");
  EXPECT_EQ(kept[0].variant.args_fp, args_fingerprint({"main.py", "--port", "8188"}));
  // The same answer again: nothing.
  a = w.probe("comfy", "0.27.0", {"main.py", "--port", "8188"});
  EXPECT_TRUE(all_of<RememberVariant>(a).empty());
  // A probe that did not read the version changes nothing.
  a = w.probe("comfy", "", {});
  EXPECT_TRUE(all_of<RememberVariant>(a).empty());
  a = w.probe("comfy", "0.28.0", {"main.py", "--port", "8188", "--disable-async-offload"});
  auto c = changes(a);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].message,
            "comfy changed: version 0.27.0 → 0.28.0; args +--disable-async-offload");
  ASSERT_TRUE(c[0].change);
  EXPECT_EQ(c[0].change->old_version, "0.27.0");
  EXPECT_EQ(c[0].change->new_version, "0.28.0");
  EXPECT_EQ(c[0].change->args_diff, std::vector<std::string>{"+--disable-async-offload"});
  const ServiceStatus* st = w.arbiter().service("comfy");
  EXPECT_EQ(st->version, "0.28.0");
  EXPECT_EQ(st->last_change, "version 0.27.0 → 0.28.0; args +--disable-async-offload");
}

TEST(ServiceVariants, AServiceVramdRunsIsKnownByItsStartAndAChangeAfterARestartIsTold) {
  // vramd ran it with A before; it now starts it with B: told at the start, before any answer.
  std::vector<std::string> a = {"python", "main.py"};
  std::vector<std::string> b = {"python", "main.py", "--disable-async-offload"};
  World w({comfy(b)});
  w.arbiter().restore_variants({ServiceVariant{"comfy", "0.28.0", args_fingerprint(a), a, {}, {}}});
  auto acts = w.feed(ChildStarted{.service = "comfy", .ok = true, .pid = 4242, .start_ticks = 1});
  auto c = changes(acts);
  ASSERT_EQ(c.size(), 1u) << "no service.changed at the start";
  EXPECT_EQ(c[0].message, "comfy changed: args +--disable-async-offload");
  // Its server's argv does not make another change: `start` is what counts.
  acts = w.probe("comfy", "0.28.0", {"main.py", "--listen"});
  EXPECT_TRUE(changes(acts).empty());
  EXPECT_TRUE(all_of<RememberVariant>(acts).empty());
}

TEST(ServiceVariants, FinishedPromptsAreStampedAndRecordedOnce) {
  World w({comfy()});
  DurationRecord p1;
  p1.kind = RecordKind::prompt;
  p1.key = "p-1";
  p1.seconds = 3;
  DurationRecord p2 = p1;
  p2.key = "p-2";
  auto a = w.probe("comfy", "0.28.0", {"main.py"}, {p1});
  auto rec = all_of<RecordDurations>(a);
  ASSERT_EQ(rec.size(), 1u);
  ASSERT_EQ(rec[0].records.size(), 1u);
  EXPECT_EQ(rec[0].records[0].service, "comfy");
  EXPECT_EQ(rec[0].records[0].version, "0.28.0");
  EXPECT_EQ(rec[0].records[0].args_fp, args_fingerprint({"main.py"}));
  // p-1 again with p-2: only p-2.
  rec = all_of<RecordDurations>(w.probe("comfy", "0.28.0", {"main.py"}, {p1, p2}));
  ASSERT_EQ(rec.size(), 1u);
  ASSERT_EQ(rec[0].records.size(), 1u);
  EXPECT_EQ(rec[0].records[0].key, "p-2");
  // Both again: nothing.
  EXPECT_TRUE(all_of<RecordDurations>(w.probe("comfy", "0.28.0", {"main.py"}, {p1, p2})).empty());
}

}  // namespace durations_test
}  // namespace vramd
