#pragma once

// CRIU's network lock: a dump with --tcp-established and --leave-stopped keeps an nftables table
// ("inet CRIU-<run id>") that drops the job's packets until a restore. When cryod resumes the
// job instead, the lock must go.

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/criu/listen_ports.h"

namespace cryo::criu {

// nft with `args` (and `script` on its stdin), in the network namespace of `netns_pid` through
// `nsexec` (0: cryod's own), bounded to 30 s: whether it exited 0, and what it printed (stdout
// and stderr). An error only when it could not be run.
struct NftRun {
  bool ok = false;
  std::string output;
};
absl::StatusOr<NftRun> RunNft(const std::vector<std::string>& args, pid_t netns_pid,
                              const std::string& nsexec, const std::string& script = "");

// Deletes every CRIU lock table named in the dump log at `dump_log`. `container_init` > 0: the
// lock lives in that container's network namespace and is removed from there through
// `nsexec`. Harmless when there is no lock. Best effort (logged).
void RemoveNetworkLock(const std::string& dump_log, pid_t container_init,
                       const std::string& nsexec);

// A dump with --tcp-established leaves the job's established TCP sockets in repair mode when it
// leaves the job stopped (CRIU takes them out only for a job it resumes itself): a job resumed
// so would find its connections dead. Takes every TCP socket of `pids` that is in repair mode
// out of it (through a duplicate of its descriptor: pidfd_getfd), as CRIU would have; the
// kernel then probes the peer's window, and the connection goes on. Best effort (logged);
// returns how many sockets left repair mode.
int LeaveTcpRepair(const std::vector<pid_t>& pids);

// Holds a job's connections across the restore of its members (a job checkpoint, issue 37): a
// member restored first must not reach a member not restored yet, whose kernel would reset the
// connection. Drops the packets of `conns` both ways in the network namespace of `netns_pid`
// (0: cryod's own, through `nsexec` otherwise), in nftables table "inet cryo-lock-<name>", until
// Release (or destruction). The members are then restored with CRIU's own lock skipped.
class ConnectionLock {
 public:
  static absl::StatusOr<std::unique_ptr<ConnectionLock>> Take(const std::string& name,
                                                              const std::vector<Connection>& conns,
                                                              pid_t netns_pid,
                                                              const std::string& nsexec);
  ~ConnectionLock();
  absl::Status Release();
  const std::string& table() const { return table_; }

 private:
  ConnectionLock(std::string table, pid_t netns_pid, std::string nsexec)
      : table_(std::move(table)), netns_pid_(netns_pid), nsexec_(std::move(nsexec)) {}
  std::string table_;
  pid_t netns_pid_;
  std::string nsexec_;
  bool held_ = true;
};

}  // namespace cryo::criu
