// Journal entries are what recovery reads at cryod's start, after a crash may have left anything
// in them. For any bytes ParseEntry returns an entry or an error, and an accepted entry comes
// back the same through EntryToJson (what Put writes).

#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "absl/strings/string_view.h"
#include "daemon/journal/journal.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using cryo::journal::EntryFromJson;
  using cryo::journal::EntryToJson;
  auto e = cryo::journal::ParseEntry(absl::string_view(reinterpret_cast<const char*>(data), size));
  if (!e.ok()) return 0;
  auto again = EntryFromJson(EntryToJson(*e));
  if (!again.ok() || again->op_id != e->op_id || again->steps != e->steps ||
      again->tasks.size() != e->tasks.size() || again->state != e->state ||
      again->staging_dir != e->staging_dir) {
    std::abort();  // an accepted entry that does not survive its own writer
  }
  return 0;
}
