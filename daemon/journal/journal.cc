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

nlohmann::json EntryToJson(const Entry& e) {
  nlohmann::json tasks = nlohmann::json::array();
  for (const auto& t : e.tasks) {
    tasks.push_back({{"pid", t.pid}, {"start_time", t.start_time}, {"was_stopped", t.was_stopped}});
  }
  return {{"op_id", e.op_id},
          {"kind", Name(e.kind)},
          {"checkpoint_id", e.checkpoint_id},
          {"state", Name(e.state)},
          {"steps", e.steps},
          {"tasks", tasks},
          {"criu_pid", e.criu_pid},
          {"criu_start_time", e.criu_start_time},
          {"staging_dir", e.staging_dir},
          {"leave_running", e.leave_running},
          {"tcp_established", e.tcp_established},
          {"gpu", gpu::ToJson(e.gpu)},
          {"fastpath", gpu::ToJson(e.fastpath)},
          {"container_init_pid", e.container_init_pid},
          {"started_at", e.started_at},
          {"boot_id", e.boot_id}};
}

absl::StatusOr<Entry> EntryFromJson(const nlohmann::json& j) {
  if (!j.is_object()) return absl::InvalidArgumentError("journal entry is not an object");
  Entry e;
  json::Fields f(j, "");
  std::string kind, state;
  CRYO_RETURN_IF_ERROR(f.Str("op_id", &e.op_id, true));
  CRYO_RETURN_IF_ERROR(f.Str("kind", &kind, true));
  CRYO_RETURN_IF_ERROR(f.Str("checkpoint_id", &e.checkpoint_id));
  CRYO_RETURN_IF_ERROR(f.Str("state", &state, true));
  auto k = ParseOpKind(kind);
  auto st = ParseOpState(state);
  if (!k || !st) {
    return absl::InvalidArgumentError(
        absl::StrCat("journal entry of unknown kind '", kind, "' or state '", state, "'"));
  }
  e.kind = *k;
  e.state = *st;
  CRYO_RETURN_IF_ERROR(f.Strs("steps", &e.steps));
  CRYO_ASSIGN_OR_RETURN(const nlohmann::json* tasks, f.Array("tasks"));
  if (tasks != nullptr) {
    for (size_t i = 0; i < tasks->size(); ++i) {
      json::Fields tf((*tasks)[i], absl::StrCat("tasks[", i, "]"));
      Task t;
      CRYO_RETURN_IF_ERROR(tf.Int("pid", &t.pid, true));
      CRYO_RETURN_IF_ERROR(tf.Uint64("start_time", &t.start_time, true));
      CRYO_RETURN_IF_ERROR(tf.Bool("was_stopped", &t.was_stopped));
      if (t.pid <= 0) return absl::InvalidArgumentError("journal entry has a task without a pid");
      e.tasks.push_back(t);
    }
  }
  CRYO_RETURN_IF_ERROR(f.Int("criu_pid", &e.criu_pid));
  CRYO_RETURN_IF_ERROR(f.Uint64("criu_start_time", &e.criu_start_time));
  CRYO_RETURN_IF_ERROR(f.Str("staging_dir", &e.staging_dir));
  CRYO_RETURN_IF_ERROR(f.Bool("leave_running", &e.leave_running));
  CRYO_RETURN_IF_ERROR(f.Bool("tcp_established", &e.tcp_established));
  nlohmann::json gpu;
  CRYO_RETURN_IF_ERROR(f.Any("gpu", &gpu));
  CRYO_ASSIGN_OR_RETURN(e.gpu, gpu::GpuProcessesFromJson(gpu));
  nlohmann::json fastpath;
  CRYO_RETURN_IF_ERROR(f.Any("fastpath", &fastpath));
  CRYO_ASSIGN_OR_RETURN(e.fastpath, gpu::FastpathProcessesFromJson(fastpath));
  CRYO_RETURN_IF_ERROR(f.Int("container_init_pid", &e.container_init_pid));
  CRYO_RETURN_IF_ERROR(f.Str("started_at", &e.started_at));
  CRYO_RETURN_IF_ERROR(f.Str("boot_id", &e.boot_id));
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
