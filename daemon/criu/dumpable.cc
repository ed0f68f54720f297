#include "daemon/criu/dumpable.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lib/base/fs.h"

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

}  // namespace

absl::Status CheckDumpable(const proc::ProcReader& proc, const std::vector<pid_t>& pids) {
  for (pid_t pid : pids) {
    if (!HoldsIoUring(proc, pid)) continue;
    return absl::FailedPreconditionError(absl::StrCat(
        "pid ", pid, " (", absl::StrJoin(proc.Cmdline(pid), " ").substr(0, 120),
        ") holds an io_uring instance, which CRIU cannot checkpoint. PyTorch's TCPStore holds "
        "one through libuv: USE_LIBUV=0 in the job's environment removes it from "
        "init_process_group's store; torchrun's agent kept one even with --rdzv-conf "
        "use_libuv=0 and TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 (PyTorch 2.11), so start such a "
        "job's ranks with torch.multiprocessing (docs/gpu.md, Multi-GPU jobs). Nothing was "
        "stopped"));
  }
  return absl::OkStatus();
}

}  // namespace cryo::criu
