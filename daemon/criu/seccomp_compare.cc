#include "daemon/criu/seccomp_compare.h"

#include <linux/filter.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <utility>
#include <vector>

namespace cryo::criu {
namespace {

// Classic BPF's arithmetic on two constants; nullopt for an operation it does not have.
std::optional<uint32_t> ConstantAlu(uint16_t op, uint32_t a, uint32_t b) {
  uint32_t r = 0;
  switch (op) {
    case BPF_ADD:
      r = a + b;
      break;
    case BPF_SUB:
      r = a - b;
      break;
    case BPF_MUL:
      r = a * b;
      break;
    case BPF_DIV:
      r = a / b;
      break;  // b != 0: checked above
    case BPF_MOD:
      r = a % b;
      break;
    case BPF_OR:
      r = a | b;
      break;
    case BPF_AND:
      r = a & b;
      break;
    case BPF_XOR:
      r = a ^ b;
      break;
    case BPF_LSH:
      r = b < 32 ? a << b : 0;
      break;
    case BPF_RSH:
      r = b < 32 ? a >> b : 0;
      break;
    case BPF_NEG:
      r = 0u - a;
      break;
    default:
      return std::nullopt;
  }
  return r;
}

constexpr size_t kMaxInsns = 4096;        // BPF_MAXINSNS: the kernel loads no longer program
constexpr uint32_t kDataWords = 16;       // struct seccomp_data: 64 bytes of 32-bit words
constexpr uint64_t kBudget = 20'000'000;  // instructions followed, both programs together

// A register's or a scratch word's value on a path: a constant, `word & mask` of the seccomp
// data, or anything else (which ends the comparison as "different" when it matters).
struct Val {
  enum Kind : uint8_t { kUnset, kConst, kWord, kOther } kind = kUnset;
  uint32_t c = 0;     // kConst
  uint32_t word = 0;  // kWord: index into seccomp_data (0 nr, 1 arch, 2-3 ip, 4-15 args)
  uint32_t mask = 0;  // kWord
};

// What a path has learned about `word & mask`: within [lo, hi] and none of `ne`.
struct Facts {
  uint32_t lo = 0;
  uint32_t hi = UINT32_MAX;
  std::vector<uint32_t> ne;  // sorted

  bool Excludes(uint32_t v) const {
    return v < lo || v > hi || std::binary_search(ne.begin(), ne.end(), v);
  }
};

using FactKey = std::pair<uint32_t, uint32_t>;  // word, mask

struct State {
  size_t pc = 0;
  Val a{Val::kConst, 0, 0, 0};  // the kernel starts both registers at 0
  Val x{Val::kConst, 0, 0, 0};
  std::array<Val, BPF_MEMWORDS> mem{};
  std::map<FactKey, Facts> facts;
};

enum class Truth { kFalse, kTrue, kUnknown };

class Comparer {
 public:
  Comparer(std::vector<sock_filter> p, std::vector<sock_filter> q)
      : p_(std::move(p)), q_(std::move(q)) {}

  bool Run() {
    if (!Valid(p_) || !Valid(q_)) return false;
    State s;
    WalkFirst(std::move(s));
    return ok_;
  }

 private:
  // The instructions a seccomp filter may hold (the kernel's seccomp_check_filter and
  // bpf_check_classic): anything else, unknown bits included, was never loaded.
  static bool Known(uint16_t code) {
    switch (code) {
      case BPF_LD | BPF_W | BPF_ABS:
      case BPF_LD | BPF_W | BPF_LEN:
      case BPF_LDX | BPF_W | BPF_LEN:
      case BPF_LD | BPF_IMM:
      case BPF_LDX | BPF_IMM:
      case BPF_LD | BPF_MEM:
      case BPF_LDX | BPF_MEM:
      case BPF_ST:
      case BPF_STX:
      case BPF_ALU | BPF_NEG:
      case BPF_JMP | BPF_JA:
      case BPF_RET | BPF_K:
      case BPF_RET | BPF_A:
      case BPF_MISC | BPF_TAX:
      case BPF_MISC | BPF_TXA:
        return true;
    }
    const uint16_t op = BPF_OP(code);
    if ((code & ~(0xf0 | BPF_X | 0x07)) != 0) return false;
    if (BPF_CLASS(code) == BPF_ALU) {
      return op == BPF_ADD || op == BPF_SUB || op == BPF_MUL || op == BPF_DIV || op == BPF_MOD ||
             op == BPF_OR || op == BPF_AND || op == BPF_XOR || op == BPF_LSH || op == BPF_RSH;
    }
    if (BPF_CLASS(code) == BPF_JMP) {
      return op == BPF_JEQ || op == BPF_JGT || op == BPF_JGE || op == BPF_JSET;
    }
    return false;
  }

