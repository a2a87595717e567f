#include "examples/rl/rl_report.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <sstream>

namespace hart::rl {

status rl_report_write_csv(const std::string& path, const std::vector<step_record>& rows) {
  std::ofstream f(path);
  f << "step,version,reward_mean,accuracy,logprob_gap_mean_abs,kl_rollout_trainer,loss,sync_s,rollout_s,"
       "train_s,"
       "step_s,tokens\n";
  char line[512];
  for (const step_record& r : rows) {
    std::snprintf(line, sizeof line, "%lld,%llu,%.6f,%.6f,%.6g,%.6g,%.6g,%.4f,%.4f,%.4f,%.4f,%lld\n",
                  (long long)r.step, (unsigned long long)r.version, r.reward_mean, r.accuracy, r.logprob_gap,
                  r.kl, r.loss, r.sync_s, r.rollout_s, r.train_s, r.step_s, (long long)r.n_tokens);
    f << line;
  }
  if (!f) return invalid_argument("rl_report: cannot write %s", path.c_str());
  return {};
}

namespace {

struct series {
  const char* label;
  const char* color;
  std::function<double(const step_record&)> value;
};

// One panel: a frame at (x0, y0) of w × h, y from 0 to y_max, a polyline per series.
void panel(std::ostringstream& s, const std::vector<step_record>& rows, const std::vector<series>& lines,
           const char* title, double x0, double y0, double w, double h, double y_max) {
  char buf[1024];  // the longest write is the frame + labels, ~400 bytes
  std::snprintf(buf, sizeof buf,
                "<rect x='%.0f' y='%.0f' width='%.0f' height='%.0f' fill='none' stroke='#888'/>\n"
                "<text x='%.0f' y='%.0f' font-size='14'>%s</text>\n"
                "<text x='%.0f' y='%.0f' font-size='11' text-anchor='end'>%.3g</text>\n"
                "<text x='%.0f' y='%.0f' font-size='11' text-anchor='end'>0</text>\n",
                x0, y0, w, h, x0, y0 - 8, title, x0 - 4, y0 + 10, y_max, x0 - 4, y0 + h);
  s << buf;
  const double n = double(std::max<size_t>(rows.size(), 2) - 1);
  for (size_t k = 0; k < lines.size(); ++k) {
    s << "<polyline fill='none' stroke-width='2' stroke='" << lines[k].color << "' points='";
    for (size_t i = 0; i < rows.size(); ++i) {
      const double v = std::clamp(lines[k].value(rows[i]) / y_max, 0.0, 1.0);
      std::snprintf(buf, sizeof buf, "%.1f,%.1f ", x0 + w * double(i) / n, y0 + h * (1.0 - v));
      s << buf;
    }
    std::snprintf(buf, sizeof buf, "'/>\n<text x='%.0f' y='%.0f' font-size='12' fill='%s'>%s</text>\n",
                  x0 + w + 10, y0 + 16 + 18 * double(k), lines[k].color, lines[k].label);
    s << buf;
  }
}

}  // namespace

status rl_report_write_svg(const std::string& path, const std::vector<step_record>& rows) {
  const double x0 = 60, w = 520, h = 200;
  double gap_max = 1e-6;
  for (const step_record& r : rows) gap_max = std::max({gap_max, r.logprob_gap, r.kl});
  std::ostringstream s;
  s << "<svg xmlns='http://www.w3.org/2000/svg' width='800' height='560' font-family='sans-serif'>\n"
       "<rect width='100%' height='100%' fill='white'/>\n";
  panel(s, rows,
        {{"reward mean", "#1f77b4", [](const step_record& r) { return r.reward_mean; }},
         {"exact answers", "#2ca02c", [](const step_record& r) { return r.accuracy; }}},
        "GRPO on 3-digit sorting: reward per step", x0, 40, w, h, 1.0);
  panel(s, rows,
        {{"mean |lp_trainer - lp_rollout|", "#d62728", [](const step_record& r) { return r.logprob_gap; }},
         {"KL(rollout || trainer)", "#9467bd", [](const step_record& r) { return r.kl; }}},
        "log-prob gap, fp8 rollouts vs fp32 trainer", x0, 310, w, h, gap_max * 1.1);
  char buf[128];
  std::snprintf(buf, sizeof buf, "<text x='%.0f' y='540' font-size='12'>step 1 .. %zu</text>\n", x0,
                rows.size());
  s << buf << "</svg>\n";
  std::ofstream f(path);
  f << s.str();
  if (!f) return invalid_argument("rl_report: cannot write %s", path.c_str());
  return {};
}

}  // namespace hart::rl
