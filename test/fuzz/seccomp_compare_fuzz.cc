// The filters SameSeccompDecisions compares come from a checkpoint's images, which a pod author
// may write. For any two byte strings it returns without a crash, a hang or undefined
// behaviour; and when it says two programs decide alike, a plain interpreter (below, written
// apart from the comparer) finds them deciding alike on every seccomp_data tried: the constants
// the programs test, and their neighbours, in each word.

#include <linux/filter.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "daemon/criu/seccomp_compare.h"

namespace {

std::vector<sock_filter> Decode(const std::string& b) {
  std::vector<sock_filter> p(b.size() / sizeof(sock_filter));
  if (!p.empty()) std::memcpy(p.data(), b.data(), p.size() * sizeof(sock_filter));
  return p;
}

// Runs `p` on `data` (16 words); nullopt where the kernel would not have loaded it or the run
// leaves the program.
std::optional<uint32_t> Interpret(const std::vector<sock_filter>& p, const uint32_t* data) {
  uint32_t a = 0, x = 0, mem[BPF_MEMWORDS] = {};
  for (size_t pc = 0; pc < p.size(); ++pc) {
    const sock_filter& f = p[pc];
    const uint32_t src = BPF_SRC(f.code) == BPF_X ? x : f.k;
    switch (BPF_CLASS(f.code)) {
      case BPF_LD:
      case BPF_LDX: {
        // Both registers load alike; only A loads from seccomp_data.
        uint32_t& dst = BPF_CLASS(f.code) == BPF_LD ? a : x;
        if (BPF_CLASS(f.code) == BPF_LD && BPF_MODE(f.code) == BPF_ABS &&
            BPF_SIZE(f.code) == BPF_W && f.k % 4 == 0 && f.k < 64) {
          dst = data[f.k / 4];
        } else if (BPF_MODE(f.code) == BPF_IMM) {
          dst = f.k;
        } else if (BPF_MODE(f.code) == BPF_LEN) {
          dst = 64;
        } else if (BPF_MODE(f.code) == BPF_MEM && f.k < BPF_MEMWORDS) {
          dst = mem[f.k];
        } else {
          return std::nullopt;
        }
        break;
      }
      case BPF_ST:
      case BPF_STX:
        if (f.k >= BPF_MEMWORDS) return std::nullopt;
        mem[f.k] = BPF_CLASS(f.code) == BPF_ST ? a : x;
        break;
      case BPF_ALU:
        switch (BPF_OP(f.code)) {
          case BPF_ADD:
            a += src;
            break;
          case BPF_SUB:
            a -= src;
            break;
          case BPF_MUL:
            a *= src;
            break;
          // Classic BPF in the kernel: a register divisor of 0 returns 0; a constant one, or a
          // shift by 32 or more, is refused when the program is loaded.
          case BPF_DIV:
          case BPF_MOD:
            if (src == 0) {
              if (BPF_SRC(f.code) == BPF_X) return 0;
              return std::nullopt;
            }
            a = BPF_OP(f.code) == BPF_DIV ? a / src : a % src;
            break;
          case BPF_OR:
            a |= src;
            break;
          case BPF_AND:
            a &= src;
            break;
          case BPF_XOR:
            a ^= src;
            break;
          case BPF_LSH:
            if (src >= 32) return std::nullopt;
            a <<= src;
            break;
          case BPF_RSH:
            if (src >= 32) return std::nullopt;
            a >>= src;
            break;
          case BPF_NEG:
            a = 0u - a;
            break;
          default:
            return std::nullopt;
        }
        break;
      case BPF_JMP: {
        bool t = false;
        switch (BPF_OP(f.code)) {
          case BPF_JA:
            pc += f.k;
            continue;
          case BPF_JEQ:
            t = a == src;
            break;
          case BPF_JGT:
            t = a > src;
            break;
          case BPF_JGE:
            t = a >= src;
            break;
          case BPF_JSET:
            t = (a & src) != 0;
            break;
          default:
            return std::nullopt;
        }
        pc += t ? f.jt : f.jf;
        break;
      }
      case BPF_RET:
        if (BPF_RVAL(f.code) == BPF_K) return f.k;
        if (BPF_RVAL(f.code) == BPF_A) return a;
        return std::nullopt;
      case BPF_MISC:
        if (BPF_MISCOP(f.code) == BPF_TAX) {
          x = a;
        } else if (BPF_MISCOP(f.code) == BPF_TXA) {
          a = x;
        } else {
          return std::nullopt;
        }
        break;
      default:
        return std::nullopt;
    }
  }
  return std::nullopt;
}

}  // namespace

// Input: a u16 length, that many bytes of the first program, the rest the second.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  uint16_t n;
  std::memcpy(&n, data, 2);
  data += 2;
  size -= 2;
  if (n > size) n = static_cast<uint16_t>(size);
  const std::string a(reinterpret_cast<const char*>(data), n);
  const std::string b(reinterpret_cast<const char*>(data + n), size - n);
  (void)cryo::criu::SameSeccompDecisions(a, a);
  if (!cryo::criu::SameSeccompDecisions(a, b)) return 0;
  const auto pa = Decode(a), pb = Decode(b);
  // The values worth trying in a word: every constant either program compares or masks with,
  // one on each side, and 0.
  std::set<uint32_t> values = {0, 1, UINT32_MAX};
  for (const auto* p : {&pa, &pb}) {
    for (const auto& f : *p) {
      if (BPF_CLASS(f.code) == BPF_JMP || BPF_CLASS(f.code) == BPF_ALU) {
        values.insert({f.k, f.k - 1, f.k + 1});
      }
    }
  }
  const std::vector<uint32_t> vals(values.begin(), values.end());
  // Words 0 (nr) and 1 (arch) take every pair of values; the others follow along.
  size_t tried = 0;
  for (size_t i = 0; i < vals.size() && tried < 20000; ++i) {
    for (size_t j = 0; j < vals.size() && tried < 20000; ++j, ++tried) {
      uint32_t d[16];
      for (uint32_t w = 0; w < 16; ++w) d[w] = vals[(i + j * w + w) % vals.size()];
      d[0] = vals[i];
      d[1] = vals[j];
      const auto ra = Interpret(pa, d), rb = Interpret(pb, d);
      if (!ra || !rb || *ra != *rb) std::abort();  // called the same, and they are not
    }
  }
  return 0;
}
