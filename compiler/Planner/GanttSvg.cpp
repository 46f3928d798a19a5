//===- GanttSvg.cpp - SVG Gantt chart of a simulated timeline -------------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// A static, self-contained SVG (no scripts, no external resources): one row
// per worker with an upload, a compute and a download sub-lane, a host row
// for the optimizer, a time axis in milliseconds, a legend and a caption.
// Hovering a box shows its details through SVG <title> elements.
//
//===----------------------------------------------------------------------===//

#include "Planner/Planner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <locale>
#include <map>
#include <sstream>
#include <tuple>

namespace rondo::planner {

namespace {

std::string escapeXml(const std::string &text) {
  std::string out;
  out.reserve(text.size());
  for (char ch : text) {
    switch (ch) {
    case '&':
      out += "&amp;";
      break;
    case '<':
      out += "&lt;";
      break;
    case '>':
      out += "&gt;";
      break;
    case '"':
      out += "&quot;";
      break;
    case '\'':
      out += "&apos;";
      break;
    default:
      // Control characters are not allowed in XML 1.0 text.
      if (static_cast<unsigned char>(ch) < 0x20 && ch != '\t' && ch != '\n')
        out += ' ';
      else
        out += ch;
    }
  }
  return out;
}

/// A coordinate or a length with two decimals, independent of the locale.
std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f", v);
  // snprintf honours LC_NUMERIC; SVG wants a dot.
  for (char *p = buf; *p; ++p)
    if (*p == ',')
      *p = '.';
  return buf;
}

std::string milliseconds(double seconds) {
  char buf[32];
  double ms = seconds * 1e3;
  std::snprintf(buf, sizeof(buf), std::fabs(ms) >= 100 ? "%.1f" : "%.3g", ms);
  for (char *p = buf; *p; ++p)
    if (*p == ',')
      *p = '.';
  return buf;
}

/// Scales the RGB channels of "#rrggbb": factor < 1 darkens, > 1 lightens
/// towards white.
std::string shade(const std::string &hex, double factor) {
  unsigned rgb = std::stoul(hex.substr(1), nullptr, 16);
  int ch[3] = {int(rgb >> 16 & 0xff), int(rgb >> 8 & 0xff), int(rgb & 0xff)};
  for (int &c : ch) {
    double v = factor <= 1 ? c * factor : c + (255 - c) * (factor - 1);
    c = std::clamp(int(std::lround(v)), 0, 255);
  }
  char buf[8];
  std::snprintf(buf, sizeof(buf), "#%02x%02x%02x", ch[0], ch[1], ch[2]);
  return buf;
}

const char *kForwardColor = "#4e79a7";
const char *kTailColor = "#f28e2b";
const char *kBackwardColor = "#59a14f";
const char *kUploadColor = "#76b7b2";
const char *kDownloadColor = "#e15759";
const char *kOptimizerColor = "#b07aa1";
const char *kTrainerColor = "#9c755f";

/// Odd steps are drawn slightly darker so that consecutive steps separate.
std::string stepColor(const std::string &base, int step) {
  return step % 2 ? shade(base, 0.8) : base;
}

/// 1, 2 or 5 times a power of ten, at least `raw`.
double niceStep(double raw) {
  if (!(raw > 0))
    return 1;
  double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * p >= raw)
      return m * p;
  return 10 * p;
}

} // namespace

