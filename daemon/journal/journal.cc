#include "daemon/journal/journal.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "lib/base/fs.h"
#include "lib/base/ids.h"
#include "lib/base/json.h"
#include "lib/base/json_table.h"
#include "lib/base/log.h"
#include "lib/base/status.h"

namespace cryo::journal {

namespace {

constexpr const char* kKinds[] = {"checkpoint", "restore"};
constexpr const char* kStates[] = {"started", "dumping", "dumped", "published", "restoring"};
// An entry is a few KiB; GPU facts make it larger, never by much.
constexpr size_t kMaxEntryBytes = 1u << 20;
constexpr int kMaxEntryDepth = 16;
// Held (flock) by the cryod that owns the directory; not an entry.
constexpr const char* kLockName = ".lock";

}  // namespace

const char* Name(OpKind k) { return kKinds[static_cast<int>(k)]; }
const char* Name(OpState s) { return kStates[static_cast<int>(s)]; }

std::optional<OpKind> ParseOpKind(const std::string& s) {
  for (int i = 0; i < 2; ++i) {
    if (s == kKinds[i]) return static_cast<OpKind>(i);
  }
  return std::nullopt;
}

std::optional<OpState> ParseOpState(const std::string& s) {
  for (int i = 0; i < 5; ++i) {
    if (s == kStates[i]) return static_cast<OpState>(i);
  }
  return std::nullopt;
}

namespace {

// The journal entry's one description: what EntryToJson writes and EntryFromJson reads.
const json::Table<Task>& TaskTable() {
  static const json::Table<Task> t = {
      json::Member("pid", &Task::pid, json::kRequired),
      json::Member("start_time", &Task::start_time, json::kRequired),
      json::Member("was_stopped", &Task::was_stopped),
  };
  return t;
}

const json::Table<Entry>& EntryTable() {
  static const json::Table<Entry> t = {
      json::Member("op_id", &Entry::op_id, json::kRequired),
      json::Enum("kind", &Entry::kind, &Name, &ParseOpKind, "journal entry of unknown kind",
                 json::kRequired),
      json::Member("checkpoint_id", &Entry::checkpoint_id),
      json::Enum("state", &Entry::state, &Name, &ParseOpState, "journal entry of unknown state",
                 json::kRequired),
      json::Member("steps", &Entry::steps),
      json::Records("tasks", &Entry::tasks, TaskTable(), false,
                    [](const Task& t, const std::string&) {
                      return t.pid > 0 ? absl::OkStatus()
                                       : absl::InvalidArgumentError(
                                             "journal entry has a task without a pid");
                    }),
      json::Member("criu_pid", &Entry::criu_pid),
      json::Member("criu_start_time", &Entry::criu_start_time),
      json::Member("staging_dir", &Entry::staging_dir),
      json::Member("leave_running", &Entry::leave_running),
      json::Member("tcp_established", &Entry::tcp_established),
      gpu::ProcessesField("gpu", &Entry::gpu, /*null_when_empty=*/false),
      gpu::ProcessesField("fastpath", &Entry::fastpath, /*null_when_empty=*/false),
      json::Member("container_init_pid", &Entry::container_init_pid),
      json::Member("started_at", &Entry::started_at),
      json::Member("boot_id", &Entry::boot_id),
  };
  return t;
}

}  // namespace

nlohmann::json EntryToJson(const Entry& e) { return json::Write(e, EntryTable()); }

absl::StatusOr<Entry> EntryFromJson(const nlohmann::json& j) {
  if (!j.is_object()) return absl::InvalidArgumentError("journal entry is not an object");
  Entry e;
  CRYO_RETURN_IF_ERROR(json::Read(json::Fields(j, ""), EntryTable(), e));
  if (!ValidateCheckpointId(e.op_id).ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("journal entry has a bad op id '", e.op_id, "'"));
  }
  return e;
}

absl::StatusOr<Entry> ParseEntry(absl::string_view text) {
  CRYO_ASSIGN_OR_RETURN(nlohmann::json j, json::Parse(text, {kMaxEntryBytes, kMaxEntryDepth}));
  return EntryFromJson(j);
}

std::string CurrentBootId() {
  auto id = fs::ReadFile("/proc/sys/kernel/random/boot_id");
  if (!id.ok()) return "";
  return std::string(absl::StripAsciiWhitespace(*id));
}

