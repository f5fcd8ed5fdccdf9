#include "core/units.h"
#include "core/text.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <string>

#include <fmt/format.h>

namespace vramd {
namespace {

// Reads a non-negative decimal number ("12", "1.5") at the front of `s`.
std::optional<double> take_number(std::string_view& s) {
  size_t i = 0;
  bool digits = false, dot = false;
  while (i < s.size()) {
    char c = s[i];
    if (std::isdigit(static_cast<unsigned char>(c))) {
      digits = true;
    } else if (c == '.' && !dot) {
      dot = true;
    } else {
      break;
    }
    ++i;
  }
  if (!digits) return std::nullopt;
  // strtod, not stod: 400 nines give HUGE_VAL (callers say "too large") where stod throws.
  std::string text(s.substr(0, i));
  double v = std::strtod(text.c_str(), nullptr);
  s.remove_prefix(i);
  return v;
}

}  // namespace

Result<Bytes> parse_size(std::string_view text) {
  std::string_view s = trim(text);
  auto bad = [&] {
    return make_error(fmt::format(
        "invalid size '{}': expected a number with a unit, like \"16GiB\", \"512MiB\" or \"16GB\"",
        text));
  };
  auto number = take_number(s);
  if (!number) return bad();
  std::string unit = lower(trim(s));
  double mult = 0;
  if (unit.empty() || unit == "b")
    mult = 1;
  else if (unit == "k" || unit == "kib")
    mult = double(KiB);
  else if (unit == "m" || unit == "mib")
    mult = double(MiB);
  else if (unit == "g" || unit == "gib")
    mult = double(GiB);
  else if (unit == "t" || unit == "tib")
    mult = double(GiB) * 1024;
  else if (unit == "kb")
    mult = 1e3;
  else if (unit == "mb")
    mult = 1e6;
  else if (unit == "gb")
    mult = 1e9;
  else if (unit == "tb")
    mult = 1e12;
  else
    return bad();
  // A bare number was read as bytes, so "--vram 12" asked for 12 bytes: refused, with the
  // likely meaning. Zero needs no unit; "12B" says bytes on purpose.
  if (unit.empty() && *number != 0) {
    std::string_view digits = trim(text);
    return make_error(fmt::format("{}: give a unit, e.g. {}GiB", digits, digits));
  }
  double v = *number * mult;
  if (v > 1.8e19) return make_error(fmt::format("size '{}' is too large", text));
  if (unit == "b") {
    if (*number != std::floor(*number))
      return make_error(fmt::format("size '{}' is not a whole number of bytes", text));
  }
  return static_cast<Bytes>(std::llround(v));
}

std::string format_size(Bytes bytes) {
  if (bytes < KiB) return fmt::format("{} B", bytes);
  if (bytes < MiB) return fmt::format("{:.0f} KiB", double(bytes) / double(KiB));
  if (bytes < GiB) return fmt::format("{:.0f} MiB", double(bytes) / double(MiB));
  if (bytes < GiB * 1024) return fmt::format("{:.1f} GiB", double(bytes) / double(GiB));
  return fmt::format("{:.1f} TiB", double(bytes) / double(GiB) / 1024);
}

Result<Duration> parse_duration(std::string_view text) {
  std::string_view s = trim(text);
  auto bad = [&] {
    return make_error(fmt::format(
        "invalid duration '{}': expected a number with a unit, like \"300ms\", \"5m\" or \"1h30m\"",
        text));
  };
  if (s.empty()) return bad();
  double total_ms = 0;
  bool any = false;
  while (!s.empty()) {
    auto number = take_number(s);
    if (!number) return bad();
    size_t i = 0;
    while (i < s.size() && std::isalpha(static_cast<unsigned char>(s[i]))) ++i;
    std::string unit = lower(s.substr(0, i));
    s.remove_prefix(i);
    double mult;
    if (unit.empty()) {
      if (any || !s.empty()) return bad();  // a bare number only on its own: seconds
      mult = 1000;
    } else if (unit == "ms")
      mult = 1;
    else if (unit == "s")
      mult = 1000;
    else if (unit == "m" || unit == "min")
      mult = 60e3;
    else if (unit == "h")
      mult = 3600e3;
    else if (unit == "d")
      mult = 86400e3;
    else
      return bad();
    total_ms += *number * mult;
    any = true;
  }
  if (total_ms > 1e15) return make_error(fmt::format("duration '{}' is too long", text));
  return Duration(static_cast<Duration::rep>(std::llround(total_ms)));
}

std::string format_duration(Duration d) {
  long long ms = d.count();
  if (ms == 0) return "0s";
  std::string out;
  if (ms < 0) {
    out = "-";
    ms = -ms;
  }
  if (ms < 1000) return out + fmt::format("{}ms", ms);
  const struct {
    long long ms;
    const char* unit;
  } units[] = {{86400000, "d"}, {3600000, "h"}, {60000, "m"}, {1000, "s"}, {1, "ms"}};
  for (const auto& u : units) {
    if (ms >= u.ms) {
      out += fmt::format("{}{}", ms / u.ms, u.unit);
      ms %= u.ms;
    }
  }
  return out;
}

std::string format_age(Duration d) {
  long long s = std::chrono::duration_cast<std::chrono::seconds>(d).count();
  if (s < 0) s = 0;
  if (s < 60) return fmt::format("{} s", s);
  if (s < 3600) return fmt::format("{} min", s / 60);
  if (s < 86400) {
    long long m = (s % 3600) / 60;
    return m ? fmt::format("{} h {} min", s / 3600, m) : fmt::format("{} h", s / 3600);
  }
  long long h = (s % 86400) / 3600;
  return h ? fmt::format("{} d {} h", s / 86400, h) : fmt::format("{} d", s / 86400);
}

std::string format_rfc3339(TimePoint t) {
  long long ms = t.time_since_epoch().count();
  long long secs = ms >= 0 ? ms / 1000 : (ms - 999) / 1000;
  int frac = static_cast<int>(ms - secs * 1000);
  std::time_t tt = static_cast<std::time_t>(secs);
  std::tm tm{};
  gmtime_r(&tt, &tm);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", tm.tm_year + 1900, tm.tm_mon + 1,
                     tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, frac);
}