  static bool Valid(const std::vector<sock_filter>& prog) {
    if (prog.empty() || prog.size() > kMaxInsns) return false;
    for (size_t i = 0; i < prog.size(); ++i) {
      const sock_filter& f = prog[i];
      if (!Known(f.code)) return false;
      const uint16_t cls = BPF_CLASS(f.code);
      if (cls == BPF_JMP) {
        const size_t far = BPF_OP(f.code) == BPF_JA ? static_cast<size_t>(f.k)
                                                    : static_cast<size_t>(std::max(f.jt, f.jf));
        if (i + 1 + far >= prog.size()) return false;
      }
    }
    // The last instruction must end the program, as the kernel requires.
    return BPF_CLASS(prog.back().code) == BPF_RET;
  }

  // The facts of `v` (a word under a mask); those of the whole word help decide masked tests.
  static Truth Decide(const State& s, const Val& v, uint16_t op, uint32_t k) {
    if (v.kind == Val::kConst) {
      switch (op) {
        case BPF_JEQ:
          return v.c == k ? Truth::kTrue : Truth::kFalse;
        case BPF_JGT:
          return v.c > k ? Truth::kTrue : Truth::kFalse;
        case BPF_JGE:
          return v.c >= k ? Truth::kTrue : Truth::kFalse;
        case BPF_JSET:
          return (v.c & k) != 0 ? Truth::kTrue : Truth::kFalse;
      }
      return Truth::kUnknown;
    }
    if (v.kind != Val::kWord) return Truth::kUnknown;
    if (op == BPF_JSET) {
      // (word & mask & k) != 0 is "not equal to 0" of a narrower mask.
      Val narrow = v;
      narrow.mask = v.mask & k;
      if (narrow.mask == 0) return Truth::kFalse;
      Truth eq = Decide(s, narrow, BPF_JEQ, 0);
      if (eq == Truth::kUnknown) return eq;
      return eq == Truth::kTrue ? Truth::kFalse : Truth::kTrue;
    }
    // A whole word pinned to one value, or below the mask's lowest bit, settles a masked test.
    if (v.mask != UINT32_MAX) {
      if (auto it = s.facts.find({v.word, UINT32_MAX}); it != s.facts.end()) {
        const Facts& w = it->second;
        if (w.lo == w.hi) return Decide(s, Val{Val::kConst, w.lo & v.mask, 0, 0}, op, k);
        const uint32_t low_bit = v.mask & (~v.mask + 1);
        if (w.hi < low_bit) return Decide(s, Val{Val::kConst, 0, 0, 0}, op, k);
      }
    }
    Facts none;
    none.hi = v.mask;  // word & mask is at most mask
    auto it = s.facts.find({v.word, v.mask});
    const Facts& f = it == s.facts.end() ? none : it->second;
    switch (op) {
      case BPF_JEQ:
        if ((k & ~v.mask) != 0 || f.Excludes(k)) return Truth::kFalse;
        if (f.lo == f.hi) return Truth::kTrue;
        return Truth::kUnknown;
      case BPF_JGT:
        if (f.lo > k) return Truth::kTrue;
        if (f.hi <= k) return Truth::kFalse;
        return Truth::kUnknown;
      case BPF_JGE:
        if (f.lo >= k) return Truth::kTrue;
        if (f.hi < k) return Truth::kFalse;
        return Truth::kUnknown;
    }
    return Truth::kUnknown;
  }

