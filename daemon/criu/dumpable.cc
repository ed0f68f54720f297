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

constexpr char kRdmaDevices[] = "/dev/infiniband/";

// What a process holds, open or mapped, of what CRIU cannot dump: an io_uring instance (the
// rings stay mapped after their descriptor is closed) and an RDMA device (verbs, the connection
// manager; a verbs context maps its device's doorbell pages). Its descriptors and maps are read
// once.
struct Undumpable {
  bool io_uring = false;
  std::string rdma;  // the device; empty: none
};

Undumpable UndumpableOf(const proc::ProcReader& proc, pid_t pid) {
  Undumpable u;
  for (const std::string& t : proc.FdTargets(pid)) {
    if (t == kIoUring) u.io_uring = true;
    if (u.rdma.empty() && absl::StartsWith(t, kRdmaDevices)) u.rdma = t;
  }
  if (u.io_uring && !u.rdma.empty()) return u;
  auto maps = fs::ReadFile(proc.PidPath(pid, "maps"));
  if (!maps.ok()) return u;
  u.io_uring = u.io_uring || absl::StrContains(*maps, kIoUring);
  if (const size_t at = maps->find(kRdmaDevices); u.rdma.empty() && at != std::string::npos) {
    const size_t end = maps->find('\n', at);
    u.rdma = maps->substr(at, end == std::string::npos ? std::string::npos : end - at);
  }
  return u;
}

}  // namespace

absl::Status CheckDumpable(const proc::ProcReader& proc, const std::vector<pid_t>& pids) {
  for (pid_t pid : pids) {
    const Undumpable u = UndumpableOf(proc, pid);
    if (!u.rdma.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "pid ", pid, " (", absl::StrJoin(proc.Cmdline(pid), " ").substr(0, 120),
          ") holds the RDMA device ", u.rdma,
          " (InfiniBand or RoCE verbs): its queues and registered memory live in the network "
          "card, which CRIU cannot checkpoint. Run the job's NCCL over sockets "
          "(NCCL_IB_DISABLE=1, or NCCL_NET=Socket; docs/gpu.md, Multi-GPU jobs). Nothing was "
          "stopped"));
    }
    if (!u.io_uring) continue;
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
