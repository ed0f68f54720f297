#pragma once

// Framing of the GPU fast-path control channel (gpu_fastpath.h): one SOCK_SEQPACKET message per
// request or reply, descriptors attached with SCM_RIGHTS. Plain C++ (no abseil): the library
// that runs inside jobs uses it too.

#include <sys/socket.h>  // ucred
#include <sys/types.h>

#include <string>
#include <vector>

#include "lib/base/fd.h"

namespace cryo::contract::gpu_fastpath {

// Sends one message with optional descriptors; false (errno set) when it could not, e.g. the
// peer is gone. Never raises SIGPIPE.
[[nodiscard]] bool SendMessage(int fd, const std::string& text, const std::vector<int>& fds = {});
// Receives one message and its descriptors (the caller's); false on EOF or error, and
// on a message longer than kMaxMessage or with more than kMaxFiles descriptors.
bool ReceiveMessage(int fd, std::string* text, std::vector<UniqueFd>* fds);
// The abstract socket address of a process's channel (pid as the process sees itself).
std::string SocketName(pid_t pid);
// Connects to `name` in the abstract namespace of the calling thread's network namespace; an
// empty descriptor (errno set) when nobody listens.
UniqueFd ConnectAbstract(const std::string& name);

// Processes of different pid namespaces share a network namespace (pods on the host's network):
// two of them with the same pid would want one name. A process whose name is taken listens on
// an alternate (SocketName(pid) + ".1", ".2", ...), at most kAlternateNames of them.
inline constexpr int kAlternateNames = 8;
std::string AlternateSocketName(pid_t pid, int k);  // k = 0: SocketName(pid)

// Connects to the channel of the process that calls itself `pid`, which is `peer_pid` as the
// caller sees it (the same in one pid namespace; cryod passes the host's pid): each of its
// names in turn, keeping the connection whose peer (SO_PEERCRED) is `peer_pid`. Empty with errno
// ECONNREFUSED when nobody listens on any, EPERM when only other processes do (then `*held_by`,
// when given, is the pid that holds the first name: 0 for one outside the caller's namespace).
// `*peer`, when given, receives the kept peer's credentials.
UniqueFd ConnectToProcess(pid_t pid, pid_t peer_pid, pid_t* held_by = nullptr,
                          ucred* peer = nullptr);

struct Challenge;  // gpu_fastpath_messages.h
// Answers a library's challenge on `fd`: reads its bytes in process `pid` (as the caller sees it)
// with process_vm_readv and sends them back in a "prove". false, with *why, when the caller may
// not read them (it may not ptrace the process) or could not send.
bool AnswerChallenge(int fd, pid_t pid, const Challenge& c, std::string* why);

}  // namespace cryo::contract::gpu_fastpath
