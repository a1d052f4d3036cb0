// Control-flow kernels, the native twins of ir/ops/control.py: Cond (and dynamic.py's Distribute, a
// Cond by index), Phi and Isu. They move payloads without touching them and only read or change
// states; expressions run on the stack machine of expr.h. Never touches Python, payload data or other
// nodes.
#include "kernels/kernel.h"

namespace amp {

namespace {

Value run(const KernelSpec& spec, int program, const State& s) {
  Value v;
  EvalStatus status = evaluate(spec.programs[program], s, &v);
  if (status != kOk) throw ExpressionFailure(program, status);
  return v;
}

// Cond (control.Cond) and Distribute (dynamic.Distribute, a Cond that always takes an index): the
// predicate picks the output: truthiness for a 2-way Cond (0 "true", 1 "false"), else an int index (not a
// bool) in [0, branches). A value out of range is the Python op's error: ExpressionFailure(kBadValue)
// makes the Python face replay the message through the Python op, which raises it in its own words.
// ints: [branches, index_mode]; programs: [predicate].
class CondKernel : public Kernel {
 public:
  explicit CondKernel(const KernelSpec& spec)
      : spec_(spec), branches_(static_cast<int>(spec.ints.at(0))), index_mode_(spec.ints.at(1) != 0) {
    if (spec.programs.size() != 1 || branches_ < 1 || static_cast<int>(spec.out_names.size()) != branches_)
      throw SpecError("a Cond takes one predicate and as many outputs as branches");
  }

  void forward(NodeCtx&, int, Span<const Tensor> xs, Span<const State> states, Outputs& out) override {
    for (size_t i = 0; i < xs.size(); ++i) out.push(choose(states[i]), xs[i], states[i]);
  }
  void backward(NodeCtx&, int, Span<const Tensor> gs, Span<const State> states, Outputs& out) override {
    for (size_t i = 0; i < gs.size(); ++i) out.push(0, gs[i], states[i]);
  }

 private:
  int choose(const State& s) const {
    Value v = run(spec_, 0, s);
    if (!index_mode_) return v.v ? 0 : 1;
    if (v.is_bool || v.v < 0 || v.v >= branches_) throw ExpressionFailure(0, kBadValue);
    return static_cast<int>(v.v);
  }
  KernelSpec spec_;
  int branches_;
  bool index_mode_;
};
AMP_REGISTER_KERNEL("distribute", CondKernel);
AMP_REGISTER_KERNEL("cond", CondKernel);

// Phi (control.Phi): merges its inputs into "out", remembering (for training keys) which input each
// state came through, so its gradient goes back the same way. ints: [n_inputs].
class PhiKernel : public Kernel {
 public:
  explicit PhiKernel(const KernelSpec&) {}

  void forward(NodeCtx& ctx, int port, Span<const Tensor> xs, Span<const State> states, Outputs& out) override {
    if (ctx.train) {
      for (const State& s : states) {
        bool inserted = false;
        int& came = came_through_.emplace(s, &inserted);
        if (!inserted)
          throw OpError("state " + ctx.layout->describe(s) +
                        " reached the Phi twice while the first is still in flight; a loop needs an Isu that "
                        "changes the state on every pass");
        came = port;
      }
    }
    for (size_t i = 0; i < xs.size(); ++i) out.push(0, xs[i], states[i]);
  }
  void backward(NodeCtx& ctx, int, Span<const Tensor> gs, Span<const State> states, Outputs& out) override {
    for (size_t i = 0; i < gs.size(); ++i) {
      bool found = false;
      int port = came_through_.take(states[i], &found);
      if (!found)
        throw OpError("a backward message with state " + ctx.layout->describe(states[i]) +
                      " arrived at the Phi but no forward with that state passed it");
      out.push(port, gs[i], states[i]);
    }
  }
  size_t held() const override { return came_through_.size(); }

 private:
  StateMap<int> came_through_;
};
AMP_REGISTER_KERNEL("phi", PhiKernel);

// Isu (control.Isu): forward applies the forward updates to the state, backward the inverse ones; each
// update sets a field to an expression's value (on the state before any update) or deletes it.
// ints: [n_forward, (slot, program or -1 to delete) * n_forward, n_backward, (slot, program) * n_backward,
//        key_slot_touched_forward, key_slot_touched_backward].
class IsuKernel : public Kernel {
 public:
  explicit IsuKernel(const KernelSpec& spec) : spec_(spec) {
    size_t at = 0;
    for (auto* updates : {&forward_, &backward_}) {
      int64_t n = spec.ints.at(at++);
      for (int64_t i = 0; i < n; ++i, at += 2) updates->push_back({static_cast<int>(spec.ints.at(at)),
                                                                   static_cast<int>(spec.ints.at(at + 1))});
    }
    key_forward_ = spec.ints.at(at) != 0;
    key_backward_ = spec.ints.at(at + 1) != 0;
    for (const auto* updates : {&forward_, &backward_})
      for (const Update& u : *updates)
        if (u.slot < 0 || u.slot >= spec.n_slots || u.program >= static_cast<int>(spec.programs.size()) ||
            updates->size() > static_cast<size_t>(kMaxSlots))
          throw SpecError("an Isu update names a slot or program out of range");
  }

  void forward(NodeCtx&, int, Span<const Tensor> xs, Span<const State> states, Outputs& out) override {
    for (size_t i = 0; i < xs.size(); ++i) out.push(0, xs[i], apply(forward_, key_forward_, states[i]));
  }
  void backward(NodeCtx&, int, Span<const Tensor> gs, Span<const State> states, Outputs& out) override {
    for (size_t i = 0; i < gs.size(); ++i) out.push(0, gs[i], apply(backward_, key_backward_, states[i]));
  }

 private:
  struct Update {
    int slot;
    int program;  // -1: delete the field
  };
  State apply(const std::vector<Update>& updates, bool touches_key, const State& s) const {
    Value values[kMaxSlots];
    for (size_t i = 0; i < updates.size(); ++i)  // every value from the state before the update
      if (updates[i].program >= 0) values[i] = run(spec_, updates[i].program, s);
    if (touches_key) throw OpError("Isu may not change the 'key' field: the controller counts messages by key");
    State next = s;
    for (size_t i = 0; i < updates.size(); ++i) {
      if (updates[i].program < 0) next.erase(updates[i].slot);
      else next.set(updates[i].slot, values[i].v, values[i].is_bool);
    }
    return next;
  }
  KernelSpec spec_;
  std::vector<Update> forward_, backward_;
  bool key_forward_ = false, key_backward_ = false;
};
AMP_REGISTER_KERNEL("isu", IsuKernel);

}  // namespace
}  // namespace amp
