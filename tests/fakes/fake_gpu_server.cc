// fake-gpu-server: one GPU model server's HTTP API, faked for tests (see README.md here).
#include <unistd.h>

// GCC 12 needs <utility> before Boost's awaitable.hpp.
#include <utility>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/websocket.hpp>
#include <cctype>
#include <csignal>
#include <cstdio>
#include <string>
#include <vector>

#include "fake_server.h"

namespace vramd::fakes {
namespace {

namespace asio = boost::asio;
namespace http = boost::beast::http;

std::string decode_query_value(const std::string& v) {
  std::string out;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (v[i] == '+') {
      out += ' ';
    } else if (v[i] == '%' && i + 2 < v.size() && std::isxdigit(static_cast<unsigned char>(v[i + 1])) &&
               std::isxdigit(static_cast<unsigned char>(v[i + 2]))) {
      out += static_cast<char>(std::stoi(v.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      out += v[i];
    }
  }
  return out;
}

// The answers of --garbage: invalid JSON, or lines no Prometheus parser accepts.
HttpResponse garbage_reply(const std::string& path) {
  if (is_metrics_path(path))
    return text_reply(200, "vllm:num_requests_running{model_name=\"x\" NaNaN\n}}} 12 34 56\n#TYPE\n",
                      "text/plain; version=0.0.4; charset=utf-8");
  HttpResponse res{http::status::ok, 11};
  res.set(http::field::content_type, "application/json");
  res.body() = "{\"this is\": not json";
  res.prepare_payload();
  return res;
}

asio::awaitable<void> sleep_for(std::chrono::milliseconds d) {
  asio::steady_timer timer(co_await asio::this_coro::executor, d);
  co_await timer.async_wait(asio::use_awaitable);
}

// /fake/*: what tests ask the fake directly.
HttpResponse handle_fake(FakeModel& model, const Call& call) {
  if (call.method == "GET" && call.path == "/fake/state") return json_reply(200, model.fake_state_json());
  if (call.method == "POST" && call.path == "/fake/busy") {
    auto it = call.query.find("for");
    auto d = parse_duration(it == call.query.end() ? "2s" : it->second);
    if (!d) return json_reply(400, {{"error", d.error()}});
    model.make_busy(*d);
    return json_reply(200, model.fake_state_json());
  }
  if (call.method == "POST" && call.path == "/fake/unload") {
    model.unload(call.body);
    return json_reply(200, model.fake_state_json());
  }
  if (call.method == "POST" && call.path == "/fake/load") {
    model.load();
    return json_reply(200, model.fake_state_json());
  }
  return json_reply(404, {{"error", "no such fake control path"}});
}

// "stream": true on an OpenAI completion: the answer as server-sent events, 50 ms apart, as
// vLLM, llama.cpp and the others stream tokens (chat.completion.chunk ... data: [DONE]); with
// stream_options.include_usage, the usage (5 completion tokens) in a last chunk before [DONE].
asio::awaitable<void> stream_completion(FakeModel& model, const Call& call, vramd::HttpStream& out) {
  model.work();
  bool chat = call.path == "/v1/chat/completions";
  if (!co_await out.start_event_stream()) co_return;
  const std::vector<std::string> words = {"Hel", "lo", " from", " the", " fake"};
  for (std::size_t i = 0; i <= words.size(); ++i) {
    nlohmann::json choice = {{"index", 0}, {"finish_reason", nullptr}};
    if (i == words.size()) choice["finish_reason"] = "stop";
    std::string piece = i < words.size() ? words[i] : "";
    if (chat)
      choice["delta"] = i == 0 ? nlohmann::json{{"role", "assistant"}, {"content", piece}}
                               : nlohmann::json{{"content", piece}};
    else
      choice["text"] = piece;
    nlohmann::json ev = {{"id", "cmpl-" + std::to_string(model.work_count())},
                         {"object", chat ? "chat.completion.chunk" : "text_completion"},
                         {"created", 0},
                         {"model", model.options().model},
                         {"choices", nlohmann::json::array({choice})}};
    // Named: GCC 12 may destroy a temporary inside a co_await expression twice.
    std::string frame = "data: " + ev.dump() + "\n\n";
    auto op = out.write(frame);
    if (!co_await std::move(op)) co_return;
    co_await sleep_for(std::chrono::milliseconds(50));
  }
  // stream_options.include_usage (vLLM, llama.cpp): a last chunk with no choices and the usage.
  const nlohmann::json* opts = call.json.is_object() && call.json.contains("stream_options")
                                   ? &call.json["stream_options"]
                                   : nullptr;
  if (opts && opts->is_object() && opts->value("include_usage", false)) {
    const auto n = static_cast<int>(words.size());
    nlohmann::json ev = {{"id", "cmpl-" + std::to_string(model.work_count())},
                         {"object", chat ? "chat.completion.chunk" : "text_completion"},
                         {"created", 0},
                         {"model", model.options().model},
                         {"choices", nlohmann::json::array()},
                         {"usage", {{"prompt_tokens", 5}, {"completion_tokens", n}, {"total_tokens", 5 + n}}}};
    std::string frame = "data: " + ev.dump() + "\n\n";
    auto op = out.write(frame);
    if (!co_await std::move(op)) co_return;
  }
  std::string done = "data: [DONE]\n\n";
  auto op = out.write(done);
  co_await std::move(op);
}

// ComfyUI's GET /ws (server.py's websocket_handler): a `status` message with the queue and the
// session id (the clientId query parameter, else a new one) at once; a first message of type
// `feature_flags` is answered with the server's own; anything else is read and ignored.
asio::awaitable<void> comfyui_ws(FakeModel& model, asio::ip::tcp::socket socket, HttpRequest req,
                                 std::string sid) {
  namespace websocket = boost::beast::websocket;
  websocket::stream<asio::ip::tcp::socket> ws(std::move(socket));
  boost::system::error_code ec;
  co_await ws.async_accept(req, asio::redirect_error(asio::use_awaitable, ec));
  if (ec) co_return;
  ws.text(true);
  nlohmann::json status = {
      {"type", "status"},
      {"data",
       {{"status", {{"exec_info", {{"queue_remaining", model.busy() ? 1 : 0}}}}}, {"sid", sid}}}};
  std::string hello = status.dump();
  co_await ws.async_write(asio::buffer(hello), asio::redirect_error(asio::use_awaitable, ec));
  while (!ec) {
    boost::beast::flat_buffer buffer;
    co_await ws.async_read(buffer, asio::redirect_error(asio::use_awaitable, ec));
    if (ec) break;
    auto m = nlohmann::json::parse(boost::beast::buffers_to_string(buffer.data()), nullptr, false);
    if (m.is_object() && m.value("type", "") == "feature_flags") {
      std::string flags = nlohmann::json{{"type", "feature_flags"},
                                         {"data", {{"supports_preview_metadata", true},
                                                   {"max_upload_size", 104857600}}}}
                              .dump();
      co_await ws.async_write(asio::buffer(flags), asio::redirect_error(asio::use_awaitable, ec));
    }
  }
}

asio::awaitable<HttpResponse> handle(FakeModel& model, HttpRequest req, vramd::HttpStream& out) {
  const Options& o = model.options();
  if (o.hang) {
    // Everything hangs, /fake/* included: the connection stays open and silent.
    asio::steady_timer forever(co_await asio::this_coro::executor,
                               asio::steady_timer::time_point::max());
    boost::system::error_code ec;
    co_await forever.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
  Call call = make_call(req);
  if (call.path.rfind("/fake/", 0) == 0) co_return handle_fake(model, call);
  model.count_request();
  if (o.slow.count() > 0) co_await sleep_for(o.slow);
  if (o.http_500) co_return text_reply(500, "Internal Server Error");
  if (call.method == "POST" && call.json.is_object() && call.json.value("stream", false) == true &&
      (call.path == "/v1/chat/completions" || call.path == "/v1/completions") &&
      o.kind != "comfyui" && o.kind != "ollama" && o.kind != "a1111" && o.kind != "forge") {
    if (auto refused = work_refused(model)) co_return std::move(*refused);
    co_await stream_completion(model, call, out);
    co_return text_reply(200, "");  // ignored: the stream took the connection over
  }
  if (o.kind == "comfyui" && call.path == "/ws" && boost::beast::websocket::is_upgrade(req)) {
    if (auto socket = out.take_tcp_socket()) {
      auto it = call.query.find("clientId");
      std::string sid = it != call.query.end() && !it->second.empty()
                            ? it->second
                            : "fake-" + std::to_string(model.work_count() + 1);
      asio::co_spawn(co_await asio::this_coro::executor,
                     comfyui_ws(model, std::move(*socket), std::move(req), std::move(sid)),
                     asio::detached);
      co_return text_reply(101, "");  // ignored: the WebSocket took the connection over
    }
  }
  HttpResponse res = handle_kind(model, call);
  if (o.garbage) co_return garbage_reply(call.path);
  co_return res;
}

}  // namespace

Call make_call(const HttpRequest& req) {
  Call c;
  c.method = std::string(req.method_string());
  std::string target(req.target());
  auto q = target.find('?');
  c.path = target.substr(0, q);
  if (q != std::string::npos) {
    std::string rest = target.substr(q + 1);
    std::size_t start = 0;
    while (start <= rest.size()) {
      auto amp = rest.find('&', start);
      std::string kv = rest.substr(start, amp == std::string::npos ? std::string::npos : amp - start);
      if (!kv.empty()) {
        auto eq = kv.find('=');
        std::string key = decode_query_value(kv.substr(0, eq));
        std::string value = eq == std::string::npos ? "" : decode_query_value(kv.substr(eq + 1));
        c.query[key] = value;
        c.query_all.emplace(key, value);
      }
      if (amp == std::string::npos) break;
      start = amp + 1;
    }
  }
  c.body = req.body();
  c.json = nlohmann::json::parse(c.body, nullptr, false);
  return c;
}

HttpResponse text_reply(unsigned status, const std::string& body, const std::string& content_type) {
  HttpResponse res{static_cast<http::status>(status), 11};
  res.set(http::field::content_type, content_type);
  res.body() = body;
  res.prepare_payload();
  return res;
}

HttpResponse json_reply(unsigned status, const nlohmann::json& body) {
  return json_response(status, body.dump());
}

HttpResponse empty_reply(unsigned status) {
  HttpResponse res{static_cast<http::status>(status), 11};
  res.prepare_payload();
  return res;
}

}  // namespace vramd::fakes

int main(int argc, char** argv) {
  using namespace vramd::fakes;
  auto options = parse_options(std::vector<std::string>(argv + 1, argv + argc));
  if (!options) {
    std::fprintf(stderr, "fake-gpu-server: %s\n", options.error().c_str());
    std::fprintf(stderr,
                 "usage: fake-gpu-server --kind K --port P [--host H] [--state FILE] [--gpu N]\n"
                 "  [--model-bytes SIZE] [--model NAME] [--unloaded] [--na] [--self-report SIZE]\n"
                 "  [--unload-delay DUR] [--partial PCT] [--ignore-unload] [--hang] [--http-500]\n"
                 "  [--garbage] [--slow DUR] [--crash-on-unload] [--busy-for DUR] [--router]\n"
                 "  [--asleep-keeps SIZE] [--weights-ram SIZE]\n"
                 "  [--workers N] [--keep-alive DUR|none] [--max-requests N]\n"
                 "  [--keep-alive-header on|off] [--close-on-error on|off]\n"
                 "  [--split-writes on|off] [--nodelay on|off]\n");
    return 2;
  }
  boost::asio::io_context io;
  FakeModel model(io, *options);
  if (!options->start_unloaded) model.load(/*initial=*/true);

  vramd::HttpLimits limits;
  limits.read_timeout = std::chrono::seconds(3600);  // --slow and --hang outlast the default
  // No idle timeout (Ollama's): a year stands for never.
  limits.idle_timeout = options->wire.keep_alive.value_or(std::chrono::hours(24 * 365));
  vramd::HttpServer server(
      io, [&model](vramd::HttpRequest req, vramd::HttpStream& out) {
        return handle(model, std::move(req), out);
      },
      limits);
  server.set_wire(options->wire.http);
  std::string host = options->host.find(':') != std::string::npos ? "[" + options->host + "]"
                                                                   : options->host;
  auto st = server.listen_tcp(host + ":" + std::to_string(options->port));
  if (!st) {
    std::fprintf(stderr, "fake-gpu-server: %s\n", st.error().c_str());
    model.release();
    return 1;
  }

  boost::asio::signal_set signals(io, SIGTERM, SIGINT);
  signals.async_wait([&](const boost::system::error_code&, int) {
    model.release();
    std::fflush(stdout);
    ::_exit(0);
  });
  std::signal(SIGPIPE, SIG_IGN);

  std::printf("ready %d\n", server.tcp_port());
  std::fflush(stdout);
  io.run();
  model.release();
  return 0;
}
