#pragma once

// Test harness for the process-mode integration tests: real cryod binaries, real CRIU, the
// cryo-testload workload. Everything lives in a temp dir and is torn down by destructors.

#include <grpcpp/grpcpp.h>
#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cryo/v1/cryo.grpc.pb.h"
#include "nlohmann/json.hpp"

namespace cryo::e2e {

std::string MakeTempDir(const std::string& prefix);

// Waits until pred() or the deadline; true if pred() held.
bool WaitFor(const std::function<bool()>& pred, absl::Duration timeout = absl::Seconds(30));

class Cryod {
 public:
  // Starts cryod with its own socket and state dir on `store`. Extra flags are passed as is.
  static absl::StatusOr<std::unique_ptr<Cryod>> Start(const std::string& dir,
                                                      const std::string& store,
                                                      const std::string& node,
                                                      std::vector<std::string> extra = {},
                                                      std::vector<std::string> env = {});
  ~Cryod();
  void Kill9();
  int Stop();  // SIGTERM, returns exit status
  // Stop(), then "" when cryod exited 0 (or was already gone), else how it ended and the end of
  // its log: a crash or a sanitizer report at shutdown fails the test that caused it.
  std::string StopCleanly();
  pid_t pid() const { return pid_; }
  const std::string& socket() const { return socket_; }
  const std::string& state_dir() const { return state_; }
  const std::string& log() const { return log_; }
  v1::Cryo::Stub& stub() { return *stub_; }
  int metrics_port();

  // Runs a streaming operation to its end.
  // `progress`, when given, collects the progress events cryod streamed.
  grpc::Status Checkpoint(const v1::CheckpointRequest& req, v1::CheckpointInfo* out = nullptr,
                          std::vector<v1::Progress>* progress = nullptr);
  grpc::Status Restore(const v1::RestoreRequest& req, v1::RestoreResult* out = nullptr,
                       std::vector<v1::Progress>* progress = nullptr);
  grpc::Status CheckpointJob(const v1::CheckpointJobRequest& req,
                             v1::JobCheckpointInfo* out = nullptr);
  grpc::Status RestoreJob(const v1::RestoreJobRequest& req, v1::JobRestoreResult* out = nullptr);
  std::vector<v1::CheckpointInfo> List();

 private:
  pid_t pid_ = -1;
  std::string socket_, state_, log_;
  std::unique_ptr<v1::Cryo::Stub> stub_;
};

class Workload {
 public:
  // Starts cryo-testload in its own session (as a job would be), child of this test.
  // `wrapper`: a command that execs it (e.g. unshare with its options), in front of it.
  static absl::StatusOr<std::unique_ptr<Workload>> Start(const std::string& dir, int mem_mib,
                                                         int threads = 4,
                                                         std::vector<std::string> extra = {},
                                                         std::vector<std::string> wrapper = {});
  // cryo-testload with no capability (none permitted, effective or bounding) and no_new_privs,
  // through setpriv. (Another uid would need CAP_SYS_RESOURCE for CRIU to dump it, which root
  // lacks on our build machines.) `seccomp`: under a filter its whole tree shares, as a pod's
  // job under the runtime's profile; `threads` counting threads beside the main one.
  static absl::StatusOr<std::unique_ptr<Workload>> StartConfined(const std::string& dir,
                                                                 int mem_mib, bool seccomp = false,
                                                                 int threads = 2);
  // Another workload program that takes --status FILE and writes {"main": N, ...} there;
  // `env` adds to its environment (KEY=VALUE).
  static absl::StatusOr<std::unique_ptr<Workload>> StartProgram(const std::string& dir,
                                                                const std::string& binary,
                                                                std::vector<std::string> args,
                                                                std::vector<std::string> env = {});
  ~Workload();
  pid_t pid() const { return pid_; }
  // The last record the job wrote; null until one is readable.
  nlohmann::json Status() const;
  // Waits until the job's main counter reaches n.
  bool WaitMain(uint64_t n, absl::Duration timeout = absl::Seconds(30));
  // Asks the job to verify its memory; returns its verdict (1 ok, 0 bad, -1 no answer).
  int Verify();
  // Reaps it if it died (a zombie still holds its pid).
  void Reap();
  // Kills the job wherever it lives now (after a restore it is no longer our child).
  void Kill();
  char State() const;  // R/S/T/Z from /proc, '-' when gone
  const std::string& status_path() const { return status_; }

 private:
  bool IsThisJob() const;
  pid_t pid_ = -1;
  std::string status_;
  bool reaped_ = false;
};

std::string Slurp(const std::string& path);

// A TCP port on 127.0.0.1 that was free a moment ago (for a server the test starts next), taken
// below the kernel's ephemeral range so that no connect() or bind(0) is given it meanwhile; -1
// when none could be had.
int FreePort();

// The nodes' peer certificate in `dir`, as the chart's Secret holds it (ca.crt, tls.crt,
// tls.key; cryod's peer_tls_dir): a CA of its own and one certificate it signed for `name`,
// made with the openssl tool. False, with the tool's output in `why`, when it could not be made.
bool MakePeerTls(const std::string& dir, const std::string& name, std::string* why);

// Whether this kernel gives this process (no fast-path library in it) an io_uring: false, with
// why not, where io_uring_setup is refused (an older kernel, a sysctl, seccomp).
bool KernelGivesIoUring(std::string* why);

// Runs the cryo CLI; returns exit code and stdout.
struct CliResult {
  int code;
  std::string out;
};
CliResult RunCli(const std::string& socket, const std::vector<std::string>& args);

}  // namespace cryo::e2e
