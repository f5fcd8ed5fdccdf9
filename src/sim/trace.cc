#include "sim/trace.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/config.h"

namespace vramd::sim {

namespace {

using nlohmann::json;

constexpr double kMaxSeconds = 1e8;  // ~3 years: keeps every time well inside int64 ms
constexpr unsigned kMaxGpus = 64;

// The keys each line type may carry (besides "t" and "type").
const std::map<std::string, std::vector<std::string>>& keys_by_type() {
  static const std::map<std::string, std::vector<std::string>> k = {
      {"gpu", {"index", "total", "baseline"}},
      {"host", {"ram"}},
      {"service",
       {"name", "gpu", "model_bytes", "context_bytes", "load_seconds", "unload_seconds",
        "unload_effective", "restart_seconds", "sleep1_seconds", "host_bytes"}},
      {"request", {"service", "duration"}},
      {"job", {"name", "gpu", "bytes", "duration", "priority", "preemptible"}},
      {"end", {}},
  };
  return k;
}

// One line being read: its text (for columns) and where errors point.
class Line {
 public:
  Line(const std::string& path, size_t number, std::string_view text, const json& j)
      : path_(path), number_(number), text_(text), j_(j) {}

  // Column of `"key"` in the line (1-based), so errors point at the field (or, when it is
  // missing, at the line's closing brace).
  size_t column_of(const std::string& key) const {
    size_t at = text_.find("\"" + key + "\"");
    if (at != std::string_view::npos) return at + 1;
    size_t end = text_.rfind('}');  // a missing key: where it should have been
    return end == std::string_view::npos ? 1 : end + 1;
  }
  Error error(const std::string& key, const std::string& what) const {
    return make_error(fmt::format("{}:{}:{}: {}", path_, number_, column_of(key), what));
  }
  bool has(const std::string& key) const { return j_.contains(key); }
  const json& at(const std::string& key) const { return j_.at(key); }

  Result<double> seconds(const std::string& key, std::optional<double> fallback) const {
    if (!has(key)) {
      if (fallback) return *fallback;
      return error(key, fmt::format("missing '{}' (seconds)", key));
    }
    const json& v = at(key);
    if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0 ||
        v.get<double>() > kMaxSeconds)
      return error(key,
                   fmt::format("'{}' must be a number of seconds >= 0, got {}", key, v.dump()));
    return v.get<double>();
  }
  Result<Bytes> size(const std::string& key, std::optional<Bytes> fallback) const {
    if (!has(key)) {
      if (fallback) return *fallback;
      return error(key, fmt::format("missing '{}' (a size, e.g. \"16GiB\")", key));
    }
    const json& v = at(key);
    if (v.is_number_integer() && v.get<int64_t>() == 0) return Bytes{0};
    if (!v.is_string())
      return error(key,
                   fmt::format("'{}' must be a size such as \"16GiB\", got {}", key, v.dump()));
    auto b = parse_size(v.get<std::string>());
    if (!b) return error(key, fmt::format("'{}': {}", key, b.error()));
    return *b;
  }
  Result<std::string> name(const std::string& key) const {
    if (!has(key)) return error(key, fmt::format("missing '{}'", key));
    const json& v = at(key);
    if (!v.is_string() || v.get<std::string>().empty() || v.get<std::string>().size() > 128)
      return error(key, fmt::format("'{}' must be a non-empty string, got {}", key, v.dump()));
    const std::string& s = v.get_ref<const std::string&>();
    for (char c : s)
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' ||
            c == ':' || c == '#'))
        return error(key, fmt::format("'{}' may hold only letters, digits and -_.:#, got {}", key,
                                      v.dump()));
    return s;
  }
  Result<int64_t> integer(const std::string& key, int64_t lo, int64_t hi,
                          std::optional<int64_t> fallback) const {
    if (!has(key)) {
      if (fallback) return *fallback;
      return error(key, fmt::format("missing '{}'", key));
    }
    const json& v = at(key);
    if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi ||
        (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(hi)))
      return error(
          key, fmt::format("'{}' must be an integer from {} to {}, got {}", key, lo, hi, v.dump()));
    return v.get<int64_t>();
  }

 private:
  const std::string& path_;
  size_t number_;
  std::string_view text_;
  const json& j_;
};

Ms to_ms(double seconds) { return static_cast<Ms>(std::llround(seconds * 1000.0)); }

// Reads one line into `trace`. `t` is the line's time, already checked.
class Reader {
 public:
  explicit Reader(Trace& trace) : trace_(trace) {}

  Status line(const Line& l, const std::string& type, Ms t) {
    if (type == "gpu") return gpu(l);
    if (type == "host") return host(l);
    if (type == "service") return service(l);
    if (type == "request") return request(l, t);
    if (type == "job") return job(l, t);
    return Ok{};  // "end": its t is all it says
  }

