#pragma once

// Framing of the GPU fast-path control channel (gpu_fastpath.h): one SOCK_SEQPACKET message per
// request or reply, descriptors attached with SCM_RIGHTS. Plain C++ (no abseil): the library
// that runs inside jobs uses it too.

#include <sys/types.h>

#include <string>
#include <vector>

namespace cryo::contract::gpu_fastpath {

// Sends one message with optional descriptors; false (errno set) when it could not, e.g. the
// peer is gone. Never raises SIGPIPE.
bool SendMessage(int fd, const std::string& text, const std::vector<int>& fds = {});
// Receives one message and its descriptors (the caller's to close); false on EOF or error, and
// on a message longer than kMaxMessage or with more than kMaxFiles descriptors.
bool ReceiveMessage(int fd, std::string* text, std::vector<int>* fds);
// The abstract socket address of a process's channel (pid as the process sees itself).
std::string SocketName(pid_t pid);
// Connects to `name` in the abstract namespace of the calling thread's network namespace; -1
// (errno set) when nobody listens.
int ConnectAbstract(const std::string& name);

}  // namespace cryo::contract::gpu_fastpath
