// The loss reports' running sums, folded on the driver's side of the engine (runtime/session.py,
// Session.add_reports and EpochStats.add_many, is the specification).
//
// A loss node reports (key, mean loss, instances n, correct predictions or -1) per key it scores; a
// Tree-LSTM reports once per tree node, so a run hands over many reports per key. The session keeps, per
// side (training or validation keys of the current epoch), the sum of n, of loss * n and of the correct
// counts, and over training reports the exponential moving averages of the loss and of the accuracy
// (correct / n) that live curves show. Floating-point addition is not associative, so the sums must grow
// one report at a time, in the order the workers handed the reports over, for a run to give the same bits
// on either engine and after a resume. Converting every report to Python objects for that loop cost the
// driver about as much as the rest of its work per key; folding here keeps the same order and the same
// operations (built with -ffp-contract=off: a product and a sum each rounded, as Python rounds them).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/kernel.h"

namespace amp {

// One side's sums: EpochStats._sums' "<side>_n", "<side>_loss" and "<side>_correct" (absent until a report
// counts correct predictions). `touched`: a report of this side was folded (the session writes the sums back).
struct SideSums {
  int64_t n = 0;
  double loss = 0.0;
  int64_t correct = 0;
  bool has_correct = false;
  bool touched = false;
};

// What the reports fold into: the two sides and the moving averages (Session.recent_loss/recent_accuracy,
// None until the first training report).
struct ReportTotals {
  SideSums train, val;
  double recent_loss = 0.0, recent_accuracy = 0.0;
  bool has_recent_loss = false, has_recent_accuracy = false;
};

// Fold `reports` into `totals`, in order; `decay` is the weight of the past in the moving averages.
void fold_reports_into(const std::vector<Report>& reports, double decay, ReportTotals* totals);

}  // namespace amp