 private:
  Status gpu(const Line& l) {
    auto index = l.integer("index", 0, kMaxGpus - 1, std::nullopt);
    if (!index) return Error{index.error()};
    if (trace_.gpu(unsigned(*index)))
      return l.error("index", fmt::format("GPU {} is defined twice", *index));
    auto total = l.size("total", std::nullopt);
    if (!total) return Error{total.error()};
    auto baseline = l.size("baseline", Bytes{0});
    if (!baseline) return Error{baseline.error()};
    if (*total == 0) return l.error("total", "'total' must be more than 0");
    if (*baseline >= *total) return l.error("baseline", "'baseline' must be less than 'total'");
    trace_.gpus.push_back({unsigned(*index), *total, *baseline});
    return Ok{};
  }

  Status host(const Line& l) {
    if (trace_.host_ram) return l.error("ram", "the host is defined twice");
    auto ram = l.size("ram", std::nullopt);
    if (!ram) return Error{ram.error()};
    if (*ram == 0) return l.error("ram", "'ram' must be more than 0");
    trace_.host_ram = *ram;
    return Ok{};
  }

  Status service(const Line& l) {
    TraceService s;
    auto name = l.name("name");
    if (!name) return Error{name.error()};
    if (trace_.service_index(*name) >= 0)
      return l.error("name", fmt::format("service '{}' is defined twice", *name));
    s.name = *name;
    auto gpu = l.integer("gpu", 0, kMaxGpus - 1, std::nullopt);
    if (!gpu) return Error{gpu.error()};
    if (!trace_.gpu(unsigned(*gpu)))
      return l.error("gpu", fmt::format("no GPU {} (define it with a \"gpu\" line first)", *gpu));
    s.gpu = unsigned(*gpu);
    auto model = l.size("model_bytes", std::nullopt);
    if (!model) return Error{model.error()};
    auto context = l.size("context_bytes", Bytes{0});
    if (!context) return Error{context.error()};
    s.model_bytes = *model;
    s.context_bytes = *context;
    if (s.footprint() > trace_.gpu(s.gpu)->total - trace_.gpu(s.gpu)->baseline)
      return l.error("model_bytes", fmt::format("{} needs {}: more than GPU {} has", s.name,
                                                format_size(s.footprint()), s.gpu));
    auto load = l.seconds("load_seconds", std::nullopt);
    if (!load) return Error{load.error()};
    auto unload = l.seconds("unload_seconds", 1.0);
    if (!unload) return Error{unload.error()};
    auto restart = l.seconds("restart_seconds", *load);
    if (!restart) return Error{restart.error()};
    s.load = to_ms(*load);
    s.unload = to_ms(*unload);
    s.restart = to_ms(*restart);
    // A level-1 sleep (weights to host RAM) where it says how long its wake takes.
    if (l.has("sleep1_seconds")) {
      auto sleep1 = l.seconds("sleep1_seconds", std::nullopt);
      if (!sleep1) return Error{sleep1.error()};
      s.sleep1 = to_ms(*sleep1);
    }
    auto host_bytes = l.size("host_bytes", s.model_bytes);
    if (!host_bytes) return Error{host_bytes.error()};
    if (l.has("host_bytes") && s.sleep1 < 0)
      return l.error("host_bytes", "'host_bytes' is what a level-1 sleep keeps: give "
                                   "'sleep1_seconds' too");
    s.host_bytes = *host_bytes;
    if (l.has("unload_effective")) {
      const json& v = l.at("unload_effective");
      if (!v.is_number() || !(v.get<double>() >= 0.0 && v.get<double>() <= 1.0))
        return l.error(
            "unload_effective",
            fmt::format("'unload_effective' must be a number from 0 to 1, got {}", v.dump()));
      s.unload_effective = v.get<double>();
    }
    trace_.services.push_back(std::move(s));
    return Ok{};
  }

  Status request(const Line& l, Ms t) {
    auto name = l.name("service");
    if (!name) return Error{name.error()};
    int index = trace_.service_index(*name);
    if (index < 0)
      return l.error("service", fmt::format("no service '{}' (define it with a \"service\" line "
                                            "first)",
                                            *name));
    auto duration = l.seconds("duration", std::nullopt);
    if (!duration) return Error{duration.error()};
    trace_.requests.push_back({t, size_t(index), to_ms(*duration)});
    return Ok{};
  }

