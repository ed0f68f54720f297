// cryod's reading of the fast path's replies (fastpath_client.h): each reply in its type, every
// failure of the library as its status code, a library version this cryod does not speak
// refused before anything is asked of it, and a "track" reply that attaches anything but one
// userfaultfd refused.

#include "daemon/gpu/fastpath_client.h"

#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "lib/base/proc.h"
#include "lib/contract/gpu_fastpath_messages.h"
#include "lib/contract/gpu_fastpath_wire.h"

namespace cryo::gpu {
namespace {

namespace wire = contract::gpu_fastpath;

FastpathProcess Job() {
  FastpathProcess p;
  p.pid = 4242;
  p.ns_pid = 42;
  return p;
}

wire::StatusReply Status(int version, int64_t pid) {
  wire::StatusReply s;
  s.version = version;
  s.pid = pid;
  s.owned_bytes = 8ull << 30;
  s.owned_allocations = 3;
  s.calls["cuLaunchKernel"] = 7;
  return s;
}

TEST(FastpathClientTest, AStatusComesBackWhole) {
  auto st = ParseFastpathReply<wire::StatusReply>(wire::Encode(Status(wire::kVersion, 42)), Job());
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->owned_bytes, 8ull << 30);
  EXPECT_EQ(st->owned_allocations, 3u);
  EXPECT_EQ(st->calls.at("cuLaunchKernel"), 7u);
  EXPECT_EQ(st->state, wire::State::kRunning);
}

TEST(FastpathClientTest, ALibraryVersionThisCryodDoesNotSpeakIsRefusedNamingBoth) {
  for (int v : {wire::kMinVersion - 1, wire::kVersion + 1}) {
    auto st = ParseFastpathReply<wire::StatusReply>(wire::Encode(Status(v, 42)), Job());
    EXPECT_EQ(st.status().code(), absl::StatusCode::kFailedPrecondition) << st.status();
    EXPECT_TRUE(absl::StrContains(st.status().message(), absl::StrCat("version ", v)))
        << st.status();
    EXPECT_TRUE(absl::StrContains(
        st.status().message(),
        absl::StrCat("speaks versions ", wire::kMinVersion, " to ", wire::kVersion)))
        << st.status();
  }
}

// "follow" (version 7) goes on the wire with a drain and a refill into memory: a library that
// missed it would take the progress page for a second memfd, or copy ahead of cryod's read.
TEST(FastpathClientTest, AFollowedDrainAndRefillSayFollowOnTheWire) {
  for (wire::Op op : {wire::Op::kDrain, wire::Op::kRefill}) {
    wire::Request req;
    req.op = op;
    req.version = wire::kVersionFollow;
    req.files = 2;
    req.memory = true;
    req.follow = true;
    wire::Request back;
    std::string why;
    ASSERT_TRUE(wire::Decode(wire::Encode(req), &back, &why)) << why;
    EXPECT_TRUE(back.memory) << wire::OpName(op);
    EXPECT_TRUE(back.follow) << wire::OpName(op);
    EXPECT_EQ(back.version, wire::kVersionFollow);
    req.follow = false;
    ASSERT_TRUE(wire::Decode(wire::Encode(req), &back, &why)) << why;
    EXPECT_FALSE(back.follow) << wire::OpName(op);
  }
}

// Filled (version 10): a refill from a park cryod read the store into carries "filled", the
// park's size and its GPU, which the library checks its memory against (a library that missed
// the GPU could copy from a park on another GPU).
TEST(FastpathClientTest, ARefillFromAFilledParkSaysFilledAndItsGpuOnTheWire) {
  wire::Request req;
  req.op = wire::Op::kRefill;
  req.version = wire::kVersionFill;
  req.files = 1;
  req.filled = true;
  req.park = 10ull << 30;
  req.park_device = "0000:19:00.0";
  const std::string sent = wire::Encode(req);
  wire::Request back;
  std::string why;
  ASSERT_TRUE(wire::Decode(sent, &back, &why)) << why;
  EXPECT_TRUE(back.filled) << sent;
  EXPECT_FALSE(back.memory) << sent;
  EXPECT_EQ(back.park, 10ull << 30);
  EXPECT_EQ(back.park_device, "0000:19:00.0");
  req.filled = false;
  ASSERT_TRUE(wire::Decode(wire::Encode(req), &back, &why)) << why;
  EXPECT_FALSE(back.filled);
}

// Parking (version 9): a drain names the park's size and GPU, a refill the park's size, a
// status the one GPU of the process's memory, and "drained" whether the data went into the park.
// A library that missed "park" would take the park for a progress page or a second memfd.
TEST(FastpathClientTest, AParkedDrainAndRefillSayParkOnTheWire) {
  for (wire::Op op : {wire::Op::kDrain, wire::Op::kRefill}) {
    wire::Request req;
    req.op = op;
    req.version = wire::kVersionPark;
    req.files = 2;
    req.memory = true;
    req.park = 10ull << 30;
    req.park_device = "0000:19:00.0";
    wire::Request back;
    std::string why;
    ASSERT_TRUE(wire::Decode(wire::Encode(req), &back, &why)) << why;
    EXPECT_EQ(back.park, 10ull << 30) << wire::OpName(op);
    EXPECT_EQ(back.park_device, op == wire::Op::kDrain ? "0000:19:00.0" : "")
        << "only a drain chooses the GPU";
    EXPECT_FALSE(back.follow);
  }
  wire::Request back;
  std::string why;
  EXPECT_FALSE(wire::Decode(R"({"op": "drain", "park": -1})", &back, &why)) << "a size";
  EXPECT_FALSE(wire::Decode(
      absl::StrCat(R"({"op": "drain", "park": 1, "park_device": ")", std::string(65, '0'), "\"}"),
      &back, &why))
      << "no bus id is that long";
  wire::StatusReply st = Status(wire::kVersion, 42);
  st.device = "0000:19:00.0";
  auto got = ParseFastpathReply<wire::StatusReply>(wire::Encode(st), Job());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->device, "0000:19:00.0");
  wire::DrainedReply d;
  d.bytes = 5;
  d.allocations = 1;
  d.parked = true;
  wire::Reply<wire::DrainedReply> drained;
  ASSERT_TRUE(wire::Decode(wire::Encode(d), &drained, &why)) << why;
  EXPECT_TRUE(drained.body.parked);
  d.parked = false;
  ASSERT_TRUE(wire::Decode(wire::Encode(d), &drained, &why)) << why;
  EXPECT_FALSE(drained.body.parked);
}

