#include "daemon/criu/job_network.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <thread>

#include "criu/images.pb.h"
#include "daemon/criu/image_file.h"
#include "daemon/criu/network_lock.h"
#include "gtest/gtest.h"
#include "lib/base/fs.h"
#include "lib/base/subprocess.h"
#include "test/temp_dir.h"

namespace cryo::criu {
namespace {

constexpr uint32_t kInetSk = 4;

uint32_t V4(const char* ip) {
  in_addr a{};
  EXPECT_EQ(::inet_pton(AF_INET, ip, &a), 1) << ip;
  uint32_t w;
  std::memcpy(&w, &a, 4);
  return w;
}

std::string Ip(const google::protobuf::RepeatedField<uint32_t>& words) {
  char buf[INET6_ADDRSTRLEN] = {};
  uint32_t raw[4] = {};
  for (int i = 0; i < words.size() && i < 4; ++i) raw[i] = words.Get(i);
  ::inet_ntop(words.size() == 1 ? AF_INET : AF_INET6, raw, buf, sizeof(buf));
  return buf;
}

::criu::file_entry Tcp(uint32_t id, const char* src, uint16_t sport, const char* dst,
                       uint16_t dport, uint32_t state) {
  ::criu::file_entry fe;
  fe.set_type(kInetSk);
  fe.set_id(id);
  auto* sk = fe.mutable_isk();
  sk->set_id(id);
  sk->set_ino(1000 + id);
  sk->set_family(AF_INET);
  sk->set_type(SOCK_STREAM);
  sk->set_proto(IPPROTO_TCP);
  sk->set_state(state);
  sk->set_src_port(sport);
  sk->set_dst_port(dport);
  sk->add_src_addr(V4(src));
  if (dst != nullptr) sk->add_dst_addr(V4(dst));
  return fe;
}

// files.img with: a connection from member left (10.88.1.2) to member right (10.88.2.2), a
// connection to a host outside the job, a listener on every address, and a pipe entry with a
// field cryo's subset of the proto does not know (it must come through unchanged).
void WriteImages(const std::string& dir) {
  auto a = Tcp(1, "10.88.1.2", 7300, "10.88.2.2", 40000, 1);
  auto b = Tcp(2, "10.88.1.2", 51000, "192.0.2.9", 443, 1);
  auto c = Tcp(3, "0.0.0.0", 7300, nullptr, 0, 10);
  ::criu::file_entry pipe;
  pipe.set_type(6);
  pipe.set_id(4);
  // field 8 (pipe entry), length-delimited, 3 bytes the parser keeps as unknown
  const std::string unknown = std::string("\x42\x03\x08\x07\x10", 5);
  std::string raw = pipe.SerializeAsString() + unknown;
  ::criu::file_entry with_unknown;
  ASSERT_TRUE(with_unknown.ParseFromString(raw));
  ASSERT_TRUE(
      fs::WriteFileAtomic(fs::Join(dir, "files.img"),
                          FrameImage({kImgCommonMagic, kFilesMagic}, {&a, &b, &c, &with_unknown}))
          .ok());
  ASSERT_TRUE(fs::WriteFileAtomic(fs::Join(dir, "pages-1.img"), "pages").ok());
  ASSERT_TRUE(fs::WriteFileAtomic(fs::Join(dir, "tcp-stream-1001.img"), "queues").ok());
}

std::vector<::criu::file_entry> ReadFiles(const std::string& dir) {
  std::vector<::criu::file_entry> out;
  auto entries = ReadImageEntries(dir, "files.img", kFilesMagic, true, 1 << 20);
  EXPECT_TRUE(entries.ok()) << entries.status();
  if (!entries.ok()) return out;
  for (const auto& e : *entries) {
    out.emplace_back();
    EXPECT_TRUE(out.back().ParseFromString(e));
  }
  return out;
}

TEST(JobNetworkTest, MembersAddressesAreRewrittenAtBothEndsAndTheRestIsLinked) {
  TempDir in, out;
  WriteImages(in.path);
  const AddressMap map = {{"10.88.1.2", "10.88.2.3"}, {"10.88.2.2", "10.88.1.3"}};
  auto wrote = RewriteImageAddresses(in.path, out.path, "../in/images", map);
  ASSERT_TRUE(wrote.ok()) << wrote.status();
  ASSERT_TRUE(*wrote);
  // The two connections of the moved member (both had its old address), as they will be
  // restored.
  auto conns = ReadImageConnections(out.path);
  ASSERT_TRUE(conns.ok()) << conns.status();
  ASSERT_EQ(conns->size(), 2u);
  const auto files = ReadFiles(out.path);
  ASSERT_EQ(files.size(), 4u);
  EXPECT_EQ(Ip(files[0].isk().src_addr()), "10.88.2.3");
  EXPECT_EQ(Ip(files[0].isk().dst_addr()), "10.88.1.3");
  EXPECT_EQ(files[0].isk().src_port(), 7300u) << "ports and everything else stay";
  EXPECT_EQ(files[0].isk().ino(), 1001u);
  EXPECT_EQ(Ip(files[1].isk().src_addr()), "10.88.2.3");
  EXPECT_EQ(Ip(files[1].isk().dst_addr()), "192.0.2.9") << "a host outside the job keeps its";
  EXPECT_EQ(Ip(files[2].isk().src_addr()), "0.0.0.0");
  // What cryo's proto does not know comes through byte for byte.
  std::string tail = files[3].SerializeAsString();
  EXPECT_NE(tail.find(std::string("\x42\x03\x08\x07\x10", 5)), std::string::npos);
  // Every other image is a link to where the restoring CRIU finds the original.
  EXPECT_EQ(std::filesystem::read_symlink(out / "pages-1.img"), "../in/images/pages-1.img");
  EXPECT_EQ(std::filesystem::read_symlink(out / "tcp-stream-1001.img"),
            "../in/images/tcp-stream-1001.img");
  EXPECT_FALSE(std::filesystem::is_symlink(out / "files.img"));
  // The checkpoint's own images are untouched.
  const auto original = ReadFiles(in.path);
  ASSERT_EQ(original.size(), 4u);
  EXPECT_EQ(Ip(original[0].isk().src_addr()), "10.88.1.2");
}

TEST(JobNetworkTest, NothingIsWrittenWhenNoSocketUsesAMovedAddress) {
  TempDir in, out;
  WriteImages(in.path);
  auto wrote = RewriteImageAddresses(in.path, out.path, in.path, {{"10.88.9.9", "10.88.9.10"}});
  ASSERT_TRUE(wrote.ok()) << wrote.status();
  EXPECT_FALSE(*wrote);
  EXPECT_TRUE(std::filesystem::is_empty(out.path));
  // Nor when the members kept their addresses (one host network).
  wrote = RewriteImageAddresses(in.path, out.path, in.path, {{"10.88.1.2", "10.88.1.2"}});
  ASSERT_TRUE(wrote.ok());
  EXPECT_FALSE(*wrote);
}

TEST(JobNetworkTest, AMapThatIsNotAddressesOfOneFamilyIsRefused) {
  TempDir in, out;
  WriteImages(in.path);
  for (const AddressMap& bad : {AddressMap{{"10.88.1.2", "fd00::2"}},
                                AddressMap{{"10.88.1.2", "pod-b"}}, AddressMap{{"", "10.0.0.1"}}}) {
    auto wrote = RewriteImageAddresses(in.path, out.path, in.path, bad);
    EXPECT_EQ(wrote.status().code(), absl::StatusCode::kInvalidArgument) << wrote.status();
  }
  EXPECT_TRUE(std::filesystem::is_empty(out.path));
}

TEST(JobNetworkTest, AV4MappedConnectionOfADualStackSocketIsRewrittenToo) {
  TempDir in, out;
  ::criu::file_entry fe;
  fe.set_type(kInetSk);
  fe.set_id(1);
  auto* sk = fe.mutable_isk();
  sk->set_family(AF_INET6);
  sk->set_type(SOCK_STREAM);
  sk->set_proto(IPPROTO_TCP);
  sk->set_state(1);
  in6_addr a{}, b{};
  ASSERT_EQ(::inet_pton(AF_INET6, "::ffff:10.88.1.2", &a), 1);
  ASSERT_EQ(::inet_pton(AF_INET6, "::ffff:10.88.2.2", &b), 1);
  for (int i = 0; i < 4; ++i) {
    uint32_t w;
    std::memcpy(&w, reinterpret_cast<const char*>(&a) + 4 * i, 4);
    sk->add_src_addr(w);
    std::memcpy(&w, reinterpret_cast<const char*>(&b) + 4 * i, 4);
    sk->add_dst_addr(w);
  }
  ASSERT_TRUE(fs::WriteFileAtomic(fs::Join(in.path, "files.img"),
                                  FrameImage({kImgCommonMagic, kFilesMagic}, {&fe}))
                  .ok());
  auto wrote = RewriteImageAddresses(in.path, out.path, in.path,
                                     {{"10.88.1.2", "10.88.2.3"}, {"10.88.2.2", "10.88.1.3"}});
  ASSERT_TRUE(wrote.ok()) << wrote.status();
  ASSERT_TRUE(*wrote);
  auto conns = ReadImageConnections(out.path);
  ASSERT_TRUE(conns.ok()) << conns.status();
  ASSERT_EQ(conns->size(), 1u);
  const auto files = ReadFiles(out.path);
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(Ip(files[0].isk().src_addr()), "::ffff:10.88.2.3");
  EXPECT_EQ(Ip(files[0].isk().dst_addr()), "::ffff:10.88.1.3");
}

TEST(JobNetworkTest, AMembersListenersAreCheckedWhereTheRewriteMakesThemListen) {
  // NCCL listens on the pod's address: the restore's port check must bind the new one.
  auto listener = [](int family, const char* text, uint16_t port) {
    Listener l;
    l.family = family;
    l.port = port;
    EXPECT_EQ(::inet_pton(family, text, l.addr.data()), 1) << text;
    return l;
  };
  const std::vector<Listener> in = {
      listener(AF_INET, "10.88.1.2", 38393), listener(AF_INET6, "::ffff:10.88.1.2", 29561),
      listener(AF_INET, "0.0.0.0", 7300), listener(AF_INET6, "fd00::2", 80)};
  const auto out = RewriteListeners(in, {{"10.88.1.2", "10.88.7.9"}, {"fd00::2", "fd00::9"}});
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0].Address(), "10.88.7.9:38393");
  EXPECT_EQ(out[1].Address(), "[::ffff:10.88.7.9]:29561");
  EXPECT_EQ(out[2].Address(), "0.0.0.0:7300");
  EXPECT_EQ(out[3].Address(), "[fd00::9]:80");
}

