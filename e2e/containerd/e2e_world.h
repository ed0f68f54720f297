// The world of the containerd e2e tests: a private temp dir with two containerd 1.6 "nodes"
// (node-a, node-b, via node.sh), each with a cryod in container mode on its containerd and a
// cryo-cri-shim in front of it that talks to that cryod. The cryods share one store
// directory: the "shared storage" both nodes mount.
#pragma once

#include <sys/types.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "e2e/process/harness.h"

namespace cryo::e2e {

// A cryo-cri-shim child process. It gets SIGKILL if the test process dies.
class ShimProcess {
 public:
  static absl::StatusOr<std::unique_ptr<ShimProcess>> Start(const std::string& binary,
                                                            const std::string& listen,
                                                            const std::string& runtime,
                                                            const std::string& log_file,
                                                            const std::string& cryod_socket = "",
                                                            std::vector<std::string> extra = {});
  ~ShimProcess();

  // Still running (not exited, not killed)?
  bool Alive();
  // SIGTERM, then waits; returns the exit status (waitpid encoding).
  absl::StatusOr<int> Stop(absl::Duration timeout = absl::Seconds(10));
  pid_t pid() const { return pid_; }
  const std::string& socket() const { return listen_; }
  const std::string& log_file() const { return log_file_; }

 private:
  ShimProcess(pid_t pid, std::string listen, std::string log_file)
      : pid_(pid), listen_(std::move(listen)), log_file_(std::move(log_file)) {}
  pid_t pid_;
  bool reaped_ = false;
  int status_ = 0;
  std::string listen_;
  std::string log_file_;
};

class E2eWorld {
 public:
  // Starts nodes and shims; on any failure everything started is cleaned up again.
  static absl::StatusOr<std::unique_ptr<E2eWorld>> Create(const std::vector<std::string>& nodes);
  // Stops the shims and runs node.sh clean (containerd killed, containers removed, unmounted,
  // temp dir removed).
  ~E2eWorld();

  const std::string& dir() const { return dir_; }
  std::string NodeSocket(const std::string& node) const;
  std::string ShimSocket(const std::string& node) const;
  ShimProcess& shim(const std::string& node) { return *shims_.at(node); }
  Cryod& cryod(const std::string& node) { return *cryods_.at(node); }
  // The last lines of every node's cryod and shim logs: the world goes with its logs, so a
  // suite with a failed test prints them first.
  std::string LogTails() const;
  // Where a node's shim writes its metrics (--metrics-file), which its cryod serves at
  // /metrics/shim (shim_metrics_file), as the chart sets them up.
  std::string ShimMetricsFile(const std::string& node) const {
    return dir_ + "/shim-metrics-" + node + ".prom";
  }
  // The token every node's cryod takes on its Peer service (peer_token_file).
  const std::string& peer_token_file() const { return peer_token_file_; }
  int peer_port(const std::string& node) const { return peer_ports_.at(node); }
  // The checkpoint store both nodes' cryods use.
  std::string store() const { return dir_ + "/store"; }
  // CRYOD_TEST_HOOK_DIR of a node's cryod: POINT.enable holds cryod at POINT (it writes
  // POINT.reached) until POINT.release appears.
  std::string HookDir(const std::string& node) const { return dir_ + "/hooks-" + node; }
  // Pod cgroup parent and log dir that node.sh cleans up.
  std::string CgroupParent(const std::string& node) const;
  std::string PodLogDir(const std::string& node, const std::string& pod) const;

  absl::Status StopNode(const std::string& node);
  // Stops a node's cryod (SIGTERM), runs `while_down`, and starts it again on the same socket
  // and state.
  absl::Status RestartCryod(
      const std::string& node, const std::function<void()>& while_down = [] {});
  absl::Status StartNode(const std::string& node);

 private:
  explicit E2eWorld(std::string dir) : dir_(std::move(dir)) {}
  absl::Status RunNodeScript(const std::vector<std::string>& args);

  std::string dir_;
  absl::StatusOr<std::unique_ptr<Cryod>> StartCryod(const std::string& node);
  std::map<std::string, std::unique_ptr<Cryod>> cryods_;
  std::map<std::string, std::unique_ptr<ShimProcess>> shims_;
  // Each node's cryod serves the Peer service here (job checkpoints across nodes); all share
  // the token in peer_token_file_.
  std::map<std::string, int> peer_ports_;
  std::string peer_token_file_;
};

// Where temp dirs go; node.sh sweep cleans the same place (CTest cleanup fixture).
std::string E2eTempRoot();

}  // namespace cryo::e2e