  // Records that the test came out `taken` on this path; false when no value can do that.
  static bool Assume(State& s, Val v, uint16_t op, uint32_t k, bool taken) {
    if (op == BPF_JSET) {
      v.mask &= k;
      op = BPF_JEQ;
      k = 0;
      taken = !taken;
    }
    auto [it, fresh] = s.facts.try_emplace({v.word, v.mask});
    Facts& f = it->second;
    if (fresh) f.hi = v.mask;
    switch (op) {
      case BPF_JEQ:
        if (taken) {
          f.lo = f.hi = k;
        } else {
          f.ne.insert(std::lower_bound(f.ne.begin(), f.ne.end(), k), k);
          while (f.lo <= f.hi && std::binary_search(f.ne.begin(), f.ne.end(), f.lo)) {
            if (f.lo == UINT32_MAX) return false;
            ++f.lo;
          }
          while (f.lo <= f.hi && std::binary_search(f.ne.begin(), f.ne.end(), f.hi)) {
            if (f.hi == 0) return false;
            --f.hi;
          }
        }
        break;
      case BPF_JGT:
        if (taken) {
          if (k == UINT32_MAX) return false;
          f.lo = std::max(f.lo, k + 1);
        } else {
          f.hi = std::min(f.hi, k);
        }
        break;
      case BPF_JGE:
        if (taken) {
          f.lo = std::max(f.lo, k);
        } else {
          if (k == 0) return false;
          f.hi = std::min(f.hi, k - 1);
        }
        break;
    }
    return f.lo <= f.hi && !(f.lo == f.hi && std::binary_search(f.ne.begin(), f.ne.end(), f.lo));
  }

  enum class Step { kNext, kFork, kReturn, kFail };

  // Runs the instruction at s.pc. kFork: a test it cannot decide (its operands in *v, *k);
  // kReturn: the action in *ret.
  Step Execute(const std::vector<sock_filter>& prog, State& s, uint32_t* ret, Val* v, uint32_t* k) {
    if (++steps_ > kBudget) return Step::kFail;
    const sock_filter& f = prog[s.pc];
    const uint16_t cls = BPF_CLASS(f.code);
    switch (cls) {
      case BPF_LD:
      case BPF_LDX: {
        if (BPF_SIZE(f.code) != BPF_W) return Step::kFail;
        Val r;
        switch (BPF_MODE(f.code)) {
          case BPF_ABS:
            if (cls != BPF_LD || f.k % 4 != 0 || f.k / 4 >= kDataWords) return Step::kFail;
            r = Val{Val::kWord, 0, f.k / 4, UINT32_MAX};
            break;
          case BPF_IMM:
            r = Val{Val::kConst, f.k, 0, 0};
            break;
          case BPF_LEN:
            r = Val{Val::kConst, kDataWords * 4, 0, 0};
            break;
          case BPF_MEM:
            if (f.k >= BPF_MEMWORDS || s.mem[f.k].kind == Val::kUnset) return Step::kFail;
            r = s.mem[f.k];
            break;
          default:
            return Step::kFail;
        }
        (cls == BPF_LD ? s.a : s.x) = r;
        ++s.pc;
        return Step::kNext;
      }
      case BPF_ST:
      case BPF_STX:
        if (f.k >= BPF_MEMWORDS) return Step::kFail;
        s.mem[f.k] = cls == BPF_ST ? s.a : s.x;
        ++s.pc;
        return Step::kNext;
      case BPF_ALU: {
        const uint16_t op = BPF_OP(f.code);
        Val rhs = BPF_SRC(f.code) == BPF_X ? s.x : Val{Val::kConst, f.k, 0, 0};
        if (op == BPF_NEG) rhs = Val{Val::kConst, 0, 0, 0};
        if (op == BPF_DIV || op == BPF_MOD || op == BPF_LSH || op == BPF_RSH) {
          // The kernel refuses a constant 0 divisor or a shift by 32 or more; a register
          // divisor of 0 ends the program with 0 (kill), as the kernel runs classic BPF.
          if (rhs.kind != Val::kConst) return Step::kFail;
          const bool div = op == BPF_DIV || op == BPF_MOD;
          if (div ? rhs.c == 0 : rhs.c >= 32) {
            if (!div || BPF_SRC(f.code) != BPF_X) return Step::kFail;
            *ret = 0;
            return Step::kReturn;
          }
        }
        if (s.a.kind == Val::kConst && rhs.kind == Val::kConst) {
          const std::optional<uint32_t> r = ConstantAlu(op, s.a.c, rhs.c);
          if (!r) return Step::kFail;
          s.a = Val{Val::kConst, *r, 0, 0};
        } else if (s.a.kind == Val::kWord && op == BPF_AND && rhs.kind == Val::kConst) {
          s.a.mask &= rhs.c;  // masked argument comparisons are the one arithmetic followed
        } else {
          s.a = Val{Val::kOther, 0, 0, 0};
        }
        ++s.pc;
        return Step::kNext;
      }
      case BPF_JMP: {
        const uint16_t op = BPF_OP(f.code);
        if (op == BPF_JA) {
          s.pc += 1 + f.k;
          return Step::kNext;
        }
        if (op != BPF_JEQ && op != BPF_JGT && op != BPF_JGE && op != BPF_JSET) return Step::kFail;
        uint32_t operand = f.k;
        if (BPF_SRC(f.code) == BPF_X) {
          if (s.x.kind != Val::kConst) return Step::kFail;
          operand = s.x.c;
        }
        const Truth t = Decide(s, s.a, op, operand);
        if (t == Truth::kUnknown) {
          if (s.a.kind != Val::kWord) return Step::kFail;
          *v = s.a;
          *k = operand;
          return Step::kFork;
        }
        s.pc += 1 + (t == Truth::kTrue ? f.jt : f.jf);
        return Step::kNext;
      }
      case BPF_RET:
        if (BPF_RVAL(f.code) == BPF_K) {
          *ret = f.k;
        } else if (BPF_RVAL(f.code) == BPF_A && s.a.kind == Val::kConst) {
          *ret = s.a.c;
        } else {
          return Step::kFail;
        }
        return Step::kReturn;
      case BPF_MISC:
        if (BPF_MISCOP(f.code) == BPF_TAX) {
          s.x = s.a;
        } else if (BPF_MISCOP(f.code) == BPF_TXA) {
          s.a = s.x;
        } else {
          return Step::kFail;
        }
        ++s.pc;
        return Step::kNext;
    }
    return Step::kFail;
  }

