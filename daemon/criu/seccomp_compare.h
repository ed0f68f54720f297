// Whether two seccomp filters decide every system call the same way.
//
// A container runtime compiles a pod's seccomp profile into a classic BPF program, and the same
// profile does not always give the same bytes: runc 1.1 puts its per-architecture -ENOSYS checks
// in Go map order, so two pods of one Deployment can carry programs that differ in their first
// instructions and allow exactly the same calls. A restore compares the checkpoint's filters with
// those of its new container; comparing bytes refused such checkpoints about one time in two.
//
// SameSeccompDecisions explores both programs over the fields of struct seccomp_data (arch,
// nr, instruction pointer, arguments): it follows every path of the first, and for each one the
// second under what that path fixed, and wants the same action at every pair. It is sound and
// not complete: a program it cannot follow (arithmetic on a field, a return of a computed value,
// a test it cannot decide from what the path knows and that leads the two apart on a path the
// values cannot take) is called different. Different means refused, never allowed.
#pragma once

#include <string>

namespace cryo::criu {

// `a` and `b` are programs as PTRACE_SECCOMP_GET_FILTER and seccomp.img hold them (struct
// sock_filter, 8 bytes each). True only when both are valid seccomp programs that return the same
// action for every struct seccomp_data. Bounded work: a pair it cannot settle within its budget
// is called different.
bool SameSeccompDecisions(const std::string& a, const std::string& b);

}  // namespace cryo::criu
