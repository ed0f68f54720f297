// Manifests come from a store that other nodes, and whoever can write it, fill. For any bytes
// ParseManifest returns a manifest or an error: no crash, no undefined behaviour, no unbounded
// time or memory. What it accepts must come back the same through ManifestToJson.

#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "absl/strings/string_view.h"
#include "daemon/store/manifest.h"
#include "daemon/store/signature.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using cryo::store::ManifestToJson;
  using cryo::store::ParseManifest;
  auto m = ParseManifest(absl::string_view(reinterpret_cast<const char*>(data), size));
  if (!m.ok()) return 0;
  auto again = ParseManifest(ManifestToJson(*m));
  if (!again.ok() || again->id != m->id || again->labels != m->labels || again->pids != m->pids ||
      again->files.size() != m->files.size() || again->kind != m->kind ||
      again->container.has_value() != m->container.has_value()) {
    std::abort();  // an accepted manifest that does not survive its own writer
  }
  // What cryod signs verifies after it was written and read back: a signed manifest never fails
  // its own check.
  const std::string key(32, 'k');
  auto third = ParseManifest(ManifestToJson(*again));
  if (!third.ok() ||
      cryo::store::SignManifest(*again, key) != cryo::store::SignManifest(*third, key)) {
    std::abort();
  }
  return 0;
}