  Status job(const Line& l, Ms t) {
    TraceJob j;
    j.t = t;
    auto name = l.name("name");
    if (!name) return Error{name.error()};
    j.name = *name;
    auto gpu = l.integer("gpu", 0, kMaxGpus - 1, std::nullopt);
    if (!gpu) return Error{gpu.error()};
    const TraceGpu* g = trace_.gpu(unsigned(*gpu));
    if (!g) return l.error("gpu", fmt::format("no GPU {}", *gpu));
    j.gpu = unsigned(*gpu);
    auto bytes = l.size("bytes", std::nullopt);
    if (!bytes) return Error{bytes.error()};
    if (*bytes == 0 || *bytes > g->total - g->baseline)
      return l.error("bytes", fmt::format("'bytes' must be more than 0 and fit GPU {} ({} free "
                                          "at most)",
                                          j.gpu, format_size(g->total - g->baseline)));
    j.bytes = *bytes;
    auto duration = l.seconds("duration", std::nullopt);
    if (!duration) return Error{duration.error()};
    j.duration = to_ms(*duration);
    auto priority = l.integer("priority", -1000, 1000, int64_t{0});
    if (!priority) return Error{priority.error()};
    j.priority = int(*priority);
    if (l.has("preemptible")) {
      if (!l.at("preemptible").is_boolean())
        return l.error("preemptible", "'preemptible' must be true or false");
      j.preemptible = l.at("preemptible").get<bool>();
    }
    trace_.jobs.push_back(std::move(j));
    return Ok{};
  }

  Trace& trace_;
};

// Checks the line's shape (an object with a known type and known keys) and its time.
Result<Ms> check_shape(const Line& l, const json& j, std::string& type) {
  if (!j.contains("type") || !j.at("type").is_string())
    return l.error("type", "each line needs \"type\": gpu, service, request, job or end");
  type = j.at("type").get<std::string>();
  auto known = keys_by_type().find(type);
  if (known == keys_by_type().end())
    return l.error("type", fmt::format("unknown type \"{}\": expected gpu, service, request, job "
                                       "or end",
                                       type));
  for (const auto& [key, value] : j.items()) {
    if (key == "t" || key == "type") continue;
    const auto& allowed = known->second;
    if (std::find(allowed.begin(), allowed.end(), key) != allowed.end()) continue;
    std::string hint = suggest(key, allowed);
    return l.error(key, fmt::format("unknown key '{}' in a \"{}\" line{}", key, type,
                                    hint.empty() ? "" : "; did you mean '" + hint + "'?"));
  }
  auto t = l.seconds("t", std::nullopt);
  if (!t) return Error{t.error()};
  return to_ms(*t);
}

}  // namespace

const TraceGpu* Trace::gpu(unsigned index) const {
  for (const auto& g : gpus)
    if (g.index == index) return &g;
  return nullptr;
}

int Trace::service_index(std::string_view name) const {
  for (size_t i = 0; i < services.size(); ++i)
    if (services[i].name == name) return int(i);
  return -1;
}

Result<Trace> parse_trace(std::string_view text, const std::string& path) {
  Trace trace;
  Reader reader(trace);
  size_t number = 0;
  bool ended = false;
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string_view raw = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    ++number;
    if (raw.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    json j;
    try {
      j = json::parse(raw);
    } catch (const json::parse_error& e) {
      std::string what = e.what();
      // "[json.exception.parse_error.101] parse error at line 1, column 20: syntax error ...":
      // the position is ours to give.
      if (size_t at = what.find("column "); at != std::string::npos)
        if (size_t colon = what.find(": ", at); colon != std::string::npos)
          what = what.substr(colon + 2);
      return make_error(
          fmt::format("{}:{}:{}: not JSON: {}", path, number, std::max<size_t>(e.byte, 1), what));
    } catch (const json::exception& e) {
      // A number too large for a double (out_of_range.406) comes without a position.
      std::string what = e.what();
      if (size_t at = what.find("] "); at != std::string::npos) what = what.substr(at + 2);
      return make_error(fmt::format("{}:{}:1: not JSON: {}", path, number, what));
    }
    Line l(path, number, raw, j);
    if (!j.is_object())
      return make_error(fmt::format("{}:{}:1: each line must be a JSON object", path, number));
    if (ended) return l.error("type", "nothing may follow the \"end\" line");
    std::string type;
    auto t = check_shape(l, j, type);
    if (!t) return Error{t.error()};
    if (auto s = reader.line(l, type, *t); !s) return Error{s.error()};
    trace.end = std::max(trace.end, *t);
    ended = type == "end";
  }
  if (trace.gpus.empty()) return make_error(fmt::format("{}: no \"gpu\" line", path));
  auto by_t = [](const auto& a, const auto& b) { return a.t < b.t; };
  std::stable_sort(trace.requests.begin(), trace.requests.end(), by_t);
  std::stable_sort(trace.jobs.begin(), trace.jobs.end(), by_t);
  return trace;
}

}  // namespace vramd::sim
