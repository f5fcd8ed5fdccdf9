#include "sim/plot.h"

#include <algorithm>
#include <functional>

#include <fmt/format.h>

namespace vramd::sim {

namespace {

constexpr int kWidth = 900, kPanel = 110, kLeft = 150, kRight = 20, kTop = 40, kGap = 30;
constexpr const char* kColors[] = {"#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#edc948",
                                   "#76b7b2", "#ff9da7", "#9c755f", "#bab0ac", "#e15759"};
constexpr const char* kJobColor = "#333333";

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '&')
      out += "&amp;";
    else if (c == '"')
      out += "&quot;";
    else
      out += c;
  }
  return out;
}

// One band of a stacked step chart: the area between `lower` and `lower + own` over time.
std::string band(const std::vector<World::TimelinePoint>& line, Ms end, double x0, double xs,
                 double y0, double ys, const std::function<Bytes(const World::TimelinePoint&)>& lo,
                 const std::function<Bytes(const World::TimelinePoint&)>& hi, const char* color) {
  std::string top, bottom;
  for (size_t k = 0; k < line.size(); ++k) {
    Ms t0 = line[k].t, t1 = k + 1 < line.size() ? line[k + 1].t : end;
    double xa = x0 + double(t0) * xs, xb = x0 + double(t1) * xs;
    double yh = y0 - double(hi(line[k])) * ys, yl = y0 - double(lo(line[k])) * ys;
    top += fmt::format("{:.1f},{:.1f} {:.1f},{:.1f} ", xa, yh, xb, yh);
    bottom.insert(0, fmt::format("{:.1f},{:.1f} {:.1f},{:.1f} ", xb, yl, xa, yl));
  }
  return fmt::format("<polygon fill=\"{}\" stroke=\"none\" points=\"{}{}\"/>\n", color, top,
                     bottom);
}

}  // namespace

// At most one point per pixel column: the highest of each column's points, so a short peak
// stays visible (a day has tens of thousands of changes; the chart has ~700 columns).
std::vector<World::TimelinePoint> per_column(const std::vector<World::TimelinePoint>& line,
                                             double xs) {
  std::vector<World::TimelinePoint> out;
  auto total = [](const World::TimelinePoint& p) {
    Bytes b = p.jobs;
    for (Bytes s : p.per_service) b += s;
    return b;
  };
  for (const auto& p : line) {
    if (!out.empty() && int(double(out.back().t) * xs) == int(double(p.t) * xs)) {
      if (total(p) > total(out.back()))
        out.back() = World::TimelinePoint{out.back().t, p.per_service, p.jobs};
      continue;
    }
    out.push_back(p);
  }
  return out;
}

std::string plot_svg(const Trace& trace, const std::vector<RunResult>& runs) {
  size_t panels = runs.size() * trace.gpus.size();
  int height = kTop + int(panels) * (kPanel + kGap) + 40;
  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" "
      "font-family=\"sans-serif\" font-size=\"11\">\n<rect width=\"100%\" height=\"100%\" "
      "fill=\"white\"/>\n<text x=\"10\" y=\"20\" font-size=\"14\">GPU memory by owner over {:.1f} "
      "h</text>\n",
      kWidth, height, double(trace.end) / 3.6e6);
  double xs = double(kWidth - kLeft - kRight) / double(std::max<Ms>(trace.end, 1));
  int y = kTop;
  for (const auto& run : runs)
    for (const auto& g : trace.gpus) {
      double y0 = y + kPanel, ys = double(kPanel) / double(g.total);
      svg += fmt::format(
          "<text x=\"10\" y=\"{}\">{}</text><text x=\"10\" y=\"{}\">GPU {} ({:.0f} "
          "GiB)</text>\n",
          y + 15, escape(run.metrics.policy), y + 30, g.index, double(g.total) / double(GiB));
      svg += fmt::format(
          "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"#f4f4f4\" "
          "stroke=\"#999\"/>\n",
          kLeft, y, kWidth - kLeft - kRight, kPanel);
      auto it = run.timeline.find(g.index);
      if (it != run.timeline.end() && !it->second.empty()) {
        const auto line = per_column(it->second, xs);
        Bytes base = g.baseline;
        auto lower = [&](size_t upto) {
          return [&, upto](const World::TimelinePoint& p) {
            Bytes b = base;
            for (size_t i = 0; i < upto && i < p.per_service.size(); ++i) b += p.per_service[i];
            return b;
          };
        };
        svg += band(
            line, trace.end, kLeft, xs, y0, ys,
            [](const World::TimelinePoint&) { return Bytes{0}; }, lower(0),
            "#cccccc");  // the driver's own
        for (size_t i = 0; i < trace.services.size(); ++i) {
          if (trace.services[i].gpu != g.index) continue;
          svg += band(line, trace.end, kLeft, xs, y0, ys, lower(i), lower(i + 1),
                      kColors[i % std::size(kColors)]);
        }
        size_t n = trace.services.size();
        svg += band(
            line, trace.end, kLeft, xs, y0, ys, lower(n),
            [&](const World::TimelinePoint& p) { return lower(n)(p) + p.jobs; }, kJobColor);
      }
      y += kPanel + kGap;
    }
  int x = kLeft;
  svg += fmt::format(
      "<rect x=\"{}\" y=\"{}\" width=\"10\" height=\"10\" fill=\"#cccccc\"/><text "
      "x=\"{}\" y=\"{}\">driver</text>\n",
      x, y, x + 14, y + 9);
  x += 70;
  for (size_t i = 0; i < trace.services.size(); ++i) {
    svg += fmt::format(
        "<rect x=\"{}\" y=\"{}\" width=\"10\" height=\"10\" fill=\"{}\"/><text "
        "x=\"{}\" y=\"{}\">{}</text>\n",
        x, y, kColors[i % std::size(kColors)], x + 14, y + 9, escape(trace.services[i].name));
    x += 20 + int(trace.services[i].name.size()) * 7;
  }
  svg += fmt::format(
      "<rect x=\"{}\" y=\"{}\" width=\"10\" height=\"10\" fill=\"{}\"/><text "
      "x=\"{}\" y=\"{}\">jobs</text>\n</svg>\n",
      x, y, kJobColor, x + 14, y + 9);
  return svg;
}

}  // namespace vramd::sim