TEST(FastpathClientTest, AStatusForAnotherProcessIsRefused) {
  auto st = ParseFastpathReply<wire::StatusReply>(wire::Encode(Status(wire::kVersion, 43)), Job());
  EXPECT_EQ(st.status().code(), absl::StatusCode::kPermissionDenied) << st.status();
}

TEST(FastpathClientTest, TheLibrarysFailuresKeepTheirMeaning) {
  const std::pair<wire::ErrorCode, absl::StatusCode> cases[] = {
      {wire::ErrorCode::kDeadline, absl::StatusCode::kDeadlineExceeded},
      {wire::ErrorCode::kDataLoss, absl::StatusCode::kDataLoss},
      {wire::ErrorCode::kVersion, absl::StatusCode::kFailedPrecondition},
      {wire::ErrorCode::kDenied, absl::StatusCode::kPermissionDenied},
      {wire::ErrorCode::kNone, absl::StatusCode::kAborted}};
  for (const auto& [code, want] : cases) {
    auto r = ParseFastpathReply<wire::DrainedReply>(
        wire::Encode(wire::Error{"the job's kernels ran on", true, code}), Job());
    EXPECT_EQ(r.status().code(), want) << r.status();
    EXPECT_TRUE(absl::StrContains(r.status().message(), "the job runs on")) << r.status();
  }
  // A code from a newer library is a failure all the same.
  auto r = ParseFastpathReply<wire::RefillReply>(
      R"({"ok": false, "error": "x", "code": "something-new"})", Job());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kAborted) << r.status();
}

