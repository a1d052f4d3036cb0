// See reports.h.
#include "reports.h"

namespace amp {

void fold_reports_into(const std::vector<Report>& reports, double decay, ReportTotals* totals) {
  const double fresh = 1.0 - decay;  // (1 - d), as Python computes it for every report
  for (const Report& r : reports) {
    SideSums& side = r.train ? totals->train : totals->val;
    side.touched = true;
    side.n += r.n;
    side.loss += r.loss * static_cast<double>(r.n);
    if (r.correct >= 0) {
      side.correct += r.correct;  // from 0 when the side had no count yet
      side.has_correct = true;
    }
    if (!r.train) continue;
    totals->recent_loss = totals->has_recent_loss ? decay * totals->recent_loss + fresh * r.loss : r.loss;
    totals->has_recent_loss = true;
    if (r.correct >= 0 && r.n != 0) {
      const double acc = static_cast<double>(r.correct) / static_cast<double>(r.n);
      totals->recent_accuracy = totals->has_recent_accuracy ? decay * totals->recent_accuracy + fresh * acc : acc;
      totals->has_recent_accuracy = true;
    }
  }
}

}  // namespace amp
