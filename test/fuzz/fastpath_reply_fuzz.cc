// The fast path's replies come from a process of the job, which may lie. For any bytes,
// ParseFastpathReply returns the reply or an error: no crash, no undefined behaviour; an accepted
// reply never names another process than the one asked.

#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "absl/strings/string_view.h"
#include "daemon/gpu/fastpath_client.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  cryo::gpu::FastpathProcess p;
  p.pid = 4242;
  p.ns_pid = 42;
  auto r = cryo::gpu::ParseFastpathReply(
      absl::string_view(reinterpret_cast<const char*>(data), size), p);
  if (!r.ok()) return 0;
  if (r->contains("pid") && (*r)["pid"] != 42) std::abort();
  return 0;
}
