#include "daemon/criu/dumpable.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lib/base/fs.h"
#include "lib/contract/annotations.h"
#include "lib/contract/gpu_fastpath.h"

namespace cryo::criu {

namespace {

constexpr absl::string_view kIoUring = "anon_inode:[io_uring]";

bool HoldsIoUring(const proc::ProcReader& proc, pid_t pid) {
  for (const std::string& t : proc.FdTargets(pid)) {
    if (t == kIoUring) return true;
  }
  // The rings stay mapped after their descriptor is closed.
  auto maps = fs::ReadFile(proc.PidPath(pid, "maps"));
  return maps.ok() && absl::StrContains(*maps, kIoUring);
}

constexpr absl::string_view kRdmaDevices = "/dev/infiniband/";

// The RDMA device (verbs, the connection manager) a process holds open or mapped; empty: none.
std::string RdmaDeviceOf(const proc::ProcReader& proc, pid_t pid) {
  for (const std::string& t : proc.FdTargets(pid)) {
    if (absl::StartsWith(t, kRdmaDevices)) return t;
  }
  // A verbs context maps its device's doorbell pages.
  auto maps = fs::ReadFile(proc.PidPath(pid, "maps"));
  if (!maps.ok()) return "";
  const size_t at = maps->find(std::string(kRdmaDevices));
  if (at == std::string::npos) return "";
  const size_t end = maps->find('\n', at);
  return maps->substr(at, end == std::string::npos ? std::string::npos : end - at);
}

}  // namespace

absl::Status CheckDumpable(const proc::ProcReader& proc, const std::vector<pid_t>& pids) {
  for (pid_t pid : pids) {
    if (const std::string dev = RdmaDeviceOf(proc, pid); !dev.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "pid ", pid, " (", absl::StrJoin(proc.Cmdline(pid), " ").substr(0, 120),
          ") holds the RDMA device ", dev,
          " (InfiniBand or RoCE verbs): its queues and registered memory live in the network "
          "card, which CRIU cannot checkpoint. Run the job's NCCL over sockets "
          "(NCCL_IB_DISABLE=1, or NCCL_NET=Socket; docs/gpu.md, Multi-GPU jobs). Nothing was "
          "stopped"));
    }
    if (!HoldsIoUring(proc, pid)) continue;
    return absl::FailedPreconditionError(absl::StrCat(
        "pid ", pid, " (", absl::StrJoin(proc.Cmdline(pid), " ").substr(0, 120),
        ") holds an io_uring instance, which CRIU cannot checkpoint. libuv sets one up "
        "(PyTorch's TCPStore, every torchrun agent): under the GPU fast path (pod annotation "
        "<prefix>/",
        contract::pod::kGpuFastPath,
        ", or its library in LD_PRELOAD) the library keeps it from doing so unless ",
        contract::gpu_fastpath::kEnvIoUring,
        "=1 is set; without the fast path, USE_LIBUV=0 removes the one of "
        "init_process_group's store but not torchrun's (docs/gpu.md, Multi-GPU jobs). Nothing "
        "was stopped"));
  }
  return absl::OkStatus();
}

}  // namespace cryo::criu