void writeGanttSvg(std::ostream &os, const PlanProblem &problem,
                   const Plan &plan, const SimResult &result,
                   const std::string &title) {
  using Lane = TimelineEvent::Lane;
  std::vector<Stage> jobs = plan.jobs();
  int numWorkers = std::max(problem.workers, 1);
  for (const TimelineEvent &ev : result.timeline)
    numWorkers = std::max(numWorkers, ev.worker + 1);
  double tEnd = 0;
  int numSteps = 0;
  for (const TimelineEvent &ev : result.timeline) {
    // An event without a finite end (a rate the problem lacks) would make
    // the time axis, and its tick loops, endless.
    if (std::isfinite(ev.end))
      tEnd = std::max(tEnd, ev.end);
    numSteps = std::max(numSteps, ev.step + 1);
  }
  if (!(tEnd > 0))
    tEnd = 1e-3;

  // Geometry.
  const double width = 1200, left = 132, right = 24;
  const double plotWidth = width - left - right;
  const double laneSmall = 9, laneCompute = 24, laneGap = 2, rowGap = 12;
  const double rowHeight =
      laneSmall + laneGap + laneCompute + laneGap + laneSmall + rowGap;
  const double axisY = 74, rowsTop = axisY + 14;
  const double hostTop = rowsTop + numWorkers * rowHeight;
  const double hostHeight = 16;
  // The trainer thread's end-of-step pass (a lane of its own under the
  // optimizer's, when the plan prices one).
  bool trainerLane = false;
  for (const TimelineEvent &ev : result.timeline)
    trainerLane |= ev.lane == Lane::Trainer && ev.end > ev.start;
  const double trainerTop = hostTop + hostHeight + laneGap;
  const double trainerHeight = trainerLane ? laneSmall : 0;
  const double hostBottom =
      trainerLane ? trainerTop + trainerHeight : hostTop + hostHeight;
  const double legendY = hostBottom + 28;
  const double height = legendY + 36;
  auto x = [&](double t) { return left + t / tEnd * plotWidth; };
  auto uploadY = [&](int w) { return rowsTop + w * rowHeight; };
  auto computeY = [&](int w) { return uploadY(w) + laneSmall + laneGap; };
  auto downloadY = [&](int w) { return computeY(w) + laneCompute + laneGap; };

  std::ostringstream out;
  out.imbue(std::locale::classic());
  out << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << num(width)
      << "\" height=\"" << num(height) << "\" viewBox=\"0 0 " << num(width)
      << " " << num(height)
      << "\" font-family=\"Helvetica, Arial, sans-serif\" font-size=\"11\">\n";
  out << "<title>" << escapeXml(title) << "</title>\n";
  out << "<rect x=\"0\" y=\"0\" width=\"" << num(width) << "\" height=\""
      << num(height) << "\" fill=\"#ffffff\"/>\n";

  // Title and caption.
  out << "<text x=\"" << num(left) << "\" y=\"24\" font-size=\"16\" "
      << "font-weight=\"bold\">" << escapeXml(title) << "</text>\n";
  {
    std::ostringstream caption;
    caption.imbue(std::locale::classic());
    char bubble[32];
    std::snprintf(bubble, sizeof(bubble), "%.1f", result.bubbleFraction * 100);
    for (char *p = bubble; *p; ++p)
      if (*p == ',')
        *p = '.';
    caption << "step " << milliseconds(result.stepSeconds) << " ms, bubble "
            << bubble << "%, compute "
            << milliseconds(result.computeSecondsPerStep)
            << " ms per step over " << numWorkers << " worker"
            << (numWorkers == 1 ? "" : "s") << "; " << plan.numJobs()
            << " jobs per step, " << problem.microbatches << " microbatches, "
            << numSteps << " simulated step" << (numSteps == 1 ? "" : "s");
    out << "<text x=\"" << num(left) << "\" y=\"44\" fill=\"#333333\">"
        << escapeXml(caption.str()) << "</text>\n";
  }

  // Time axis with grid lines.
  double tickStep = niceStep(tEnd * 1e3 / 10) / 1e3;
  // Tick labels with as many decimals as the tick step needs.
  int decimals =
      std::max(0, int(std::ceil(-std::log10(tickStep * 1e3) - 1e-9)));
  auto tickLabel = [&](double t) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.*f", decimals, t * 1e3);
    for (char *p = buf; *p; ++p)
      if (*p == ',')
        *p = '.';
    return std::string(buf);
  };
  out << "<g stroke=\"#dddddd\" stroke-width=\"1\">\n";
  for (double t = 0; t <= tEnd * (1 + 1e-9); t += tickStep)
    out << "<line x1=\"" << num(x(t)) << "\" y1=\"" << num(axisY) << "\" x2=\""
        << num(x(t)) << "\" y2=\"" << num(hostBottom) << "\"/>\n";
  out << "</g>\n";
  out << "<line x1=\"" << num(left) << "\" y1=\"" << num(axisY) << "\" x2=\""
      << num(left + plotWidth) << "\" y2=\"" << num(axisY)
      << "\" stroke=\"#333333\"/>\n";
  out << "<g font-size=\"10\" text-anchor=\"middle\" fill=\"#333333\">\n";
  for (double t = 0; t <= tEnd * (1 + 1e-9); t += tickStep)
    out << "<line x1=\"" << num(x(t)) << "\" y1=\"" << num(axisY - 4)
        << "\" x2=\"" << num(x(t)) << "\" y2=\"" << num(axisY)
        << "\" stroke=\"#333333\"/><text x=\"" << num(x(t)) << "\" y=\""
        << num(axisY - 7) << "\">" << tickLabel(t) << "</text>\n";
  out << "</g>\n";
  out << "<text x=\"" << num(left - 8) << "\" y=\"" << num(axisY - 7)
      << "\" font-size=\"10\" text-anchor=\"end\" fill=\"#333333\">time (ms)"
      << "</text>\n";

  // Row labels and lane backgrounds.
  for (int w = 0; w < numWorkers; ++w) {
    out << "<rect x=\"" << num(left) << "\" y=\"" << num(uploadY(w))
        << "\" width=\"" << num(plotWidth) << "\" height=\""
        << num(rowHeight - rowGap) << "\" fill=\"#f4f4f4\"/>\n";
    out << "<text x=\"" << num(left - 46) << "\" y=\""
        << num(computeY(w) + laneCompute / 2 + 4)
        << "\" text-anchor=\"end\" font-weight=\"bold\">worker " << w
        << "</text>\n";
    out << "<g font-size=\"8\" text-anchor=\"end\" fill=\"#666666\">"
        << "<text x=\"" << num(left - 4) << "\" y=\""
        << num(uploadY(w) + laneSmall - 1) << "\">up</text><text x=\""
        << num(left - 4) << "\" y=\"" << num(computeY(w) + laneCompute / 2 + 3)
        << "\">compute</text><text x=\"" << num(left - 4) << "\" y=\""
        << num(downloadY(w) + laneSmall - 1) << "\">down</text></g>\n";
  }
  out << "<rect x=\"" << num(left) << "\" y=\"" << num(hostTop) << "\" width=\""
      << num(plotWidth) << "\" height=\"" << num(hostHeight)
      << "\" fill=\"#f4f4f4\"/>\n";
  out << "<text x=\"" << num(left - 46) << "\" y=\""
      << num(hostTop + hostHeight / 2 + 4)
      << "\" text-anchor=\"end\" font-weight=\"bold\">host</text>\n";
  out << "<text x=\"" << num(left - 4) << "\" y=\""
      << num(hostTop + hostHeight / 2 + 3)
      << "\" font-size=\"8\" text-anchor=\"end\" fill=\"#666666\">optimizer"
      << "</text>\n";
  if (trainerLane)
    out << "<rect x=\"" << num(left) << "\" y=\"" << num(trainerTop)
        << "\" width=\"" << num(plotWidth) << "\" height=\""
        << num(trainerHeight) << "\" fill=\"#f4f4f4\"/>\n"
        << "<text x=\"" << num(left - 4) << "\" y=\""
        << num(trainerTop + trainerHeight - 1)
        << "\" font-size=\"8\" text-anchor=\"end\" fill=\"#666666\">"
        << "trainer</text>\n";

  auto kindColor = [&](int job) -> std::string {
    if (job < 0 || job >= int(jobs.size()))
      return "#999999";
    switch (jobs[job].kind) {
    case StageKind::Forward:
      return kForwardColor;
    case StageKind::Tail:
      return kTailColor;
    case StageKind::Backward:
      return kBackwardColor;
    }
    return "#999999";
  };
  auto interval = [&](double start, double end) {
    return milliseconds(start) + "-" + milliseconds(end) + " ms";
  };

  // Compute: one box per stage-job, microbatches inside it.
  struct JobBox {
    double start = 0, end = 0;
    std::vector<std::pair<double, double>> microbatches;
  };
  std::map<std::tuple<int, int, int>, JobBox> boxes; // (step, job, worker)
  for (const TimelineEvent &ev : result.timeline) {
    if (ev.lane != Lane::Compute || ev.worker < 0)
      continue;
    auto [it, inserted] =
        boxes.try_emplace(std::make_tuple(ev.step, ev.job, ev.worker));
    JobBox &box = it->second;
    if (inserted) {
      box.start = ev.start;
      box.end = ev.end;
    }
    box.start = std::min(box.start, ev.start);
    box.end = std::max(box.end, ev.end);
    box.microbatches.emplace_back(ev.start, ev.end);
  }
  out << "<g>\n";
  for (auto &[key, box] : boxes) {
    auto [step, job, w] = key;
    std::string color = stepColor(kindColor(job), step);
    std::string name = stageName(plan, job);
    double x0 = x(box.start), x1 = x(box.end), y0 = computeY(w);
    out << "<g><title>" << escapeXml(name) << ", step " << step << ", worker "
        << w << ": " << interval(box.start, box.end) << ", "
        << box.microbatches.size() << " microbatches</title>\n";
    // The span (gaps between microbatches show as the light fill).
    out << "<rect x=\"" << num(x0) << "\" y=\"" << num(y0) << "\" width=\""
        << num(std::max(x1 - x0, 0.5)) << "\" height=\"" << num(laneCompute)
        << "\" fill=\"" << color << "\" fill-opacity=\"0.3\"/>\n";
    std::sort(box.microbatches.begin(), box.microbatches.end());
    for (const auto &[s, e] : box.microbatches)
      out << "<rect x=\"" << num(x(s)) << "\" y=\"" << num(y0) << "\" width=\""
          << num(std::max(x(e) - x(s), 0.5)) << "\" height=\""
          << num(laneCompute) << "\" fill=\"" << color << "\"/>\n";
    for (size_t m = 1; m < box.microbatches.size(); ++m)
      out << "<line x1=\"" << num(x(box.microbatches[m].first)) << "\" y1=\""
          << num(y0 + 3) << "\" x2=\"" << num(x(box.microbatches[m].first))
          << "\" y2=\"" << num(y0 + laneCompute - 3)
          << "\" stroke=\"#ffffff\" stroke-width=\"0.75\" "
             "stroke-opacity=\"0.8\"/>\n";
    out << "<rect x=\"" << num(x0) << "\" y=\"" << num(y0) << "\" width=\""
        << num(std::max(x1 - x0, 0.5)) << "\" height=\"" << num(laneCompute)
        << "\" fill=\"none\" stroke=\"#222222\" stroke-width=\"0.6\"/>\n";
    // Label when it fits (about 7 px per character at this size).
    if (x1 - x0 >= 7.0 * name.size() + 4)
      out << "<text x=\"" << num((x0 + x1) / 2) << "\" y=\""
          << num(y0 + laneCompute / 2 + 4)
          << "\" text-anchor=\"middle\" fill=\"#ffffff\" "
             "font-weight=\"bold\">"
          << escapeXml(name) << "</text>\n";
    out << "</g>\n";
  }
  out << "</g>\n";

  // Uploads, downloads and the optimizer.
  out << "<g>\n";
  for (const TimelineEvent &ev : result.timeline) {
    if (ev.lane == Lane::Compute || !(ev.end > ev.start))
      continue;
    double y0, h;
    std::string color, what;
    switch (ev.lane) {
    case Lane::Upload:
      y0 = uploadY(ev.worker);
      h = laneSmall;
      color = stepColor(kUploadColor, ev.step);
      what = "upload " + stageName(plan, ev.job);
      break;
    case Lane::Download:
      y0 = downloadY(ev.worker);
      h = laneSmall;
      color = stepColor(kDownloadColor, ev.step);
      what = "download " + stageName(plan, ev.job);
      break;
    case Lane::Trainer:
      y0 = trainerTop;
      h = trainerHeight;
      color = stepColor(kTrainerColor, ev.step);
      what = "gradient norm for the log (trainer thread)";
      break;
    default:
      y0 = hostTop;
      h = hostHeight;
      color = stepColor(kOptimizerColor, ev.step);
      what = "optimizer";
      break;
    }
    double x0 = x(ev.start), x1 = x(ev.end);
    out << "<rect x=\"" << num(x0) << "\" y=\"" << num(y0) << "\" width=\""
        << num(std::max(x1 - x0, 0.5)) << "\" height=\"" << num(h)
        << "\" fill=\"" << color
        << "\" stroke=\"#ffffff\" stroke-width=\"0.5\"><title>"
        << escapeXml(what) << ", step " << ev.step;
    if (ev.worker >= 0)
      out << ", worker " << ev.worker;
    out << ": " << interval(ev.start, ev.end) << "</title></rect>\n";
    if (ev.lane == Lane::Optimizer && x1 - x0 >= 50)
      out << "<text x=\"" << num((x0 + x1) / 2) << "\" y=\""
          << num(y0 + h / 2 + 4)
          << "\" text-anchor=\"middle\" fill=\"#ffffff\">optimizer " << ev.step
          << "</text>\n";
  }
  out << "</g>\n";

  // Legend.
  struct Entry {
    const char *label;
    const char *color;
  };
  std::vector<Entry> legend = {{"forward", kForwardColor},
                               {"fused tail", kTailColor},
                               {"backward", kBackwardColor},
                               {"upload (parameters)", kUploadColor},
                               {"download (gradients)", kDownloadColor},
                               {"optimizer", kOptimizerColor}};
  if (trainerLane)
    legend.push_back({"gradient norm", kTrainerColor});
  double lx = left;
  out << "<g font-size=\"11\">\n";
  for (const Entry &e : legend) {
    out << "<rect x=\"" << num(lx) << "\" y=\"" << num(legendY - 10)
        << "\" width=\"12\" height=\"12\" fill=\"" << e.color << "\"/>"
        << "<text x=\"" << num(lx + 16) << "\" y=\"" << num(legendY) << "\">"
        << e.label << "</text>\n";
    lx += 16 + 7.0 * std::string(e.label).size() + 18;
  }
  out << "<text x=\"" << num(left) << "\" y=\"" << num(legendY + 18)
      << "\" fill=\"#666666\">odd steps darker; light fill inside a job: "
         "waiting between microbatches</text>\n";
  out << "</g>\n";
  out << "</svg>\n";
  os << out.str();
}

} // namespace rondo::planner
