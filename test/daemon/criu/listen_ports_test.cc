#include "daemon/criu/listen_ports.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace cryo::criu {
namespace {

Listener Loopback(uint16_t port) {
  Listener l;
  l.family = AF_INET;
  l.addr = {127, 0, 0, 1};
  l.port = port;
  return l;
}

TEST(ListenPortsTest, ImagesRoundTripEachListenerOnce) {
  char tmpl[] = "/tmp/cryo-listen-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  Listener any6;
  any6.family = AF_INET6;
  any6.port = 29562;
  Listener v6only = any6;
  v6only.addr[15] = 1;  // ::1
  v6only.v6only = true;
  v6only.port = 8080;
  ASSERT_TRUE(WriteImageListeners(tmpl, {Loopback(54673), any6, Loopback(54673), v6only}).ok());
  auto got = ReadImageListeners(tmpl);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 3u);
  EXPECT_EQ((*got)[0].Address(), "127.0.0.1:54673");
  EXPECT_EQ((*got)[1].Address(), "[::]:29562");
  EXPECT_EQ((*got)[2].Address(), "[::1]:8080");
  EXPECT_TRUE((*got)[2].v6only);
  std::filesystem::remove_all(tmpl);
}

TEST(ListenPortsTest, ImagesWithoutFilesHaveNoListenersAndGarbageIsRefused) {
  char tmpl[] = "/tmp/cryo-listen-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  auto none = ReadImageListeners(tmpl);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(none->empty());
  ASSERT_EQ(std::system(absl::StrCat("printf 'not an image' > ", tmpl, "/files.img").c_str()), 0);
  auto bad = ReadImageListeners(tmpl);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument) << bad.status();
  std::filesystem::remove_all(tmpl);
}

TEST(ListenPortsTest, ParsesTheKernelsTcpTables) {
  const char* v4 =
      "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout "
      "inode\n"
      "   0: 0100007F:D725 0100007F:E182 06 00000000:00000000 03:00001765 00000000     0        0 "
      "0 3 0000000000000000\n"
      "   1: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 "
      "12345 1 0000000000000000 100 0 0 10 0\n";
  auto s = ParseProcNetTcp(v4, AF_INET);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->size(), 2u);
  EXPECT_EQ((*s)[0].local_port, 55077);
  EXPECT_EQ((*s)[0].remote_port, 57730);
  EXPECT_EQ((*s)[0].state, kTcpTimeWait);
  EXPECT_EQ((*s)[0].local[0], 127);
  EXPECT_EQ((*s)[0].local[3], 1);
  EXPECT_EQ((*s)[1].state, 10);
  EXPECT_EQ((*s)[1].inode, 12345u);
  const char* v6 =
      "  sl  local_address                         remote_address                        st "
      "tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
      "   0: 0000000000000000FFFF00000100007F:737A 0000000000000000FFFF00000100007F:8F9A 01 "
      "00000000:00000000 00:00000000 00000000     0        0 777 1 0000000000000000 20 4 30 10 "
      "-1\n";
  auto s6 = ParseProcNetTcp(v6, AF_INET6);
  ASSERT_TRUE(s6.ok()) << s6.status();
  ASSERT_EQ(s6->size(), 1u);
  EXPECT_EQ((*s6)[0].local_port, 29562);
  EXPECT_EQ((*s6)[0].local[10], 0xff);
  EXPECT_EQ((*s6)[0].local[12], 127);
  EXPECT_FALSE(ParseProcNetTcp("header\n 0: zz:1 00:0 06 x x x x x 1\n", AF_INET).ok());
}

TcpSocket Sock(std::array<uint8_t, 16> local, uint16_t lport, std::array<uint8_t, 16> remote,
               uint16_t rport, int state, uint64_t inode) {
  TcpSocket s;
  s.family = AF_INET;
  s.local = local;
  s.local_port = lport;
  s.remote = remote;
  s.remote_port = rport;
  s.state = state;
  s.inode = inode;
  return s;
}

TEST(PortableSocketsTest, WhatUsesThePodsAddressIsRefusedWithWhatToSet) {
  const std::array<uint8_t, 16> pod = {10, 244, 1, 5}, lo = {127, 0, 0, 1}, any = {},
                                peer = {10, 96, 0, 10};
  const int kEstablished = 1, kListen = 10;
  // Loopback and every-address listeners, loopback connections, a connection to another host,
  // and sockets that are not the job's: all move with the pod.
  const std::vector<TcpSocket> fine = {
      Sock(lo, 29500, any, 0, kListen, 1),         Sock(any, 8080, any, 0, kListen, 2),
      Sock(lo, 40000, lo, 29500, kEstablished, 3), Sock(pod, 41000, peer, 443, kEstablished, 4),
      Sock(pod, 29501, any, 0, kListen, 99),       Sock(pod, 40001, pod, 29500, kEstablished, 0)};
  EXPECT_TRUE(CheckPortableSockets(fine, {1, 2, 3, 4}, false).ok());

  auto l = CheckPortableSockets({Sock(pod, 29500, any, 0, kListen, 7)}, {7}, false);
  EXPECT_EQ(l.code(), absl::StatusCode::kFailedPrecondition) << l;
  EXPECT_TRUE(absl::StrContains(l.message(), "listener 10.244.1.5:29500")) << l;
  EXPECT_TRUE(absl::StrContains(l.message(), "NCCL_SOCKET_IFNAME=lo")) << l;
  EXPECT_TRUE(absl::StrContains(l.message(), "MASTER_ADDR=127.0.0.1")) << l;
  EXPECT_TRUE(absl::StrContains(l.message(), "the job runs on")) << l;
  // tcp-close does not help a listener: CRIU binds it all the same.
  EXPECT_FALSE(CheckPortableSockets({Sock(pod, 29500, any, 0, kListen, 7)}, {7}, true).ok());

  const TcpSocket rank = Sock(pod, 40001, pod, 29500, kEstablished, 8);
  auto c = CheckPortableSockets({rank}, {8}, false);
  EXPECT_EQ(c.code(), absl::StatusCode::kFailedPrecondition) << c;
  EXPECT_TRUE(absl::StrContains(c.message(), "10.244.1.5:40001 -> 10.244.1.5:29500")) << c;
  EXPECT_TRUE(absl::StrContains(c.message(), "tcp-close")) << c;
  EXPECT_TRUE(CheckPortableSockets({rank}, {8}, true).ok());
}

class FreeListenPortsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root (CAP_NET_ADMIN, to destroy sockets)";
  }

  // A listener on a loopback port without SO_REUSEADDR that accepted one connection and closed
  // its end first (as NCCL's bootstrap does), then closed: a TIME_WAIT socket holds the port.
  static uint16_t PortHeldByTimeWait() {
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(sa);
    const int l = ::socket(AF_INET, SOCK_STREAM, 0);
    EXPECT_EQ(::bind(l, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0);
    EXPECT_EQ(::listen(l, 1), 0);
    EXPECT_EQ(::getsockname(l, reinterpret_cast<sockaddr*>(&sa), &len), 0);
    const int c = ::socket(AF_INET, SOCK_STREAM, 0);
    EXPECT_EQ(::connect(c, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0);
    const int a = ::accept(l, nullptr, nullptr);
    ::close(a);
    char b;
    EXPECT_EQ(::read(c, &b, 1), 0);
    ::close(c);
    ::close(l);
    return ntohs(sa.sin_port);
  }

  // Whether a listener can bind `port` on loopback as CRIU binds it (SO_REUSEADDR on).
  static bool Bindable(uint16_t port) {
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sa.sin_port = htons(port);
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0;
    ::close(fd);
    return ok;
  }
};

TEST_F(FreeListenPortsTest, ClearsTheTimeWaitSocketsOnAListenersPort) {
  const uint16_t port = PortHeldByTimeWait();
  ASSERT_FALSE(Bindable(port)) << "no TIME_WAIT socket holds the port: the test shows nothing";
  auto r = FreeListenPorts({Loopback(port)}, {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_GE(r->cleared, 1);
  ASSERT_EQ(r->ports.size(), 1u);
  EXPECT_EQ(r->ports[0], absl::StrCat("127.0.0.1:", port));
  EXPECT_TRUE(Bindable(port));
}

TEST_F(FreeListenPortsTest, WorksInTheNetworkNamespaceOfAnotherProcess) {
  const uint16_t port = PortHeldByTimeWait();
  ASSERT_FALSE(Bindable(port));
  FreePortsOptions o;
  o.netns_pid = ::getpid();  // entered on a thread of its own
  auto r = FreeListenPorts({Loopback(port)}, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(Bindable(port));
}

TEST_F(FreeListenPortsTest, APortALiveSocketHoldsIsRefusedNamingItsProcess) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(sa);
  const int l = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_EQ(::bind(l, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0);
  ASSERT_EQ(::listen(l, 1), 0);
  ASSERT_EQ(::getsockname(l, reinterpret_cast<sockaddr*>(&sa), &len), 0);
  const uint16_t port = ntohs(sa.sin_port);
  auto r = FreeListenPorts({Loopback(port)}, {});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
  const std::string msg(r.status().message());
  EXPECT_TRUE(absl::StrContains(msg, absl::StrCat("127.0.0.1:", port))) << msg;
  EXPECT_TRUE(absl::StrContains(msg, "LISTEN")) << msg;
  EXPECT_TRUE(absl::StrContains(msg, absl::StrCat("pid ", ::getpid()))) << msg;
  // Nothing was taken from the holder.
  const int c = ::socket(AF_INET, SOCK_STREAM, 0);
  EXPECT_EQ(::connect(c, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0);
  ::close(c);
  ::close(l);
}

TEST_F(FreeListenPortsTest, AnAddressTheNodeLacksIsRefusedNamingWhatToSet) {
  Listener pod_ip;
  pod_ip.family = AF_INET;
  pod_ip.addr = {192, 0, 2, 77};  // TEST-NET-1: on no interface here
  pod_ip.port = 29500;
  auto r = FreeListenPorts({pod_ip}, {});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
  const std::string msg(r.status().message());
  EXPECT_TRUE(absl::StrContains(msg, "192.0.2.77:29500")) << msg;
  EXPECT_TRUE(absl::StrContains(msg, "NCCL_SOCKET_IFNAME=lo")) << msg;
}

TEST_F(FreeListenPortsTest, NoListenersNothingToDo) {
  auto r = FreeListenPorts({}, {});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->cleared, 0);
}

}  // namespace
}  // namespace cryo::criu
