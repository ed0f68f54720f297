#include "plugins/common/procfs.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace cryo::gpu {

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    int err = errno;
    if (err == ENOENT) return absl::NotFoundError(absl::StrCat(path, ": no such file"));
    return absl::UnavailableError(absl::StrCat(path, ": ", std::strerror(err)));
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool PathExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

std::vector<std::string> ListDir(const std::string& path) {
  std::vector<std::string> out;
  DIR* d = ::opendir(path.c_str());
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
    out.emplace_back(e->d_name);
  }
  ::closedir(d);
  return out;
}

std::string SelectedChoice(absl::string_view text) {
  size_t open = text.find('[');
  size_t close = text.find(']', open);
  if (open == absl::string_view::npos || close == absl::string_view::npos) {
    return std::string(absl::StripAsciiWhitespace(text));
  }
  return std::string(text.substr(open + 1, close - open - 1));
}

std::string ProcFs::PidPath(pid_t pid, absl::string_view rel) const {
  return absl::StrCat(root_, "/", pid, "/", rel);
}

bool ProcFs::Exists(pid_t pid) const { return PathExists(absl::StrCat(root_, "/", pid)); }

std::vector<std::string> ProcFs::FdTargets(pid_t pid) const {
  std::vector<std::string> out;
  std::string dir = PidPath(pid, "fd");
  for (const std::string& name : ListDir(dir)) {
    char buf[4096];
    ssize_t n = ::readlink(absl::StrCat(dir, "/", name).c_str(), buf, sizeof(buf) - 1);
    if (n <= 0) continue;
    out.emplace_back(buf, static_cast<size_t>(n));
  }
  return out;
}

std::vector<std::string> ProcFs::MappedPaths(pid_t pid) const {
  std::vector<std::string> out;
  auto text = ReadFile(PidPath(pid, "maps"));
  if (!text.ok()) return out;
  for (absl::string_view line : absl::StrSplit(*text, '\n')) {
    // address perms offset dev inode pathname: the path starts at the first '/'.
    size_t slash = line.find('/');
    if (slash == absl::string_view::npos) continue;
    out.emplace_back(line.substr(slash));
  }
  return out;
}

absl::StatusOr<std::map<std::string, std::string>> ProcFs::Environ(pid_t pid) const {
  auto text = ReadFile(PidPath(pid, "environ"));
  if (!text.ok()) return text.status();
  std::map<std::string, std::string> env;
  for (absl::string_view kv : absl::StrSplit(*text, '\0', absl::SkipEmpty())) {
    size_t eq = kv.find('=');
    if (eq == absl::string_view::npos) continue;
    env.emplace(std::string(kv.substr(0, eq)), std::string(kv.substr(eq + 1)));
  }
  return env;
}

}  // namespace cryo::gpu
