#pragma once

// One process of a job that holds GPU state, as the engine, the journal and the manifest see
// it; its one JSON form ({"pid", "plugin", "facts", "ns_pid"}).

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/base/json_table.h"
#include "nlohmann/json.hpp"

namespace cryo::gpu {

struct GpuProcess {
  pid_t pid = 0;       // host pid
  std::string plugin;  // plugin name, e.g. "cuda"
  // Per-process facts from the plugin (device UUIDs, memory used, ...), recorded in the manifest.
  nlohmann::json facts = nlohmann::json::object();
  // Container mode: the pid inside the container's pid namespace, by which a restore into
  // another container finds the process again. 0 in process mode.
  pid_t ns_pid = 0;
};

nlohmann::json ToJson(const std::vector<GpuProcess>& procs);
// INVALID_ARGUMENT naming the entry when one is malformed; null is an empty list.
absl::StatusOr<std::vector<GpuProcess>> GpuProcessesFromJson(const nlohmann::json& j);

// One process of a job whose device memory the GPU fast-path library moves (docs/gpu.md), as the
// journal and the manifest record it; one JSON form ({"pid", "ns_pid", "files", "bytes",
// "allocations", "driver_bytes", "device", "imports": [{"id", "from", "export"}]}).
// Memory a fast-path process imported from another process of the same job (docs/proposals/
// nccl-shared-memory.md): its import id, the exporter (by the pid it sees itself as) and the
// exporter's export id. A refill imports it again from the exporter's new descriptor.
struct FastpathImport {
  uint64_t id = 0;
  pid_t from = 0;
  uint64_t export_id = 0;
};

struct FastpathProcess {
  pid_t pid = 0;     // host pid
  pid_t ns_pid = 0;  // the pid it sees itself as: names its channel and its files
  int files = 0;     // files its data went into (0: it stayed in the process's memory)
  // Its data went into a memfd of cryod's (a leave-running drain, gpu_fastpath.h "Memory"), to
  // be written into `files` files while the job runs on. Only cryod's memory holds it until then.
  bool memory = false;
  uint64_t bytes = 0;         // moved by the library
  uint64_t allocations = 0;   // physical allocations moved by the library
  uint64_t driver_bytes = 0;  // left to the driver's checkpoint (context, unowned memory)
  std::vector<FastpathImport> imports{};  // what it imported from other processes of the job
  // The version of its library, as its status said (0: not asked). Not recorded: a restored
  // process is asked again.
  int version = 0;
  // With `memory`: cryod is still reading the data into that memfd, and a progress page comes
  // with it (gpu_fastpath.h, "Following"). Not recorded.
  bool follow = false;
  // Its status counted calls of cuMemHostRegister: host memory the GPU writes by DMA, which no
  // write-protect sees (criu/pre_copy.h). Not recorded.
  bool host_registered = false;
  // The PCI bus id of the one GPU that holds the memory it moves, as its status said ("": none
  // or several, or an older library). Recorded: a restore onto the same GPUs may read the data
  // into memory on that GPU ahead of the library (gpu_restore_into_gpu).
  std::string device{};
  // Its drain is given a park of this many bytes on that GPU (gpu_fastpath.h, "Parking"), and
  // whether it parked its data there. Not recorded: a cryod that stops takes the park with it.
  uint64_t park = 0;
  bool parked = false;
  // A restore's park of `park` bytes on `device`, filled from the store and checked: its one
  // file is the park (gpu_restore_into_gpu). Not recorded.
  bool filled = false;
};

nlohmann::json ToJson(const std::vector<FastpathProcess>& procs);
absl::StatusOr<std::vector<FastpathProcess>> FastpathProcessesFromJson(const nlohmann::json& j);

// A record's list of these (P: GpuProcess or FastpathProcess) as a field of its table
// (lib/base/json_table.h): written in the form above, or null when empty and `null_when_empty`
// (the manifest), read back by the matching FromJson.
template <typename T, typename P>
json::Field<T> ProcessesField(const char* key, std::vector<P> T::*m, bool null_when_empty) {
  return json::Custom<T>(
      key,
      [key, m, null_when_empty](const T& t, nlohmann::json& j) {
        j[key] = null_when_empty && (t.*m).empty() ? nlohmann::json() : ToJson(t.*m);
      },
      [key, m](const json::Fields& in, T& t) -> absl::Status {
        nlohmann::json v;
        CRYO_RETURN_IF_ERROR(in.Any(key, &v));
        if constexpr (std::is_same_v<P, GpuProcess>) {
          CRYO_ASSIGN_OR_RETURN(t.*m, GpuProcessesFromJson(v));
        } else {
          CRYO_ASSIGN_OR_RETURN(t.*m, FastpathProcessesFromJson(v));
        }
        return absl::OkStatus();
      });
}

}  // namespace cryo::gpu
