// The stack machine of expr.h. One switch per instruction over a small array stack; every arithmetic
// step is checked for int64 overflow (__builtin_*_overflow), so the result is either Python's value or a
// status saying why not.
#include "expr.h"

#include <string>

namespace amp {

namespace {

inline bool floor_div(int64_t a, int64_t b, int64_t* out) {
  if (a == INT64_MIN && b == -1) return false;  // the one quotient beyond int64
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  *out = q;
  return true;
}

inline int64_t floor_mod(int64_t a, int64_t b) {
  if (b == -1) return 0;  // a % -1 is 0, and INT64_MIN % -1 traps in C
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

// Stack effect of each opcode: (pops, pushes); kMin/kMax pop `arg`.
void effect(const Instr& in, int* pops, int* pushes) {
  switch (in.op) {
    case Opcode::kConst: case Opcode::kLoad: *pops = 0; *pushes = 1; return;
    case Opcode::kNeg: case Opcode::kPos: case Opcode::kNot: case Opcode::kAbs: *pops = 1; *pushes = 1; return;
    case Opcode::kMin: case Opcode::kMax: *pops = in.arg; *pushes = 1; return;
    case Opcode::kJump: *pops = 0; *pushes = 0; return;
    case Opcode::kJumpIfFalseOrPop: case Opcode::kJumpIfTrueOrPop: *pops = 1; *pushes = 0; return;
    case Opcode::kPopJumpIfFalse: case Opcode::kPop: *pops = 1; *pushes = 0; return;
    case Opcode::kDup: *pops = 1; *pushes = 2; return;
    case Opcode::kRot2: *pops = 2; *pushes = 2; return;
    case Opcode::kRot3: *pops = 3; *pushes = 3; return;
    case Opcode::kFail: *pops = in.arg; *pushes = 1; return;  // stands for the call it replaces
    default: *pops = 2; *pushes = 1; return;  // binary arithmetic and comparisons
  }
}

}  // namespace

// Abstract interpretation of the stack depth along every path (the code is a DAG of forward jumps):
// each instruction's depth is fixed by its first visit; a second path must agree.
std::string Program::validate(int n_slots) {
  const int n = static_cast<int>(code.size());
  if (n == 0) return "empty program";
  std::vector<int> depth(n + 1, -1);
  depth[0] = 0;
  int deepest = 0;
  auto reach = [&](int target, int d) -> bool {
    if (target < 0 || target > n) return false;
    if (depth[target] == -1) depth[target] = d;
    return depth[target] == d;
  };
  for (int pc = 0; pc < n; ++pc) {
    const Instr& in = code[pc];
    if (static_cast<int>(in.op) >= static_cast<int>(Opcode::kCount)) return "unknown opcode";
    int d = depth[pc];
    if (d < 0) return "unreachable instruction at " + std::to_string(pc);
    if (in.op == Opcode::kLoad && in.arg >= n_slots) return "slot out of range";
    if ((in.op == Opcode::kMin || in.op == Opcode::kMax) && in.arg < 2) return "min/max of fewer than 2";
    if (in.op == Opcode::kFail && in.arg < 0) return "a call of a negative number of arguments";
    int pops, pushes;
    effect(in, &pops, &pushes);
    if (d < pops) return "stack underflow at " + std::to_string(pc);
    int after = d - pops + pushes;
    deepest = after > deepest ? after : deepest;
    switch (in.op) {
      case Opcode::kJump:
        if (!reach(in.arg, d) || in.arg <= pc) return "bad jump at " + std::to_string(pc);
        continue;  // no fall-through
      case Opcode::kJumpIfFalseOrPop: case Opcode::kJumpIfTrueOrPop:
        if (in.arg <= pc || !reach(in.arg, d)) return "bad jump at " + std::to_string(pc);
        break;
      case Opcode::kPopJumpIfFalse:
        if (in.arg <= pc || !reach(in.arg, after)) return "bad jump at " + std::to_string(pc);
        break;
      default:
        break;
    }
    if (!reach(pc + 1, after)) return "inconsistent stack depth at " + std::to_string(pc + 1);
  }
  if (depth[n] != 1) return "program does not leave exactly one value";
  max_stack = deepest;
  return "";
}

EvalStatus evaluate(const Program& program, const State& state, Value* out) {
  Value stack_buf[64];
  std::vector<Value> heap_stack;
  Value* stack = stack_buf;
  if (program.max_stack > 64) {
    heap_stack.resize(program.max_stack);
    stack = heap_stack.data();
  }
  int sp = 0;
  const Instr* code = program.code.data();
  const int n = static_cast<int>(program.code.size());
  for (int pc = 0; pc < n; ++pc) {
    const Instr& in = code[pc];
    switch (in.op) {
      case Opcode::kConst:
        stack[sp++] = Value{in.value, in.arg != 0};
        break;
      case Opcode::kLoad:
        if (in.arg < 0 || !state.has(in.arg)) return kMissingField;
        stack[sp++] = Value{state.get(in.arg), ((state.bools >> in.arg) & 1u) != 0};
        break;
      case Opcode::kNeg: {
        Value& a = stack[sp - 1];
        if (a.v == INT64_MIN) return kOverflow;
        a = Value{-a.v, false};
        break;
      }
      case Opcode::kPos:
        stack[sp - 1].is_bool = false;
        break;
      case Opcode::kNot:
        stack[sp - 1] = Value{stack[sp - 1].v == 0, true};
        break;
      case Opcode::kAbs: {
        Value& a = stack[sp - 1];
        if (a.v == INT64_MIN) return kOverflow;
        a = Value{a.v < 0 ? -a.v : a.v, false};
        break;
      }
      case Opcode::kAdd: case Opcode::kSub: case Opcode::kMul: case Opcode::kFloorDiv: case Opcode::kMod: {
        int64_t b = stack[--sp].v;
        int64_t a = stack[sp - 1].v;
        int64_t r = 0;
        switch (in.op) {
          case Opcode::kAdd: if (__builtin_add_overflow(a, b, &r)) return kOverflow; break;
          case Opcode::kSub: if (__builtin_sub_overflow(a, b, &r)) return kOverflow; break;
          case Opcode::kMul: if (__builtin_mul_overflow(a, b, &r)) return kOverflow; break;
          case Opcode::kFloorDiv:
            if (b == 0) return kZeroDivision;
            if (!floor_div(a, b, &r)) return kOverflow;
            break;
          default:
            if (b == 0) return kZeroDivision;
            r = floor_mod(a, b);
            break;
        }
        stack[sp - 1] = Value{r, false};
        break;
      }
      case Opcode::kLt: case Opcode::kLe: case Opcode::kGt: case Opcode::kGe: case Opcode::kEq: case Opcode::kNe: {
        int64_t b = stack[--sp].v;
        int64_t a = stack[sp - 1].v;
        bool r = in.op == Opcode::kLt ? a < b : in.op == Opcode::kLe ? a <= b : in.op == Opcode::kGt ? a > b
               : in.op == Opcode::kGe ? a >= b : in.op == Opcode::kEq ? a == b : a != b;
        stack[sp - 1] = Value{r, true};
        break;
      }
      case Opcode::kMin: case Opcode::kMax: {
        int k = in.arg;
        Value best = stack[sp - k];
        for (int i = sp - k + 1; i < sp; ++i) {
          bool better = in.op == Opcode::kMin ? stack[i].v < best.v : stack[i].v > best.v;
          if (better) best = stack[i];
        }
        sp -= k;
        stack[sp++] = best;
        break;
      }
      case Opcode::kJump:
        pc = in.arg - 1;
        break;
      case Opcode::kJumpIfFalseOrPop:
        if (stack[sp - 1].v == 0) pc = in.arg - 1;
        else --sp;
        break;
      case Opcode::kJumpIfTrueOrPop:
        if (stack[sp - 1].v != 0) pc = in.arg - 1;
        else --sp;
        break;
      case Opcode::kPopJumpIfFalse:
        if (stack[--sp].v == 0) pc = in.arg - 1;
        break;
      case Opcode::kDup:
        stack[sp] = stack[sp - 1];
        ++sp;
        break;
      case Opcode::kRot2: std::swap(stack[sp - 1], stack[sp - 2]); break;
      case Opcode::kRot3: {  // a b c -> c a b (the top goes under the two below it)
        Value top = stack[sp - 1];
        stack[sp - 1] = stack[sp - 2];
        stack[sp - 2] = stack[sp - 3];
        stack[sp - 3] = top;
        break;
      }
      case Opcode::kPop: --sp; break;
      case Opcode::kFail: return kTypeError;
      default: return kTypeError;
    }
  }
  *out = stack[0];
  return kOk;
}

}  // namespace amp