TEST(JobNetworkTest, APodsAddressesLeaveOutLoopback) {
  // This process's own namespace: whatever it has, never 127.0.0.1 or ::1.
  auto ips = PodAddresses(::getpid());
  ASSERT_TRUE(ips.ok()) << ips.status();
  for (const auto& ip : *ips) {
    EXPECT_NE(ip, "127.0.0.1");
    EXPECT_NE(ip, "::1");
  }
  EXPECT_FALSE(PodAddresses(0x7ffffff0).ok()) << "no such process";
}

TEST(JobNetworkTest, AddressesFromEarlierMovesFollowTheirMembers) {
  // First move: left 10.0.0.1 -> 10.0.1.1, right 10.0.0.2 -> 10.0.1.2; now left moves on to
  // 10.0.2.1 and right to 10.0.2.2.
  const AddressMap earlier = {{"10.0.0.1", "10.0.1.1"}, {"10.0.0.2", "10.0.1.2"}};
  const AddressMap moved = {{"10.0.1.1", "10.0.2.1"}, {"10.0.1.2", "10.0.2.2"}};
  EXPECT_EQ(ComposeAddressMaps(moved, earlier), (AddressMap{{"10.0.0.1", "10.0.2.1"},
                                                            {"10.0.0.2", "10.0.2.2"},
                                                            {"10.0.1.1", "10.0.2.1"},
                                                            {"10.0.1.2", "10.0.2.2"}}));
  // A member that kept its address keeps its earlier one pointing there; one that came back to
  // an earlier address needs no redirect of it.
  EXPECT_EQ(ComposeAddressMaps({{"10.0.1.1", "10.0.0.1"}}, earlier),
            (AddressMap{{"10.0.0.2", "10.0.1.2"}, {"10.0.1.1", "10.0.0.1"}}));
  EXPECT_EQ(ComposeAddressMaps(moved, {}), moved);
}