TEST(FastpathClientTest, MalformedRepliesAreInvalidArguments) {
  const char* bad[] = {
      "",
      "[]",
      R"({"ok": "yes"})",
      R"({"ok": true, "event": "saved", "bytes": 1, "allocations": 1})",  // not the drained one
      R"({"ok": true, "event": "drained", "bytes": -1, "allocations": 1})",
      R"({"ok": true, "event": "saved", "files": [{"size": 1}]})",
      R"({"ok": true, "event": "drained", "bytes": 1, "allocations": 1, "x": [[[[[[[[[1]]]]]]]]]})",
  };
  for (const char* text : bad) {
    absl::Status st = ParseFastpathReply<wire::DrainedReply>(text, Job()).status();
    if (st.ok()) st = ParseFastpathReply<wire::SavedReply>(text, Job()).status();
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << text << ": " << st;
  }
}

TEST(FastpathClientTest, RequestsAndRepliesRoundTrip) {
  wire::Request req;
  req.op = wire::Op::kRefill;
  req.threads = 16;
  req.files = 2;
  req.expected = {{1, "ab"}, {2, "cd"}};
  wire::Request back;
  std::string why;
  ASSERT_TRUE(wire::Decode(wire::Encode(req), &back, &why)) << why;
  EXPECT_EQ(back.op, wire::Op::kRefill);
  EXPECT_EQ(back.version, wire::kVersion);
  EXPECT_EQ(back.threads, 16);
  EXPECT_EQ(back.files, 2);
  EXPECT_EQ(back.expected, req.expected);
  EXPECT_FALSE(back.memory);
  // A drain into cryod's memory says so; one that does not is read as into files.
  wire::Request drain;
  drain.op = wire::Op::kDrain;
  drain.version = wire::kVersionMemory;
  drain.files = 1;
  drain.memory = true;
  ASSERT_TRUE(wire::Decode(wire::Encode(drain), &back, &why)) << why;
  EXPECT_TRUE(back.memory);
  EXPECT_EQ(back.version, wire::kVersionMemory);
  drain.memory = false;
  ASSERT_TRUE(wire::Decode(wire::Encode(drain), &back, &why)) << why;
  EXPECT_FALSE(back.memory);
  EXPECT_FALSE(wire::Decode(R"({"op": "drain", "memory": 1})", &back, &why)) << "memory is a bool";
  // A "go" that says more follow (version 4), and the last one, which does not.
  wire::Request go;
  go.op = wire::Op::kGo;
  go.version = wire::kVersionBatchedGo;
  go.imports = {7, 9};
  go.files = 2;
  go.more = true;
  ASSERT_TRUE(wire::Decode(wire::Encode(go), &back, &why)) << why;
  EXPECT_TRUE(back.more);
  EXPECT_EQ(back.imports, go.imports);
  go.more = false;
  ASSERT_TRUE(wire::Decode(wire::Encode(go), &back, &why)) << why;
  EXPECT_FALSE(back.more);
  // A legacy IPC share (version 5), between two libraries of one job.
  wire::Request share;
  share.op = wire::Op::kShare;
  share.version = wire::kVersionLegacyIpc;
  share.id = 42;
  share.secret = "00112233445566778899aabbccddeeff";
  ASSERT_TRUE(wire::Decode(wire::Encode(share), &back, &why)) << why;
  EXPECT_EQ(back.op, wire::Op::kShare);
  EXPECT_EQ(back.id, 42u);
  EXPECT_EQ(back.secret, share.secret);
  EXPECT_FALSE(wire::Decode(R"({"op": "share", "secret": 5})", &back, &why));
  wire::Reply<wire::ShareReply> shared;
  ASSERT_TRUE(wire::Decode(wire::Encode(wire::ShareReply{6 << 20}), &shared, &why)) << why;
  EXPECT_TRUE(shared.ok);
  EXPECT_EQ(shared.body.size, 6u << 20);
  ASSERT_TRUE(
      wire::Decode(wire::Encode(wire::Error{"out", false, wire::ErrorCode::kBusy}), &shared, &why))
      << why;
  EXPECT_FALSE(shared.ok);
  EXPECT_EQ(shared.error.code, wire::ErrorCode::kBusy);
  // A track (version 8): the userfaultfd is attached; the reply says its features.
  wire::Request track;
  track.op = wire::Op::kTrack;
  track.version = wire::kVersionTrack;
  ASSERT_TRUE(wire::Decode(wire::Encode(track), &back, &why)) << why;
  EXPECT_EQ(back.op, wire::Op::kTrack);
  EXPECT_EQ(back.version, wire::kVersionTrack);
  auto tracked =
      ParseFastpathReply<wire::TrackReply>(wire::Encode(wire::TrackReply{1u << 15}), Job());
  ASSERT_TRUE(tracked.ok()) << tracked.status();
  EXPECT_EQ(tracked->features, 1u << 15);
  EXPECT_EQ(tracked->fork_counter, 0u);  // an older library's reply: no counter
  auto counted = ParseFastpathReply<wire::TrackReply>(
      wire::Encode(wire::TrackReply{1u << 15, 0x7f0012345678}), Job());
  ASSERT_TRUE(counted.ok()) << counted.status();
  EXPECT_EQ(counted->fork_counter, 0x7f0012345678u);
  EXPECT_FALSE(ParseFastpathReply<wire::TrackReply>(
                   R"({"ok": true, "features": 1, "fork_counter": "here"})", Job())
                   .ok());
  EXPECT_FALSE(
      ParseFastpathReply<wire::TrackReply>(R"({"ok": true, "features": "all"})", Job()).ok());
  wire::SavedReply saved{{{1, "ab"}, {2, "cd"}}, 12};
  auto s = ParseFastpathReply<wire::SavedReply>(wire::Encode(saved), Job());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->files, saved.files);
  EXPECT_EQ(s->write_ms, 12);
}

