// The request path's record: the usage read from a response's tail, and the ring it goes into.
#include "proxy/request_log.h"

#include <gtest/gtest.h>

#include <string>

namespace vramd {
namespace request_log_test {

void feed_in_pieces(UsageScan& s, const std::string& body, size_t piece) {
  for (size_t i = 0; i < body.size(); i += piece)
    s.feed(body.data() + i, std::min(piece, body.size() - i));
}

TEST(UsageScan, OpenAiStreamWithUsageInItsLastEvent) {
  // vLLM with stream_options.include_usage: a last chunk with no choices and the usage.
  std::string body;
  for (int i = 0; i < 200; ++i)
    body += R"(data: {"id":"cmpl-1","object":"chat.completion.chunk","model":"Qwen/Qwen2.5-7B-Instruct","choices":[{"index":0,"delta":{"content":"tok"}}]})"
            "\n\n";
  body += R"(data: {"id":"cmpl-1","object":"chat.completion.chunk","model":"Qwen/Qwen2.5-7B-Instruct","choices":[],"usage":{"prompt_tokens":12,"total_tokens":212,"completion_tokens":200}})"
          "\n\ndata: [DONE]\n\n";
  UsageScan s;
  feed_in_pieces(s, body, 97);
  EXPECT_DOUBLE_EQ(s.tokens_per_second(4.0), 50.0);
  EXPECT_EQ(s.model(), "Qwen/Qwen2.5-7B-Instruct");
  EXPECT_LE(s.tail().size(), UsageScan::kTail);
}

TEST(UsageScan, OllamaLastLineAndLlamaCppTimings) {
  UsageScan o;
  std::string ollama =
      R"({"model":"llama3.2","created_at":"2026-12-03T20:00:00Z","message":{"role":"assistant","content":""},"done":true,"total_duration":5043500667,"load_duration":5025959,"prompt_eval_count":26,"prompt_eval_duration":325953000,"eval_count":290,"eval_duration":4709213000})"
      "\n";
  feed_in_pieces(o, ollama, 1000);
  EXPECT_NEAR(o.tokens_per_second(99), 290 / 4.709213, 1e-6);
  EXPECT_EQ(o.model(), "llama3.2");

  UsageScan l;
  std::string llama =
      R"({"choices":[{"message":{"content":"hi"}}],"usage":{"completion_tokens":10,"prompt_tokens":5},"timings":{"prompt_n":5,"predicted_n":10,"predicted_per_second": 61.5}})";
  l.feed(llama.data(), llama.size());
  EXPECT_DOUBLE_EQ(l.tokens_per_second(1.0), 61.5);  // its own figure wins
}

TEST(UsageScan, NoUsageSaysNothing) {
  UsageScan s;
  std::string body = R"({"error":{"message":"model not found"}})";
  s.feed(body.data(), body.size());
  EXPECT_LT(s.tokens_per_second(1.0), 0);
  s.reset();
  EXPECT_LT(s.tokens_per_second(1.0), 0);
  EXPECT_EQ(s.model(), "");
  // A key that is only a prefix of another, or a value that is no number.
  std::string tricky = R"({"xcompletion_tokens":5,"completion_tokens":"many"})";
  s.feed(tricky.data(), tricky.size());
  EXPECT_LT(s.tokens_per_second(1.0), 0);
  double v = 0;
  EXPECT_FALSE(last_json_number("\"completion_tokens\"", "completion_tokens", v));
}

TEST(RequestLog, KeepsSamplesInOrderAndCountsWhatAFullRingDrops) {
  RequestLog log(3);
  for (int i = 0; i < 5; ++i) {
    RequestSample s;
    s.set_service("ollama");
    s.set_model(std::string(300, 'm'));  // longer than the field: cut, never overflowing
    s.status = static_cast<uint16_t>(200 + i);
    log.push(s);
  }
  std::vector<RequestSample> out;
  log.drain(out);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].status, 200);
  EXPECT_EQ(out[2].status, 202);
  EXPECT_EQ(out[0].service_name(), "ollama");
  EXPECT_EQ(out[0].model_name().size(), 127u);
  EXPECT_EQ(log.dropped(), 2u);
  EXPECT_EQ(log.pushed(), 5u);
  RequestSample s;
  s.status = 500;
  log.push(s);  // room again after the drain
  out.clear();
  log.drain(out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].status, 500);
}

TEST(RequestSample, AnEmptyModelIsEmptyWhateverItsView) {
  // A request without a model and an answer that named none: a default view, whose data() is
  // null (UBSan rejects a memcpy from it even of 0 bytes; the demo's WebSocket hit it).
  RequestSample s;
  s.set_model("llama3.1:8b");
  s.set_model(std::string_view());
  EXPECT_EQ(s.model_name(), "");
  s.set_service(std::string_view());
  EXPECT_EQ(s.service_name(), "");
  UsageScan u;
  u.feed(nullptr, 0);
  EXPECT_EQ(u.model(), "");
}

TEST(RequestLog, TellsOnceWhenHalfFullUntilTheNextDrain) {
  RequestLog log(4);
  int told = 0;
  log.on_half_full([&] { ++told; });
  RequestSample s;
  log.push(s);
  EXPECT_EQ(told, 0);
  log.push(s);
  EXPECT_EQ(told, 1);  // 2 of 4
  log.push(s);
  EXPECT_EQ(told, 1);  // once until drained
  std::vector<RequestSample> out;
  log.drain(out);
  EXPECT_EQ(out.size(), 3u);
  log.push(s);
  log.push(s);
  EXPECT_EQ(told, 2);
}

}  // namespace request_log_test
}  // namespace vramd