// In a network namespace of its own (a thread's, with a veth interface as a pod's): the table
// made, read back, replaced, and doing what it is for: a connection the process opens to a
// member's old address reaches the listener on the new one, and the process sees the address
// it asked for.
TEST(JobNetworkTest, AConnectionToAMembersOldAddressReachesItsNewOne) {
  if (::geteuid() != 0 || FindExecutable("nft").empty() || FindExecutable("ip").empty()) {
    GTEST_SKIP() << "needs root, nft and ip (scripts/setup.sh installs them)";
  }
  std::thread t([] {
    ASSERT_EQ(::unshare(CLONE_NEWNET), 0) << std::strerror(errno);
    for (const std::vector<std::string>& argv :
         {std::vector<std::string>{"ip", "link", "set", "lo", "up"},
          {"ip", "link", "add", "pod0", "type", "veth", "peer", "name", "out0"},
          {"ip", "addr", "add", "10.99.0.2/24", "dev", "pod0"},
          {"ip", "link", "set", "pod0", "up"}}) {
      auto r = RunCapture(argv);
      ASSERT_TRUE(r.ok() && r->exit.exited && r->exit.code == 0)
          << argv[1] << " " << argv[2] << ": " << (r.ok() ? r->output : r.status().ToString());
    }
    const int l = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in at{};
    at.sin_family = AF_INET;
    at.sin_port = htons(7300);
    at.sin_addr.s_addr = V4("10.99.0.2");
    ASSERT_EQ(::bind(l, reinterpret_cast<sockaddr*>(&at), sizeof(at)), 0) << std::strerror(errno);
    ASSERT_EQ(::listen(l, 4), 0);

    const AddressMap map = {{"10.99.0.1", "10.99.0.2"}, {"10.99.0.3", "10.99.0.4"}};
    ASSERT_TRUE(KeepJobAddresses(map, 0, "").ok());
    auto back = ReadJobAddresses(0, "");
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, map);

    const int c = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    timeval tv{5, 0};  // without the table the SYN goes out to nobody
    ::setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    sockaddr_in old = at;
    old.sin_addr.s_addr = V4("10.99.0.1");
    ASSERT_EQ(::connect(c, reinterpret_cast<sockaddr*>(&old), sizeof(old)), 0)
        << std::strerror(errno);
    const int a = ::accept4(l, nullptr, nullptr, SOCK_CLOEXEC);
    ASSERT_GE(a, 0);
    sockaddr_in peer{};
    socklen_t len = sizeof(peer);
    ASSERT_EQ(::getpeername(c, reinterpret_cast<sockaddr*>(&peer), &len), 0);
    EXPECT_EQ(peer.sin_addr.s_addr, V4("10.99.0.1")) << "the process sees what it dialled";
    ASSERT_EQ(::write(c, "x", 1), 1);
    char got = 0;
    ASSERT_EQ(::read(a, &got, 1), 1);
    EXPECT_EQ(got, 'x');
    for (int fd : {a, c, l}) ::close(fd);

    // Replaced whole by the next restore's map; a bad map changes nothing.
    ASSERT_TRUE(KeepJobAddresses({{"10.99.0.5", "10.99.0.2"}}, 0, "").ok());
    back = ReadJobAddresses(0, "");
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, (AddressMap{{"10.99.0.5", "10.99.0.2"}}));
    EXPECT_EQ(KeepJobAddresses({{"10.99.0.6", "fd00::1"}}, 0, "").code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(ReadJobAddresses(0, "")->size(), 1u);
  });
  t.join();
}

