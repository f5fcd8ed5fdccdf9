// The parsers of systemd's tools' output, on the shapes they print (systemctl(1) `show`:
// KEY=VALUE lines; journalctl(1) `-o json`: one object a line, __REALTIME_TIMESTAMP a decimal
// string, MESSAGE a string, an array of bytes when not UTF-8, or null), and run_tool itself.
#include "host/systemd.h"

#include <gtest/gtest.h>

namespace vramd {
namespace {

TEST(SystemdShow, ARunningServiceAsSystemctlShowPrintsIt) {
  auto u = parse_systemctl_show(
      "LoadState=loaded\nActiveState=active\nSubState=running\nMainPID=1234\nExecMainCode=0\n"
      "ExecMainStatus=0\nNRestarts=2\nResult=success\nRestart=on-failure\n"
      "ActiveEnterTimestampMonotonic=86125951\nInvocationID=6f8b3ec0e7a34b6ab7e5a0cc3a4f31d9\n");
  ASSERT_TRUE(u.ok()) << u.error();
  EXPECT_TRUE(u->active());
  EXPECT_EQ(u->sub_state, "running");
  EXPECT_EQ(u->main_pid, 1234);
  EXPECT_EQ(u->n_restarts, 2);
  EXPECT_EQ(u->restart, "on-failure");
  EXPECT_EQ(u->active_enter_mono, 86125951u);
  EXPECT_EQ(u->invocation_id, "6f8b3ec0e7a34b6ab7e5a0cc3a4f31d9");
}

TEST(SystemdShow, AFailedRunSaysHowItEnded) {
  // After `Main process exited, code=killed, status=9/KILL`.
  auto u = parse_systemctl_show(
      "ActiveState=failed\nSubState=failed\nMainPID=0\nExecMainCode=2\nExecMainStatus=9\n"
      "Result=signal\nInvocationID=\nActiveEnterTimestampMonotonic=0\n");
  ASSERT_TRUE(u.ok()) << u.error();
  EXPECT_FALSE(u->active());
  EXPECT_EQ(u->exec_main_code, 2);
  EXPECT_EQ(u->exec_main_status, 9);
  EXPECT_EQ(u->result, "signal");
  EXPECT_TRUE(u->found());
}

TEST(SystemdShow, AnUnknownUnitAndBadOutput) {
  auto u = parse_systemctl_show("LoadState=not-found\nActiveState=inactive\nSubState=dead\n");
  ASSERT_TRUE(u.ok());
  EXPECT_FALSE(u->found());
  EXPECT_FALSE(parse_systemctl_show("").ok());
  EXPECT_FALSE(parse_systemctl_show("Failed to connect to bus: No such file or directory\n").ok());
  auto bad = parse_systemctl_show("ActiveState=active\nMainPID=12x\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().find("MainPID"), std::string::npos) << bad.error();
  // An empty number (some versions print unset ones so) is 0; a value may hold '='.
  auto e = parse_systemctl_show("ActiveState=active\nMainPID=\nInvocationID=a=b\n");
  ASSERT_TRUE(e.ok()) << e.error();
  EXPECT_EQ(e->main_pid, 0);
  EXPECT_EQ(e->invocation_id, "a=b");
}

TEST(SystemdJournal, JsonLinesAsJournalctlPrintsThem) {
  auto l = parse_journal_json_line(
      R"({"__CURSOR":"s=9b1;i=2b7","__REALTIME_TIMESTAMP":"1700000000123456",)"
      R"("__MONOTONIC_TIMESTAMP":"86125951","_SYSTEMD_UNIT":"comfyui.service",)"
      R"("PRIORITY":"6","MESSAGE":"Starting server"})");
  ASSERT_TRUE(l.has_value());
  EXPECT_EQ(l->realtime_us, 1700000000123456u);
  EXPECT_EQ(l->message, "Starting server");
  // Not UTF-8: an array of bytes. Too large: null.
  auto bytes = parse_journal_json_line(
      R"({"__REALTIME_TIMESTAMP":"1700000000000001","MESSAGE":[104,105,255]})");
  ASSERT_TRUE(bytes.has_value());
  EXPECT_EQ(bytes->message, std::string("hi\xff"));
  auto big = parse_journal_json_line(R"({"__REALTIME_TIMESTAMP":"5","MESSAGE":null})");
  ASSERT_TRUE(big.has_value());
  EXPECT_EQ(big->message, "");
  EXPECT_FALSE(parse_journal_json_line("-- No entries --").has_value());
  EXPECT_FALSE(parse_journal_json_line(R"({"MESSAGE":"no time"})").has_value());
  EXPECT_FALSE(parse_journal_json_line(R"({"__REALTIME_TIMESTAMP":1,"MESSAGE":"x"})").has_value());
  EXPECT_FALSE(
      parse_journal_json_line(R"({"__REALTIME_TIMESTAMP":"1","MESSAGE":[300]})").has_value());
}

TEST(SystemdTool, RunsFromPathAndSaysWhyNot) {
  auto r = run_tool({"sh", "-c", "echo out; echo err >&2; exit 3"}, std::chrono::seconds(5));
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r->exit_code, 3);
  EXPECT_EQ(r->out, "out\n");
  EXPECT_EQ(r->err, "err\n");
  auto missing = run_tool({"/nonexistent/systemctl", "show"}, std::chrono::seconds(5));
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().find("/nonexistent/systemctl"), std::string::npos);
  auto slow = run_tool({"sleep", "10"}, std::chrono::milliseconds(200));
  ASSERT_FALSE(slow.ok());
  EXPECT_NE(slow.error().find("did not finish"), std::string::npos) << slow.error();
  SystemdTools t{"/nonexistent/systemctl", "/nonexistent/journalctl", false};
  EXPECT_FALSE(show_unit(t, "x.service", std::chrono::seconds(5)).ok());
}

}  // namespace
}  // namespace vramd
