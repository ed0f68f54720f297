#pragma once

// What the cryo CLI's commands share (common.cc).

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "cryo/v1/cryo.grpc.pb.h"
#include "google/protobuf/map.h"
#include "google/protobuf/message.h"
#include "lib/base/flags.h"

namespace cryo::cli {

// The flags every command takes.
struct Global {
  std::string socket;
  std::string output = "text";
  bool json = false;
};

// cryod's API, connected at its first use: by then the command has parsed its own flags, and
// a --socket after the command counts too.
class Cryod {
 public:
  explicit Cryod(const Global& g) : g_(g) {}
  v1::Cryo::Stub* operator->() {
    if (!stub_) {
      stub_ = v1::Cryo::NewStub(
          grpc::CreateChannel("unix://" + g_.socket, grpc::InsecureChannelCredentials()));
    }
    return stub_.get();
  }

 private:
  const Global& g_;
  std::unique_ptr<v1::Cryo::Stub> stub_;
};

void DeclareGlobal(flags::FlagSet& fs, Global& g);
absl::Status CheckGlobal(Global& g);
// The usage text on stderr after `msg`; exit code 2.
int Usage(const std::string& msg);
// The usage text on stdout; exit code 0.
int Help();
std::string CodeName(grpc::StatusCode c);
// The same JSON as cryod's HTTP API and kubectl-checkpoint print.
std::string ToJson(const google::protobuf::Message& m);
// Says what failed (JSON with -o json); exit code 1.
int Fail(const Global& g, const std::string& what, const grpc::Status& s);
// A duration flag as the API's milliseconds; INVALID_ARGUMENT past what 32 bits hold.
absl::Status ToMs(absl::Duration d, const char* flag, uint32_t* ms);
// Parses a command's arguments with its flags plus the global ones (which may follow the
// command); prints usage and returns false on error.
bool ParseCommand(Global& g, flags::FlagSet& fs, const std::vector<std::string>& argv,
                  std::vector<std::string>* pos, int* rc);
// Stage times as "name Nms, ...".
std::string Ms(const google::protobuf::Map<std::string, uint64_t>& m);
// --detach: the first event names the operation; then leave it running.
int Detached(const Global& g, grpc::ClientReaderInterface<v1::OperationEvent>* r,
             grpc::ClientContext& ctx);
// Drains an operation stream, drawing progress, and returns the final event.
grpc::Status Follow(const Global& g, grpc::ClientReaderInterface<v1::OperationEvent>* r,
                    v1::OperationEvent* last);
// What a finished checkpoint and restore print (the command that ran them, and `watch`).
void PrintCheckpointed(const Global& g, const v1::CheckpointInfo& c);
void PrintRestored(const Global& g, const v1::RestoreResult& r);

}  // namespace cryo::cli