TEST(JobNetworkTest, ANamespaceWithoutTheTableHasNoFormerAddresses) {
  if (::geteuid() != 0 || FindExecutable("nft").empty()) GTEST_SKIP() << "needs root and nft";
  std::thread t([] {
    ASSERT_EQ(::unshare(CLONE_NEWNET), 0) << std::strerror(errno);
    auto none = ReadJobAddresses(0, "");
    ASSERT_TRUE(none.ok()) << none.status();
    EXPECT_TRUE(none->empty());
  });
  t.join();
}

// The table lives in the pod's own namespace, where a job with CAP_NET_ADMIN can write one of
// its own: what the next checkpoint reads back from it becomes the manifest's
// former_addresses, so a pair that is not two addresses of one family is refused by name.
TEST(JobNetworkTest, AJobsOwnTableOfAddressesThatAreNotOneFamilyIsRefused) {
  if (::geteuid() != 0 || FindExecutable("nft").empty()) GTEST_SKIP() << "needs root and nft";
  std::thread t([] {
    ASSERT_EQ(::unshare(CLONE_NEWNET), 0) << std::strerror(errno);
    auto made =
        RunNft({"-f", "-"}, 0, "",
               "table inet cryo-job-addresses {\n  chain output {\n"
               "    type nat hook output priority -100; policy accept;\n"
               "    ip daddr 10.99.0.1 dnat ip to 10.99.0.2 comment \"cryo 10.99.0.1>fd00::2\"\n"
               "  }\n}\n");
    ASSERT_TRUE(made.ok() && made->ok) << (made.ok() ? made->output : made.status().ToString());
    auto read = ReadJobAddresses(0, "");
    EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument) << read.status();
    EXPECT_NE(read.status().message().find("fd00::2"), std::string::npos) << read.status();
  });
  t.join();
}

}  // namespace
}  // namespace cryo::criu
