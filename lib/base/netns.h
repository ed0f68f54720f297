#pragma once

// Work inside another process's network namespace (its sockets, its TCP table, its abstract
// unix names): on a thread of its own that joins the namespace and ends there, so that cryod's
// other threads stay where they are.

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <cerrno>
#include <functional>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "lib/base/status.h"

namespace cryo {

// Runs `fn` on a thread that joined the network namespace at `ns_path` (/proc/<pid>/ns/net).
// The error of opening or joining it, when `fn` never ran.
inline absl::Status InNetNamespace(const std::string& ns_path, const std::function<void()>& fn) {
  absl::Status st;
  std::thread t([&] {
    const int fd = ::open(ns_path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      st = ErrnoStatus(errno, absl::StrCat("opening ", ns_path));
      return;
    }
    const int rc = ::setns(fd, CLONE_NEWNET);
    const int err = errno;
    ::close(fd);
    if (rc != 0) {
      st = ErrnoStatus(err, absl::StrCat("entering the network namespace ", ns_path));
      return;
    }
    fn();
  });
  t.join();
  return st;
}

}  // namespace cryo
