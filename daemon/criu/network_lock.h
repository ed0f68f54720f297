#pragma once

// CRIU's network lock: a dump with --tcp-established and --leave-stopped keeps an nftables table
// ("inet CRIU-<run id>") that drops the job's packets until a restore. When cryod resumes the
// job instead, the lock must go.

#include <sys/types.h>

#include <string>

namespace cryo::criu {

// Deletes every CRIU lock table named in the dump log at `dump_log`. `container_init` > 0: the
// lock lives in that container's network namespace and is removed from there through
// `nsexec`. Harmless when there is no lock. Best effort (logged).
void RemoveNetworkLock(const std::string& dump_log, pid_t container_init,
                       const std::string& nsexec);

}  // namespace cryo::criu
