// See spec.h.
#include "spec.h"

#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

namespace amp {

Program program_from_python(nb::handle code, int n_slots) {
  nb::ndarray<int64_t, nb::shape<-1, 3>, nb::c_contig, nb::ro> a;
  if (!nb::try_cast(code, a)) throw nb::type_error("a program is an int64 array of shape (n, 3)");
  Program p;
  for (size_t i = 0; i < a.shape(0); ++i)
    p.code.push_back(Instr{static_cast<Opcode>(a(i, 0)), static_cast<int32_t>(a(i, 1)), a(i, 2)});
  std::string why = p.validate(n_slots);
  if (!why.empty()) throw nb::value_error(("invalid expression program: " + why).c_str());
  return p;
}

KernelSpec spec_from_python(const StateCodec& codec, nb::dict spec, nb::list params, nb::list grads, NodeCtx* ctx) {
  ctx->layout = &codec.layout();
  for (nb::handle p : params) ctx->params.push_back(borrow_array(p, "parameter"));
  for (nb::handle g : grads) ctx->grads.push_back(borrow_array(g, "gradient accumulator"));
  // the parameters and accumulators the kernel will index: checked here once, never in the kernel
  auto shapes = nb::cast<std::vector<std::vector<int64_t>>>(spec["param_shapes"]);
  if (ctx->params.size() != shapes.size() || ctx->grads.size() != shapes.size())
    throw nb::value_error(("expected " + std::to_string(shapes.size()) + " parameters and as many gradient "
                           "accumulators").c_str());
  for (size_t i = 0; i < shapes.size(); ++i) {
    const Tensor& p = ctx->params[i];
    const Tensor& g = ctx->grads[i];
    bool ok = p.rank() == static_cast<int>(shapes[i].size()) && g.same_shape(p) && g.dtype() == p.dtype();
    for (int k = 0; ok && k < p.rank(); ++k) ok = p.dim(k) == shapes[i][k];
    if (!ok)
      throw nb::value_error(("parameter " + std::to_string(i) + ": shape or dtype differs from the op's "
                             "param_shapes, or its accumulator differs from it").c_str());
  }
  KernelSpec ks;
  ks.kind = nb::cast<std::string>(spec["kind"]);
  ks.in_names = nb::cast<std::vector<std::string>>(spec["in_names"]);
  ks.out_names = nb::cast<std::vector<std::string>>(spec["out_names"]);
  if (ks.in_names.size() > 32 || ks.out_names.size() > 32) throw nb::value_error("at most 32 ports per node");
  ks.ints = nb::cast<std::vector<int64_t>>(spec["ints"]);
  ks.n_slots = static_cast<int>(codec.layout().names.size());
  ks.n_params = static_cast<int>(shapes.size());
  for (nb::handle code : nb::borrow<nb::list>(spec["programs"])) ks.programs.push_back(program_from_python(code, ks.n_slots));
  ks.match_full = nb::cast<bool>(spec["match_full"]);
  ks.match_slots = nb::cast<std::vector<int>>(spec["match_slots"]);
  for (int slot : ks.match_slots)
    if (slot < 0 || slot >= ks.n_slots) throw nb::value_error("match_on slot out of range");
  return ks;
}

std::unique_ptr<Kernel> kernel_for(const KernelSpec& spec, const StateCodec& codec, nb::handle bridge) {
  if (!bridge.is_none()) {
    nb::tuple b = nb::borrow<nb::tuple>(bridge);
    return std::unique_ptr<Kernel>(new PythonKernel(b[0], b[1], &codec, spec.in_names, spec.out_names));
  }
  Factory factory = find_kernel(spec.kind);
  if (!factory) throw nb::value_error(("no native kernel for op kind '" + spec.kind + "'").c_str());
  return factory(spec);
}

nb::dict report_to_python(const Report& r) {
  nb::dict d;
  d["key"] = r.key;
  d["loss"] = r.loss;
  d["n"] = r.n;
  if (r.correct >= 0) d["correct"] = r.correct;
  return d;
}

namespace {

SideSums side_from_python(nb::handle side) {
  nb::tuple t = nb::cast<nb::tuple>(side);
  if (nb::len(t) != 3) throw nb::value_error("fold_reports: a side's sums are (n, loss, correct or None)");
  SideSums s;
  s.n = nb::cast<int64_t>(t[0]);
  s.loss = nb::cast<double>(t[1]);
  s.has_correct = !t[2].is_none();
  if (s.has_correct) s.correct = nb::cast<int64_t>(t[2]);
  return s;
}

nb::object side_to_python(const SideSums& s) {
  if (!s.touched) return nb::none();
  return nb::make_tuple(s.n, s.loss, s.has_correct ? nb::object(nb::int_(s.correct)) : nb::none());
}

nb::object optional_float(bool has, double value) { return has ? nb::object(nb::float_(value)) : nb::none(); }

}  // namespace

ReportTotals totals_from_python(double decay, nb::tuple totals) {
  if (!(decay >= 0.0 && decay <= 1.0)) throw nb::value_error("fold_reports: decay is a weight in [0, 1]");
  if (nb::len(totals) != 4)
    throw nb::value_error("fold_reports: totals are (train, val, recent_loss, recent_accuracy)");
  ReportTotals t;
  t.train = side_from_python(totals[0]);
  t.val = side_from_python(totals[1]);
  t.has_recent_loss = !totals[2].is_none();
  if (t.has_recent_loss) t.recent_loss = nb::cast<double>(totals[2]);
  t.has_recent_accuracy = !totals[3].is_none();
  if (t.has_recent_accuracy) t.recent_accuracy = nb::cast<double>(totals[3]);
  return t;
}

nb::tuple totals_to_python(const ReportTotals& t) {
  return nb::make_tuple(side_to_python(t.train), side_to_python(t.val), optional_float(t.has_recent_loss, t.recent_loss),
                        optional_float(t.has_recent_accuracy, t.recent_accuracy));
}

}  // namespace amp
