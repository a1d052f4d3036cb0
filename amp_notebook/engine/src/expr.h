// Expressions over state fields (ir/expr.py), compiled by engine/expressions.py into stack code over
// int64 values that each carry a bool bit, evaluated here with Python's semantics:
//   * `//` and `%` floor (the quotient rounds toward -inf, the remainder takes the divisor's sign);
//   * comparisons give bools; a chain `a < b < c` evaluates b once and stops at the first false link;
//   * `and`/`or` give one of their operands (not a bool) and skip the rest, `not` gives a bool;
//   * `x if c else y` evaluates one branch; min/max give the first of equal extremes (an operand, which
//     may be a bool), abs and arithmetic give ints;
//   * a bool operand of arithmetic counts as 0/1, as in Python.
// Failures return a status instead of a value: a missing field, division by zero, a wrong number of
// arguments to min/max/abs (Python raises TypeError), or a value beyond int64 (Python's ints are
// unbounded: this one is the native engine's own limit). `/` and float constants never get here: the
// compile step keeps such graphs on the Python engine.
// Programs are validated once when they enter the engine (jump targets, slots, stack depth); evaluation
// trusts them. Never touches Python or payloads.
#pragma once

#include <vector>

#include "state.h"

namespace amp {

enum class Opcode : uint8_t {
  kConst,          // push value (arg 1: a bool)
  kLoad,           // push state slot `arg` (missing field if absent or arg < 0)
  kNeg, kPos, kNot, kAbs,
  kAdd, kSub, kMul, kFloorDiv, kMod,
  kLt, kLe, kGt, kGe, kEq, kNe,
  kMin, kMax,      // pop `arg` operands, push the first extreme
  kJump,           // to `arg`
  kJumpIfFalseOrPop,  // top falsy: jump (keep it); else pop
  kJumpIfTrueOrPop,
  kPopJumpIfFalse,  // pop; jump if it was falsy
  kDup, kRot2, kRot3, kPop,
  kFail,           // a call of `arg` arguments that Python refuses (TypeError), once they are evaluated
  kCount
};

struct Instr {
  Opcode op;
  int32_t arg;
  int64_t value;
};

struct Value {
  int64_t v = 0;
  bool is_bool = false;
};

enum EvalStatus : int { kOk = 0, kMissingField = 1, kZeroDivision = 2, kOverflow = 3, kTypeError = 4,
                        kBadValue = 5 };  // kBadValue: evaluated, but not a value the op can use (its kernel says)

struct Program {
  std::vector<Instr> code;
  int max_stack = 0;
  // Check jump targets, slot numbers and stack depth once; returns an empty string if the program is sound.
  std::string validate(int n_slots);
};

EvalStatus evaluate(const Program& program, const State& state, Value* out);

}  // namespace amp
