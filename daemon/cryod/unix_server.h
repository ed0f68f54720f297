#pragma once

// Serves a gRPC server on a unix socket that cryod accepts itself, so every connection's peer
// credentials (SO_PEERCRED) are checked before gRPC sees a byte. The socket file is 0600 as
// well: two locks on one door.

#include <grpcpp/server.h>

#include <memory>
#include <set>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "lib/base/wake_pipe.h"

namespace cryo::cryod {

class UnixListener {
 public:
  // Refuses to take over a socket another live process is serving.
  static absl::StatusOr<std::unique_ptr<UnixListener>> Create(const std::string& path,
                                                              std::set<int> allowed_uids,
                                                              grpc::Server* server);
  ~UnixListener();

 private:
  UnixListener(std::string path, int fd, std::set<int> allowed, grpc::Server* server);
  void Loop();

  std::string path_;
  int fd_;
  WakePipe wake_;
  std::set<int> allowed_;
  grpc::Server* server_;
  std::thread thread_;
};

}  // namespace cryo::cryod
