#pragma once

// The TCP ports a restore must bind. CRIU restores a job's listening sockets at the addresses and
// ports they had, binding them with SO_REUSEADDR. In the host network namespace (a process-mode
// job, or a hostNetwork pod) that bind fails with "Address already in use" when the job closed
// connections of that listener shortly before its checkpoint: the kernel keeps each in TIME_WAIT
// for 60 s, still bound to the listener's port, and a TIME_WAIT socket whose listener never set
// SO_REUSEADDR (NCCL's bootstrap listeners, for example) stops any new bind of that port. CRIU
// then fails halfway through the restore. cryod checks the ports before anything is restored and
// clears TIME_WAIT sockets from them; a port that a live socket holds, or an address the node
// does not have, is refused up front with what to change. docs/gpu.md, "Multi-GPU jobs".

#include <sys/types.h>

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace cryo::criu {

// A TCP listener of a checkpointed job, as its images will restore it.
struct Listener {
  int family = 0;                  // AF_INET or AF_INET6
  std::array<uint8_t, 16> addr{};  // network order; the first 4 bytes for AF_INET
  uint16_t port = 0;
  bool v6only = false;

  std::string Address() const;  // "127.0.0.1:54673", "[::]:29562"
};

// An established TCP connection of a checkpointed job, as its images will restore it.
struct Connection {
  int family = 0;  // AF_INET or AF_INET6
  std::array<uint8_t, 16> src{}, dst{};
  uint16_t sport = 0, dport = 0;
  auto operator<=>(const Connection&) const = default;
};

// The established TCP connections in the images in `images_dir` (files.img, those dumped with
// --tcp-established). Empty when the job had none.
absl::StatusOr<std::vector<Connection>> ReadImageConnections(const std::string& images_dir);

// The TCP listeners in the images in `images_dir` (files.img), each port once per address.
// Empty when the job had none; INVALID_ARGUMENT for an image that does not parse.
absl::StatusOr<std::vector<Listener>> ReadImageListeners(const std::string& images_dir);

// Writes files.img with these listeners as CRIU would (tests).
absl::Status WriteImageListeners(const std::string& images_dir,
                                 const std::vector<Listener>& listeners);

// One socket of a network namespace's TCP table (/proc/<pid>/net/tcp and tcp6).
struct TcpSocket {
  int family = 0;
  std::array<uint8_t, 16> local{}, remote{};  // network order, like Listener::addr
  uint16_t local_port = 0, remote_port = 0;
  int state = 0;  // the kernel's TCP states: 6 TIME_WAIT, 10 LISTEN
  uint64_t inode = 0;
};
inline constexpr int kTcpTimeWait = 6;

// Parses the text of /proc/net/tcp (family AF_INET) or tcp6 (AF_INET6); INVALID_ARGUMENT for a
// line that is not the kernel's format.
absl::StatusOr<std::vector<TcpSocket>> ParseProcNetTcp(absl::string_view text, int family);

struct FreePortsOptions {
  pid_t netns_pid = 0;  // whose network namespace the restore binds in (0: cryod's own)
  absl::Time deadline = absl::InfiniteFuture();
  std::function<bool()> stop;  // true: give up with CANCELLED
  // How long to wait for TIME_WAIT sockets to go on a kernel that cannot destroy them (they
  // last 60 s), and how often to look.
  absl::Duration max_wait = absl::Seconds(70);
  absl::Duration poll = absl::Milliseconds(200);
};

struct FreePortsReport {
  int cleared = 0;  // TIME_WAIT sockets destroyed
  absl::Duration waited;
  std::vector<std::string> ports;  // the addresses that were held, as Listener::Address
};

// Makes every listener bindable as CRIU binds it (probed with a bind of a socket that is closed
// again at once). TIME_WAIT sockets on a listener's port are destroyed through the kernel's
// socket diagnostics (SOCK_DESTROY; needs CAP_NET_ADMIN), or waited out where the kernel cannot.
// FAILED_PRECONDITION, naming the address and what holds it, for a port a live socket holds or
// an address the namespace lacks; DEADLINE_EXCEEDED or CANCELLED as `opts` say.
absl::StatusOr<FreePortsReport> FreeListenPorts(const std::vector<Listener>& listeners,
                                                const FreePortsOptions& opts);

// Before a container's checkpoint (it resumes in another pod, with other addresses): refuses
// with FAILED_PRECONDITION, while the job still runs, sockets of the job (`inodes`, in the pod's
// TCP `table`) that cannot come back there: a listener on the pod's own address, and a connection
// between two of the pod's processes over that address (ranks that found each other through the
// pod's IP), unless `tcp_close` restores connections closed. Connections over loopback, and
// listeners on loopback or every address, move with the pod.
absl::Status CheckPortableSockets(const std::vector<TcpSocket>& table,
                                  const std::vector<uint64_t>& inodes, bool tcp_close);

// The same for live processes: their socket inodes from /proc/<pid>/fd, the table of the
// network namespace of `netns_pid`. Processes that ended are skipped.
absl::Status CheckPortableSockets(const std::vector<pid_t>& pids, pid_t netns_pid, bool tcp_close);

}  // namespace cryo::criu
