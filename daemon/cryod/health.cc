#include "daemon/cryod/health.h"

#include "absl/strings/str_cat.h"
#include "lib/base/human.h"
#include "lib/base/status.h"

namespace cryo::cryod {

absl::Status CheckHealth(store::CheckpointStore& store, const criu::Criu& criu,
                         uint64_t min_free_bytes) {
  CRYO_RETURN_IF_ERROR(store.CheckWritable());
  CRYO_ASSIGN_OR_RETURN(uint64_t free, store.FreeBytes());
  if (free < min_free_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "checkpoint store ", store.location(), " has ", human::Bytes(free), " free, less than the ",
        human::Bytes(min_free_bytes), " health_min_free_mb asks for"));
  }
  return criu.CheckUsable();
}

metrics::HttpResponse HealthResponse(const absl::Status& health) {
  if (health.ok()) return {200, "text/plain", "ok\n"};
  return {503, "text/plain", health.ToString() + "\n"};
}

}  // namespace cryo::cryod