absl::StatusOr<std::unique_ptr<Journal>> Journal::Open(const std::string& dir,
                                                       std::string boot_id) {
  CRYO_RETURN_IF_ERROR(Annotate(fs::MakeDirs(dir, 0700), "journal"));
  if (boot_id.empty()) boot_id = CurrentBootId();
  return std::unique_ptr<Journal>(new Journal(dir, std::move(boot_id)));
}

Journal::~Journal() {
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

absl::Status Journal::HoldExclusively() {
  if (lock_fd_ >= 0) return absl::OkStatus();
  const std::string path = fs::Join(dir_, kLockName);
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("journal lock ", path));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    int e = errno;
    ::close(fd);
    if (e == EWOULDBLOCK) {
      return absl::FailedPreconditionError(absl::StrCat(
          "journal ", dir_, " is in use by another cryod: give each cryod its own journal_dir"));
    }
    return ErrnoStatus(e, absl::StrCat("journal lock ", path));
  }
  lock_fd_ = fd;
  return absl::OkStatus();
}

bool Journal::OfEarlierBoot(const Entry& e) const {
  return !e.boot_id.empty() && !boot_id_.empty() && e.boot_id != boot_id_;
}

std::string Journal::PathOf(const std::string& op_id) const {
  return fs::Join(dir_, absl::StrCat(op_id, ".json"));
}

absl::Status Journal::Put(const Entry& e) {
  CRYO_RETURN_IF_ERROR(ValidateCheckpointId(e.op_id));
  nlohmann::json j = EntryToJson(e);
  j["boot_id"] = boot_id_;
  const absl::Time t0 = absl::Now();
  absl::Status st =
      fs::WriteFileAtomic(PathOf(e.op_id), j.dump(2), 0600, fs::Durability::kProcessCrash);
  // Every step of a checkpoint waits for this write: a slow one is the disk's doing.
  if (absl::Duration d = absl::Now() - t0; d > absl::Milliseconds(50)) {
    CRYO_LOG(Warning) << "journal: writing " << e.op_id << " (" << Name(e.state) << ", "
                      << e.steps.size() << " steps) took " << absl::ToInt64Milliseconds(d)
                      << " ms: " << dir_ << " is on a busy disk";
  }
  return st;
}

absl::Status Journal::Remove(const std::string& op_id) {
  if (::unlink(PathOf(op_id).c_str()) != 0 && errno != ENOENT) {
    return ErrnoStatus(errno, PathOf(op_id));
  }
  return absl::OkStatus();
}

absl::StatusOr<int> Journal::Adopt(const std::string& old_dir) {
  if (!fs::IsDir(old_dir) || old_dir == dir_) return 0;
  CRYO_ASSIGN_OR_RETURN(auto files, fs::ListDir(old_dir));
  int moved = 0;
  for (const auto& f : files) {
    if (f.is_dir || !absl::EndsWith(f.name, ".json")) continue;
    auto text = fs::ReadRegularBeneath(old_dir, f.name, kMaxEntryBytes);
    if (!text.ok()) continue;  // LoadAll of that directory would drop it too
    auto e = ParseEntry(*text);
    if (!e.ok()) continue;
    // As written (its boot id included), then gone from the old place.
    CRYO_RETURN_IF_ERROR(
        fs::WriteFileAtomic(PathOf(e->op_id), *text, 0600, fs::Durability::kProcessCrash));
    ::unlink(fs::Join(old_dir, f.name).c_str());
    ++moved;
  }
  return moved;
}

absl::StatusOr<std::vector<Entry>> Journal::LoadAll() {
  CRYO_ASSIGN_OR_RETURN(auto files, fs::ListDir(dir_));
  std::vector<Entry> out;
  for (const auto& f : files) {
    std::string p = fs::Join(dir_, f.name);
    if (f.is_dir || f.name == kLockName) continue;
    if (!absl::EndsWith(f.name, ".json")) {
      // Temporaries of an interrupted atomic write.
      ::unlink(p.c_str());
      continue;
    }
    // Sized before it is read, never through a link, never a FIFO: an entry is a small file
    // cryod wrote itself, anything else is dropped.
    auto text = fs::ReadRegularBeneath(dir_, f.name, kMaxEntryBytes);
    if (absl::IsFailedPrecondition(text.status())) {
      CRYO_LOG(Warning) << "journal: dropping " << p << ": " << text.status();
      ::unlink(p.c_str());
      continue;
    }
    if (!text.ok()) {
      CRYO_LOG(Warning) << "journal: " << text.status();
      continue;
    }
    auto e = ParseEntry(*text);
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
