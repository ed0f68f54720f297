#include "daemon/journal/journal.h"

#include <unistd.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "lib/base/fs.h"
#include "lib/base/ids.h"
#include "lib/base/log.h"
#include "lib/base/status.h"

namespace cryo::journal {

nlohmann::json EntryToJson(const Entry& e) {
  nlohmann::json tasks = nlohmann::json::array();
  for (const auto& t : e.tasks) tasks.push_back({{"pid", t.pid}, {"start_time", t.start_time}});
  return {{"op_id", e.op_id},
          {"kind", e.kind},
          {"checkpoint_id", e.checkpoint_id},
          {"state", e.state},
          {"tasks", tasks},
          {"criu_pid", e.criu_pid},
          {"criu_start_time", e.criu_start_time},
          {"staging_dir", e.staging_dir},
          {"leave_running", e.leave_running},
          {"tcp_established", e.tcp_established},
          {"gpu", e.gpu},
          {"container_init_pid", e.container_init_pid},
          {"started_at", e.started_at}};
}

absl::StatusOr<Entry> EntryFromJson(const nlohmann::json& j) {
  Entry e;
  try {
    e.op_id = j.at("op_id").get<std::string>();
    e.kind = j.at("kind").get<std::string>();
    e.checkpoint_id = j.value("checkpoint_id", "");
    e.state = j.at("state").get<std::string>();
    for (const auto& t : j.value("tasks", nlohmann::json::array())) {
      e.tasks.push_back({t.at("pid").get<int>(), t.at("start_time").get<uint64_t>()});
    }
    e.criu_pid = j.value("criu_pid", 0);
    e.criu_start_time = j.value("criu_start_time", uint64_t{0});
    e.staging_dir = j.value("staging_dir", "");
    e.leave_running = j.value("leave_running", false);
    e.tcp_established = j.value("tcp_established", false);
    e.gpu = j.value("gpu", nlohmann::json());
    e.container_init_pid = j.value("container_init_pid", 0);
    e.started_at = j.value("started_at", "");
  } catch (const nlohmann::json::exception& ex) {
    return absl::InvalidArgumentError(absl::StrCat("journal entry is malformed: ", ex.what()));
  }
  if (ValidateCheckpointId(e.op_id).ok() == false) {
    return absl::InvalidArgumentError(absl::StrCat("journal entry has a bad op id '", e.op_id, "'"));
  }
  return e;
}

absl::StatusOr<std::unique_ptr<Journal>> Journal::Open(const std::string& dir) {
  CRYO_RETURN_IF_ERROR(Annotate(fs::MakeDirs(dir, 0700), "journal"));
  return std::unique_ptr<Journal>(new Journal(dir));
}

std::string Journal::PathOf(const std::string& op_id) const {
  return fs::Join(dir_, absl::StrCat(op_id, ".json"));
}

absl::Status Journal::Put(const Entry& e) {
  CRYO_RETURN_IF_ERROR(ValidateCheckpointId(e.op_id));
  return fs::WriteFileAtomic(PathOf(e.op_id), EntryToJson(e).dump(2));
}

absl::Status Journal::Remove(const std::string& op_id) {
  if (::unlink(PathOf(op_id).c_str()) != 0 && errno != ENOENT) {
    return ErrnoStatus(errno, PathOf(op_id));
  }
  return fs::FsyncPath(dir_);
}

absl::StatusOr<std::vector<Entry>> Journal::LoadAll() {
  CRYO_ASSIGN_OR_RETURN(auto files, fs::ListDir(dir_));
  std::vector<Entry> out;
  for (const auto& f : files) {
    std::string p = fs::Join(dir_, f.name);
    if (f.is_dir) continue;
    if (!absl::EndsWith(f.name, ".json")) {
      // Temporaries of an interrupted atomic write.
      ::unlink(p.c_str());
      continue;
    }
    auto text = fs::ReadFile(p);
    if (!text.ok()) {
      CRYO_LOG(Warning) << "journal: " << text.status();
      continue;
    }
    auto j = nlohmann::json::parse(*text, nullptr, false);
    auto e = j.is_discarded() ? absl::StatusOr<Entry>(absl::InvalidArgumentError("not JSON"))
                              : EntryFromJson(j);
    if (!e.ok()) {
      CRYO_LOG(Warning) << "journal: dropping " << p << ": " << e.status();
      ::unlink(p.c_str());
      continue;
    }
    out.push_back(std::move(*e));
  }
  return out;
}

}  // namespace cryo::journal
