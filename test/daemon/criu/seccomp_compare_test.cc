#include "daemon/criu/seccomp_compare.h"

#include <gtest/gtest.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>

#include <cstddef>
#include <string>
#include <vector>

namespace cryo::criu {
namespace {

constexpr uint32_t kNr = 0;
constexpr uint32_t kArch = 4;
constexpr uint32_t kArg0Lo = 16;
constexpr uint32_t kEnosys = SECCOMP_RET_ERRNO | 38;
constexpr uint32_t kEperm = SECCOMP_RET_ERRNO | 1;

std::string Bytes(const std::vector<sock_filter>& prog) {
  return std::string(reinterpret_cast<const char*>(prog.data()), prog.size() * sizeof(sock_filter));
}

sock_filter Stmt(uint16_t code, uint32_t k) { return BPF_STMT(code, k); }
sock_filter Jump(uint16_t code, uint32_t k, uint8_t jt, uint8_t jf) {
  return BPF_JUMP(code, k, jt, jf);
}

// The shape runc 1.1 puts before a profile: for each architecture it knows, calls above the
// highest number the profile names get -ENOSYS (x32's numbers carry bit 30). `order` is the
// order of the architecture checks, which runc takes from a Go map.
std::vector<sock_filter> Stub(const std::vector<uint32_t>& order) {
  std::vector<sock_filter> p;
  p.push_back(Stmt(BPF_LD | BPF_W | BPF_ABS, kArch));
  // Each arch: jeq arch -> its block; blocks follow, then "go on" (ja past them).
  const size_t n = order.size();
  for (size_t i = 0; i < n; ++i) {
    // Jump to block i: past the remaining jeqs and the ja, then i blocks of 4 instructions.
    p.push_back(Jump(BPF_JMP | BPF_JEQ | BPF_K, order[i], static_cast<uint8_t>(n - i + 4 * i), 0));
  }
  p.push_back(Stmt(BPF_JMP | BPF_JA, static_cast<uint32_t>(4 * n + 1)));
  for (size_t i = 0; i < n; ++i) {
    const uint32_t highest = order[i] == AUDIT_ARCH_X86_64 ? 0x1c1 : 0x1b0;
    const uint32_t remaining = static_cast<uint32_t>(4 * (n - 1 - i));
    p.push_back(Stmt(BPF_LD | BPF_W | BPF_ABS, kNr));
    p.push_back(Jump(BPF_JMP | BPF_JSET | BPF_K, 0x40000000, 0, 1));  // x32: not handled here
    p.push_back(Stmt(BPF_JMP | BPF_JA, remaining + 2));
    p.push_back(Jump(BPF_JMP | BPF_JGT | BPF_K, highest, static_cast<uint8_t>(remaining),
                     static_cast<uint8_t>(remaining + 1)));
  }
  p.push_back(Stmt(BPF_RET | BPF_K, kEnosys));
  return p;
}

// The profile itself, as libseccomp writes one: x86_64 only, `allowed` calls allowed, clone only
// with no namespace flags (arg0 & `clone_mask` == 0), everything else EPERM (`fallback`).
std::vector<sock_filter> Body(const std::vector<uint32_t>& allowed,
                              uint32_t clone_mask = 0x7e020000, uint32_t fallback = kEperm) {
  std::vector<sock_filter> p;
  const auto n = static_cast<uint8_t>(allowed.size());
  p.push_back(Stmt(BPF_LD | BPF_W | BPF_ABS, kArch));
  p.push_back(Jump(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0));
  p.push_back(Stmt(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS));
  p.push_back(Stmt(BPF_LD | BPF_W | BPF_ABS, kNr));
  // Each allowed call jumps to the allow at the end; clone (56) goes to its argument check.
  for (uint8_t i = 0; i < n; ++i) {
    p.push_back(Jump(BPF_JMP | BPF_JEQ | BPF_K, allowed[i], static_cast<uint8_t>(n - i + 4), 0));
  }
  p.push_back(Jump(BPF_JMP | BPF_JEQ | BPF_K, 56, 0, 3));
  p.push_back(Stmt(BPF_LD | BPF_W | BPF_ABS, kArg0Lo));
  p.push_back(Stmt(BPF_ALU | BPF_AND | BPF_K, clone_mask));
  p.push_back(Jump(BPF_JMP | BPF_JEQ | BPF_K, 0, 1, 0));
  p.push_back(Stmt(BPF_RET | BPF_K, fallback));
  p.push_back(Stmt(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
  return p;
}

std::vector<sock_filter> Cat(std::vector<sock_filter> a, const std::vector<sock_filter>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

const std::vector<uint32_t> kCalls = {0, 1, 2, 3, 9, 60, 231};

TEST(SeccompCompareTest, TheSameProfileWithItsArchitectureChecksInAnotherOrderDecidesTheSame) {
  const auto a = Bytes(Cat(Stub({AUDIT_ARCH_I386, AUDIT_ARCH_X86_64}), Body(kCalls)));
  const auto b = Bytes(Cat(Stub({AUDIT_ARCH_X86_64, AUDIT_ARCH_I386}), Body(kCalls)));
  ASSERT_NE(a, b);
  EXPECT_TRUE(SameSeccompDecisions(a, b));
  EXPECT_TRUE(SameSeccompDecisions(b, a));
  EXPECT_TRUE(SameSeccompDecisions(a, a));
  // The calls in another order are the same profile too.
  const auto c =
      Bytes(Cat(Stub({AUDIT_ARCH_I386, AUDIT_ARCH_X86_64}), Body({231, 60, 9, 3, 2, 1, 0})));
  EXPECT_TRUE(SameSeccompDecisions(a, c));
}

TEST(SeccompCompareTest, ACallAllowedByOnlyOneOfThemIsADifference) {
  const auto stub = Stub({AUDIT_ARCH_I386, AUDIT_ARCH_X86_64});
  const auto a = Bytes(Cat(stub, Body(kCalls)));
  EXPECT_FALSE(SameSeccompDecisions(a, Bytes(Cat(stub, Body({0, 1, 2, 3, 9, 60})))));
  EXPECT_FALSE(SameSeccompDecisions(a, Bytes(Cat(stub, Body({0, 1, 2, 3, 9, 60, 231, 101})))));
  // Another errno for what is refused, or another way to refuse.
  EXPECT_FALSE(SameSeccompDecisions(a, Bytes(Cat(stub, Body(kCalls, 0x7e020000, kEnosys)))));
  // The stub of one architecture fewer: its high calls get EPERM, not ENOSYS.
  EXPECT_FALSE(SameSeccompDecisions(a, Bytes(Cat(Stub({AUDIT_ARCH_X86_64}), Body(kCalls)))));
  // No stub at all, and a program that allows everything.
  EXPECT_FALSE(SameSeccompDecisions(a, Bytes(Body(kCalls))));
  EXPECT_FALSE(SameSeccompDecisions(a, Bytes({Stmt(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)})));
}

TEST(SeccompCompareTest, ArgumentChecksAreComparedByTheirMasks) {
  const auto stub = Stub({AUDIT_ARCH_I386, AUDIT_ARCH_X86_64});
  const auto a = Bytes(Cat(stub, Body(kCalls, 0x7e020000)));
  // clone with CLONE_NEWUSER (0x10000000) allowed by one only.
  EXPECT_FALSE(SameSeccompDecisions(a, Bytes(Cat(stub, Body(kCalls, 0x6e020000)))));
  EXPECT_TRUE(SameSeccompDecisions(
      a, Bytes(Cat(Stub({AUDIT_ARCH_X86_64, AUDIT_ARCH_I386}), Body(kCalls, 0x7e020000)))));
}

TEST(SeccompCompareTest, ATestThePathAlreadySettledChangesNothing) {
  // nr == 5 twice: the second one can never be taken.
  std::vector<sock_filter> a = {
      Stmt(BPF_LD | BPF_W | BPF_ABS, kNr),      Jump(BPF_JMP | BPF_JEQ | BPF_K, 5, 2, 0),
      Jump(BPF_JMP | BPF_JEQ | BPF_K, 5, 2, 0), Stmt(BPF_RET | BPF_K, kEperm),
      Stmt(BPF_RET | BPF_K, SECCOMP_RET_ALLOW), Stmt(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
  };
  std::vector<sock_filter> b = {
      Stmt(BPF_LD | BPF_W | BPF_ABS, kNr),
      Jump(BPF_JMP | BPF_JGE | BPF_K, 5, 0, 2),  // 5 <= nr ...
      Jump(BPF_JMP | BPF_JGT | BPF_K, 5, 1, 0),  // ... and not above 5
      Stmt(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      Stmt(BPF_RET | BPF_K, kEperm),
  };
  EXPECT_TRUE(SameSeccompDecisions(Bytes(a), Bytes(b)));
  b[3] = Stmt(BPF_RET | BPF_K, SECCOMP_RET_TRACE);
  EXPECT_FALSE(SameSeccompDecisions(Bytes(a), Bytes(b)));
}

TEST(SeccompCompareTest, WhatItCannotFollowOrTheKernelWouldNotLoadIsADifference) {
  // Arithmetic on the call number: not followed, so not the same, even as itself.
  const std::vector<sock_filter> arith = {
      Stmt(BPF_LD | BPF_W | BPF_ABS, kNr),
      Stmt(BPF_ALU | BPF_ADD | BPF_K, 1),
      Jump(BPF_JMP | BPF_JEQ | BPF_K, 6, 0, 1),
      Stmt(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      Stmt(BPF_RET | BPF_K, kEperm),
  };
  EXPECT_FALSE(SameSeccompDecisions(Bytes(arith), Bytes(arith)));
  // A returned value that depends on the call.
  const std::vector<sock_filter> ret_a = {Stmt(BPF_LD | BPF_W | BPF_ABS, kNr),
                                          Stmt(BPF_RET | BPF_A, 0)};
  EXPECT_FALSE(SameSeccompDecisions(Bytes(ret_a), Bytes(ret_a)));
  // A constant one is followed.
  const std::vector<sock_filter> ret_const = {Stmt(BPF_LD | BPF_IMM, SECCOMP_RET_ALLOW),
                                              Stmt(BPF_RET | BPF_A, 0)};
  EXPECT_TRUE(
      SameSeccompDecisions(Bytes(ret_const), Bytes({Stmt(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)})));
  // A register divisor of 0 ends the program with 0 (kill), as the kernel runs it.
  const std::vector<sock_filter> div_zero = {
      Stmt(BPF_LDX | BPF_IMM, 0), Stmt(BPF_LD | BPF_W | BPF_ABS, kNr),
      Stmt(BPF_ALU | BPF_DIV | BPF_X, 0), Stmt(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)};
  EXPECT_TRUE(SameSeccompDecisions(Bytes(div_zero),
                                   Bytes({Stmt(BPF_RET | BPF_K, SECCOMP_RET_KILL_THREAD)})));
  EXPECT_FALSE(
      SameSeccompDecisions(Bytes(div_zero), Bytes({Stmt(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)})));
  // An instruction the kernel does not know (an ALU operation 0xe0, a code with high bits).
  const std::vector<sock_filter> unknown_op = {Stmt(BPF_ALU | 0xe0, 3),
                                               Stmt(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)};
  EXPECT_FALSE(SameSeccompDecisions(Bytes(unknown_op), Bytes(unknown_op)));
  const std::vector<sock_filter> high_bits = {Stmt(0x100 | BPF_LD | BPF_IMM, 3),
                                              Stmt(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)};
  EXPECT_FALSE(SameSeccompDecisions(Bytes(high_bits), Bytes(high_bits)));
  // Not programs: a jump past the end, no return at the end, a load beyond seccomp_data, an
  // odd size, nothing.
  const std::vector<sock_filter> past = {Jump(BPF_JMP | BPF_JEQ | BPF_K, 0, 5, 0),
                                         Stmt(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)};
  EXPECT_FALSE(SameSeccompDecisions(Bytes(past), Bytes(past)));
  const std::vector<sock_filter> no_ret = {Stmt(BPF_LD | BPF_W | BPF_ABS, kNr)};
  EXPECT_FALSE(SameSeccompDecisions(Bytes(no_ret), Bytes(no_ret)));
  const std::vector<sock_filter> beyond = {Stmt(BPF_LD | BPF_W | BPF_ABS, 64),
                                           Stmt(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)};
  EXPECT_FALSE(SameSeccompDecisions(Bytes(beyond), Bytes(beyond)));
  const std::string allow = Bytes({Stmt(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)});
  EXPECT_FALSE(SameSeccompDecisions(allow.substr(0, 7), allow.substr(0, 7)));
  EXPECT_FALSE(SameSeccompDecisions("", ""));
}

}  // namespace
}  // namespace cryo::criu