  // Follows every path of `prog` from `s` (a worklist, not recursion: a program has up to 4096
  // tests on a path, and cryod's threads have small stacks); calls leaf(state, action) at each
  // end.
  template <typename Leaf>
  void Walk(const std::vector<sock_filter>& prog, State start, const Leaf& leaf) {
    std::vector<State> todo;
    todo.push_back(std::move(start));
    while (ok_ && !todo.empty()) {
      State s = std::move(todo.back());
      todo.pop_back();
      while (ok_) {
        if (s.pc >= prog.size()) {
          ok_ = false;
          return;
        }
        uint32_t ret = 0, k = 0;
        Val v;
        const Step step = Execute(prog, s, &ret, &v, &k);
        if (step == Step::kNext) continue;
        if (step == Step::kFail) {
          ok_ = false;
          return;
        }
        if (step == Step::kReturn) {
          leaf(s, ret);
          break;
        }
        // A test this path cannot decide: both ways, each knowing how it came out. The way
        // not taken waits: in a profile's long chain of "nr == k: allow" tests that keeps one
        // state waiting, not one per test. Copies count against the budget.
        const sock_filter& f = prog[s.pc];
        const uint16_t op = BPF_OP(f.code);
        State other = s;
        steps_ += s.facts.size();
        if (Assume(other, v, op, k, false)) {
          other.pc += 1 + f.jf;
          todo.push_back(std::move(other));
        }
        if (!Assume(s, v, op, k, true)) break;
        s.pc += 1 + f.jt;
      }
    }
  }

  void WalkFirst(State s) {
    Walk(p_, std::move(s), [this](const State& end, uint32_t action) {
      // The second program, on every data the first one's path allows.
      State q;
      q.facts = end.facts;
      Walk(q_, std::move(q), [this, action](const State&, uint32_t other) {
        if (other != action) ok_ = false;
      });
    });
  }

  std::vector<sock_filter> p_, q_;
  uint64_t steps_ = 0;
  bool ok_ = true;
};

std::optional<std::vector<sock_filter>> Decode(const std::string& bytes) {
  if (bytes.empty() || bytes.size() % sizeof(sock_filter) != 0) return std::nullopt;
  std::vector<sock_filter> out(bytes.size() / sizeof(sock_filter));
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

}  // namespace

bool SameSeccompDecisions(const std::string& a, const std::string& b) {
  auto p = Decode(a);
  auto q = Decode(b);
  if (!p || !q) return false;
  return Comparer(*std::move(p), *std::move(q)).Run();
}

}  // namespace cryo::criu
