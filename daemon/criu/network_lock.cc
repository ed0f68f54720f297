#include "daemon/criu/network_lock.h"

#include <regex>
#include <set>
#include <vector>

#include "lib/base/fs.h"
#include "lib/base/log.h"
#include "lib/base/subprocess.h"

namespace cryo::criu {

void RemoveNetworkLock(const std::string& dump_log, pid_t container_init,
                       const std::string& nsexec) {
  auto log = fs::ReadFile(dump_log);
  if (!log.ok()) return;
  static const std::regex kTable("CRIU-[A-Za-z0-9_-]+");
  std::set<std::string> tables;
  for (std::sregex_iterator it(log->begin(), log->end(), kTable), end; it != end; ++it) {
    tables.insert(it->str());
  }
  const std::string nft = FindExecutable("nft");
  if (nft.empty()) return;
  for (const auto& t : tables) {
    std::vector<std::string> argv = {nft, "delete", "table", "inet", t};
    if (container_init > 0) {
      argv.insert(argv.begin(), {nsexec, "--target", std::to_string(container_init), "--"});
    }
    auto r = RunCapture(argv);
    if (r.ok() && r->exit.exited && r->exit.code == 0) {
      CRYO_LOG(Info) << "removed CRIU network lock table " << t;
    }
  }
}

}  // namespace cryo::criu
