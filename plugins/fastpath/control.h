#pragma once

// The library's end of the control channel (lib/contract/gpu_fastpath.h): one thread that
// accepts cryod's connections on the process's abstract socket and serves one request each.

#include <sys/types.h>

#include <atomic>
#include <functional>
#include <string>
#include <thread>

#include "lib/base/fd.h"
#include "lib/contract/gpu_fastpath_messages.h"
#include "plugins/fastpath/mover.h"
#include "plugins/fastpath/registry.h"
#include "plugins/fastpath/result.h"

namespace cryo::fastpath {

class Control {
 public:
  // `extra_status` adds to the status reply (the interposer's call counts).
  Control(Mover& mover, Registry& reg,
          std::function<void(contract::gpu_fastpath::StatusReply&)> extra_status)
      : mover_(mover), reg_(reg), extra_status_(std::move(extra_status)) {}

  // Listens on kSocketPrefix + `pid` (0: getpid()) and starts the serving thread. Idempotent.
  // Fails when the socket cannot be made (the fast path is then unavailable).
  Result Start(pid_t pid = 0);
  // In a child after fork(): the parent's socket is not ours to serve.
  void ForgetAfterFork();
  // Serves one connection (the thread's loop calls this; tests too).
  void Serve(int conn);

 private:
  void Loop();
  contract::gpu_fastpath::StatusReply Status();
  void HandleDrain(int conn, const contract::gpu_fastpath::Request& req,
                   std::vector<UniqueFd>& fds);
  void HandleRefill(int conn, const contract::gpu_fastpath::Request& req,
                    std::vector<UniqueFd>& fds);
  // Legacy IPC: the descriptor of an export, to another process of the job (legacy_ipc.h).
  void HandleShare(int conn, const contract::gpu_fastpath::Request& req);
  // A userfaultfd of this process for cryod, which tracks the job's writes through it while it
  // copies the job's memory ahead of a checkpoint's freeze (gpu_fastpath.h, "Tracking").
  void HandleTrack(int conn);
  // A held drain's cut: quiesced, answered, then true once cryod says "go" (false: the job
  // goes on, and cryod has been answered).
  bool HoldForGo(int conn, const contract::gpu_fastpath::Request& req);
  // A held refill's imports: their descriptors in cryod's "go" (or several), imported, answered.
  void ImportAndAnswer(int conn, int64_t hold_ms);

  Mover& mover_;
  Registry& reg_;
  std::function<void(contract::gpu_fastpath::StatusReply&)> extra_status_;
  int listen_fd_ = -1;
  pid_t pid_ = 0;
  std::atomic<bool> started_{false};
};

}  // namespace cryo::fastpath
