#include "services/prometheus.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>

namespace vramd {
namespace {

bool is_name_start(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == ':';
}
bool is_name_char(char c) {
  return is_name_start(c) || std::isdigit(static_cast<unsigned char>(c));
}

void skip_blanks(std::string_view s, size_t& i) {
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
}

std::string_view read_name(std::string_view s, size_t& i) {
  size_t start = i;
  if (i >= s.size() || !is_name_start(s[i])) return {};
  while (i < s.size() && is_name_char(s[i])) ++i;
  return s.substr(start, i - start);
}

// "1.5e+09", "NaN", "+Inf", "-Inf", "0x1p3" is not allowed (Go's ParseFloat accepts less).
std::optional<double> parse_value(std::string_view t) {
  if (t == "NaN" || t == "nan") return std::numeric_limits<double>::quiet_NaN();
  if (t == "+Inf" || t == "Inf" || t == "+inf" || t == "inf") {
    return std::numeric_limits<double>::infinity();
  }
  if (t == "-Inf" || t == "-inf") return -std::numeric_limits<double>::infinity();
  if (!t.empty() && t.front() == '+') t.remove_prefix(1);
  if (t.empty()) return std::nullopt;
  double v = 0;
  auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (ec != std::errc() || end != t.data() + t.size()) return std::nullopt;
  return v;
}

// Parses "{a="x",b="y\"z"}" starting at s[i] == '{'.
bool read_labels(std::string_view s, size_t& i, PromSample& out) {
  ++i;  // '{'
  for (;;) {
    skip_blanks(s, i);
    if (i < s.size() && s[i] == '}') {
      ++i;
      return true;
    }
    std::string_view name = read_name(s, i);
    if (name.empty()) return false;
    skip_blanks(s, i);
    if (i >= s.size() || s[i] != '=') return false;
    ++i;
    skip_blanks(s, i);
    if (i >= s.size() || s[i] != '"') return false;
    ++i;
    std::string value;
    for (;;) {
      if (i >= s.size()) return false;
      char c = s[i++];
      if (c == '"') break;
      if (c == '\\') {
        if (i >= s.size()) return false;
        char e = s[i++];
        value += e == 'n' ? '\n' : e;  // \\ and \" stand for themselves
      } else {
        value += c;
      }
    }
    out.labels.emplace_back(std::string(name), std::move(value));
    skip_blanks(s, i);
    if (i < s.size() && s[i] == ',') ++i;
  }
}

std::optional<PromSample> parse_sample(std::string_view line) {
  PromSample sample;
  size_t i = 0;
  std::string_view name = read_name(line, i);
  if (name.empty()) return std::nullopt;
  sample.name = std::string(name);
  skip_blanks(line, i);
  if (i < line.size() && line[i] == '{' && !read_labels(line, i, sample)) return std::nullopt;
  skip_blanks(line, i);
  size_t start = i;
  while (i < line.size() && line[i] != ' ' && line[i] != '\t') ++i;
  std::optional<double> value = parse_value(line.substr(start, i - start));
  if (!value) return std::nullopt;
  sample.value = *value;
  skip_blanks(line, i);
  if (i < line.size()) {
    std::string_view ts = line.substr(i);
    while (!ts.empty() && (ts.back() == ' ' || ts.back() == '\t')) ts.remove_suffix(1);
    std::int64_t t = 0;
    auto [end, ec] = std::from_chars(ts.data(), ts.data() + ts.size(), t);
    if (ec != std::errc() || end != ts.data() + ts.size()) return std::nullopt;
    sample.timestamp_ms = t;
  }
  return sample;
}

}  // namespace

bool PromExposition::declared(std::string_view name) const {
  std::string n(name);
  if (help.count(n) || type.count(n)) return true;
  for (const PromSample& s : samples) {
    if (s.name == name) return true;
  }
  return false;
}

std::optional<double> PromExposition::sum(std::string_view name) const {
  std::optional<double> total;
  for (const PromSample& s : samples) {
    if (s.name != name) continue;
    if (!total) total = 0.0;
    if (!std::isnan(s.value)) *total += s.value;
  }
  return total;
}

PromExposition parse_prometheus(std::string_view text) {
  PromExposition out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    std::string_view line =
        text.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos);
    pos = nl == std::string_view::npos ? text.size() : nl + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    size_t i = 0;
    skip_blanks(line, i);
    line.remove_prefix(i);
    if (line.empty()) continue;
    if (line.front() == '#') {
      // "# HELP name text" / "# TYPE name type"; any other comment is ignored.
      size_t j = 1;
      skip_blanks(line, j);
      std::string_view rest = line.substr(j);
      bool is_help = rest.substr(0, 5) == "HELP ";
      bool is_type = rest.substr(0, 5) == "TYPE ";
      if (!is_help && !is_type) continue;
      size_t k = 5;
      skip_blanks(rest, k);
      std::string_view name = read_name(rest, k);
      if (name.empty()) {
        ++out.skipped_lines;
        continue;
      }
      skip_blanks(rest, k);
      std::string value(rest.substr(k));
      (is_help ? out.help : out.type)[std::string(name)] = std::move(value);
      continue;
    }
    if (std::optional<PromSample> s = parse_sample(line)) {
      out.samples.push_back(std::move(*s));
    } else {
      ++out.skipped_lines;
    }
  }
  return out;
}

}  // namespace vramd