// A library of this very process: it listens on the process's channel and answers one "track"
// with `attach` attached, as a job's library could (crafted or wrong).
class OneTrackReply {
 public:
  explicit OneTrackReply(std::vector<int> attach) {
    listen_ = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    const std::string name = wire::AlternateSocketName(::getpid(), 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::memcpy(a.sun_path + 1, name.data(), name.size());
    const socklen_t len = offsetof(sockaddr_un, sun_path) + 1 + name.size();
    bound_ =
        ::bind(listen_, reinterpret_cast<sockaddr*>(&a), len) == 0 && ::listen(listen_, 1) == 0;
    if (!bound_) return;
    thread_ = std::thread([this, attach] {
      const int conn = ::accept4(listen_, nullptr, nullptr, SOCK_CLOEXEC);
      if (conn < 0) return;
      std::string text;
      std::vector<UniqueFd> in;
      if (wire::ReceiveMessage(conn, &text, &in)) {
        (void)wire::SendMessage(conn, wire::Encode(wire::TrackReply{1u << 15}), attach);
      }
      ::close(conn);
    });
  }
  ~OneTrackReply() {
    if (thread_.joinable()) thread_.join();
    if (listen_ >= 0) ::close(listen_);
  }
  bool bound() const { return bound_; }

 private:
  int listen_ = -1;
  bool bound_ = false;
  std::thread thread_;
};

absl::StatusOr<WriteTracker> TrackThisProcess(std::vector<int> attach) {
  OneTrackReply lib(std::move(attach));
  EXPECT_TRUE(lib.bound());
  const pid_t me = ::getpid();
  return FastpathWriteTracker(proc::ProcReader(), FastpathProcess{me, me}, absl::Seconds(10));
}

TEST(FastpathClientTest, ATrackReplyWithAnythingButOneUserfaultfdIsRefusedNamingIt) {
  UniqueFd null(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(null.ok());
  auto r = TrackThisProcess({null.get()});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  EXPECT_TRUE(absl::StrContains(r.status().message(), "/dev/null, not a userfaultfd"))
      << r.status();

  r = TrackThisProcess({});
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::StrContains(r.status().message(), "sent 0 descriptors")) << r.status();

  UniqueFd uffd(static_cast<int>(::syscall(SYS_userfaultfd, O_CLOEXEC | UFFD_USER_MODE_ONLY)));
  ASSERT_TRUE(uffd.ok());
  r = TrackThisProcess({uffd.get(), uffd.get()});
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::StrContains(r.status().message(), "sent 2 descriptors")) << r.status();

  r = TrackThisProcess({uffd.get()});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->uffd.ok());
}

}  // namespace
}  // namespace cryo::gpu