Result<TimePoint> parse_rfc3339(std::string_view text) {
  // YYYY-MM-DDTHH:MM:SS[.fff...](Z|+HH:MM|-HH:MM), every field its exact digits (no signs or
  // spaces, which sscanf's %d would take), each within its range.
  std::string_view s = trim(text);
  auto bad = [&] { return make_error(fmt::format("invalid time '{}': expected RFC 3339", text)); };
  auto digits = [&](size_t at, size_t n) -> std::optional<int> {
    if (at + n > s.size()) return std::nullopt;
    int v = 0;
    for (size_t i = at; i < at + n; ++i) {
      if (!std::isdigit(static_cast<unsigned char>(s[i]))) return std::nullopt;
      v = v * 10 + (s[i] - '0');
    }
    return v;
  };
  auto Y = digits(0, 4), M = digits(5, 2), D = digits(8, 2), h = digits(11, 2), m = digits(14, 2),
       sec = digits(17, 2);
  if (!Y || !M || !D || !h || !m || !sec || s[4] != '-' || s[7] != '-' ||
      (s[10] != 'T' && s[10] != 't' && s[10] != ' ') || s[13] != ':' || s[16] != ':')
    return bad();
  if (*M < 1 || *M > 12 || *D < 1 || *D > 31 || *h > 23 || *m > 59 || *sec > 60) return bad();
  std::string_view rest = s.substr(19);
  long long frac_ms = 0;
  if (!rest.empty() && rest[0] == '.') {
    rest.remove_prefix(1);
    int n = 0;
    while (!rest.empty() && std::isdigit(static_cast<unsigned char>(rest[0]))) {
      if (n < 3) frac_ms = frac_ms * 10 + (rest[0] - '0');
      ++n;
      rest.remove_prefix(1);
    }
    if (n == 0) return bad();
    for (; n < 3; ++n) frac_ms *= 10;
  }
  long long offset_s = 0;
  if (rest == "Z" || rest == "z") {
  } else if (rest.size() == 6 && (rest[0] == '+' || rest[0] == '-') && rest[3] == ':') {
    size_t at = s.size() - 6;
    auto oh = digits(at + 1, 2), om = digits(at + 4, 2);
    if (!oh || !om || *oh > 23 || *om > 59) return bad();
    offset_s = (*oh * 3600LL + *om * 60LL) * (rest[0] == '+' ? 1 : -1);
  } else {
    return bad();
  }
  std::tm tm{};
  tm.tm_year = *Y - 1900;
  tm.tm_mon = *M - 1;
  tm.tm_mday = *D;
  tm.tm_hour = *h;
  tm.tm_min = *m;
  tm.tm_sec = *sec;
  long long epoch = static_cast<long long>(timegm(&tm)) - offset_s;
  return TimePoint(Duration(epoch * 1000 + frac_ms));
}

}  // namespace vramd
