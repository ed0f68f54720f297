#pragma once

// Kernel objects CRIU 4.1 cannot checkpoint, found in a job before anything is stopped. Its dump
// would otherwise fail only after the GPU was drained and the job frozen (seen with torchrun on
// two H200s: its agent's TCPStore runs a libuv loop holding an io_uring, and CRIU stops with
// "Unknown shit 600 (anon_inode:[io_uring])"). A refusal names the process and the object.

#include <sys/types.h>

#include <vector>

#include "absl/status/status.h"
#include "lib/base/proc.h"

namespace cryo::criu {

// FAILED_PRECONDITION when a process of `pids` holds an io_uring instance (an open descriptor or
// a mapping of its rings) or an RDMA device (/dev/infiniband/*: verbs, the connection manager;
// open or mapped). Processes that ended meanwhile are passed over.
absl::Status CheckDumpable(const proc::ProcReader& proc, const std::vector<pid_t>& pids);

}  // namespace cryo::criu
