#include "daemon/engine/test_hooks.h"

#include <unistd.h>

#include "lib/base/fs.h"
#include "lib/base/log.h"
#include "lib/base/poll.h"

namespace cryo::engine {

void TestHooks::At(const std::string& point) const {
  if (dir_.empty()) return;
  if (!fs::Exists(fs::Join(dir_, point + ".enable"))) return;
  const std::string release = fs::Join(dir_, point + ".release");
  // A test that cannot see the mark fails on its own wait.
  (void)fs::WriteFileAtomic(fs::Join(dir_, point + ".reached"), std::to_string(::getpid()));
  CRYO_LOG(Info) << "test hook " << point << ": waiting for " << release;
  PollUntil([&] { return fs::Exists(release); }, absl::Minutes(2));
}

}  // namespace cryo::engine
