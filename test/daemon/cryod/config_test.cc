#include "daemon/cryod/config.h"

#include "gtest/gtest.h"
#include "lib/base/fs.h"
#include "test/daemon/test_util.h"

namespace cryo::cryod {
namespace {

absl::StatusOr<Config> Load(std::vector<std::string> args) {
  args.insert(args.begin(), "cryod");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return LoadConfig(argv.size(), argv.data());
}

TEST(Config, DefaultsFileThenFlags) {
  TempDir d;
  ASSERT_TRUE(fs::WriteFileAtomic(d.path + "/c.json",
                                  R"({"state_dir": "/srv/cryo", "retention_keep": 3,
                                      "store_fsync": false, "allowed_uids": [0, 1000]})")
                  .ok());
  auto c = Load({"--config", d.path + "/c.json", "--retention-keep=5", "--node-name", "n1"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->state_dir, "/srv/cryo");
  EXPECT_EQ(c->store, "/srv/cryo/store") << "store defaults under state_dir";
  EXPECT_EQ(c->journal_dir, "/srv/cryo/journal") << "journal_dir defaults under state_dir";
  EXPECT_EQ(c->retention_keep, 5) << "flags win over the file";
  EXPECT_FALSE(c->store_fsync);
  EXPECT_EQ(c->allowed_uids, (std::vector<int>{0, 1000}));
  EXPECT_EQ(c->node_name, "n1");
  EXPECT_EQ(c->socket, "/run/cryo/cryod.sock");
}

// The embedded defaults keep the journal off the store's disk (issue 39): with the default
// state_dir it is on /run, the tmpfs the socket is on; a cryod of its own state_dir keeps it
// there, and a journal_dir given wins.
TEST(Config, TheDefaultStateDirsJournalIsOnRunNotBesideTheStore) {
  auto c = Load({});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->state_dir, "/var/lib/cryo");
  EXPECT_EQ(c->store, "/var/lib/cryo/store");
  EXPECT_EQ(c->journal_dir, "/run/cryo/journal");
  EXPECT_EQ(Load({"--state-dir", "/srv/cryo"})->journal_dir, "/srv/cryo/journal");
  EXPECT_EQ(Load({"--journal-dir", "/var/lib/cryo/journal"})->journal_dir, "/var/lib/cryo/journal");
}

TEST(Config, ClearErrors) {
  TempDir d;
  EXPECT_EQ(Load({"--no-such-flag", "1"}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Load({"--retention-keep", "many"}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Load({"--store", "relative"}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Load({"--journal-dir", "run/cryo"}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Load({"--journal-dir", "/run/cryo/journal"})->journal_dir, "/run/cryo/journal");
  ASSERT_TRUE(fs::WriteFileAtomic(d.path + "/typo.json", R"({"retention_kepe": 1})").ok());
  auto c = Load({"--config", d.path + "/typo.json"});
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("retention_kepe"), std::string::npos);
  EXPECT_EQ(Load({"--config", d.path + "/missing.json"}).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(Load({"--help"}).status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(Load({"--gpu-write-start", "drained"})->gpu_write_start, "drained");
  auto early = Load({"--gpu-write-start", "early"});
  EXPECT_EQ(early.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(early.status().message().find("checkpointed, drained or draining"), std::string::npos)
      << early.status();
  EXPECT_NE(Usage().find("--pid-wait-timeout-ms"), std::string::npos);
}

TEST(Config, UsagePrintsEveryDefaultOnce) {
  const std::string u = Usage();
  // Each flag's block is its "--name" line and the help line under it.
  size_t pos = 0;
  int flags = 0;
  while ((pos = u.find("\n  --", pos)) != std::string::npos) {
    size_t end = u.find("\n  --", pos + 1);
    std::string block = u.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
    size_t first = block.find("default");
    if (first != std::string::npos) {
      EXPECT_EQ(block.find("default", first + 1), std::string::npos) << block;
    }
    ++flags;
    pos += 1;
  }
  EXPECT_GT(flags, 20);
  EXPECT_NE(u.find("(default: <state_dir>/store)"), std::string::npos) << u;
}

TEST(Config, TerminationKeys) {
  auto c = Load({});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->termination_providers.empty()) << "off by default";
  EXPECT_EQ(c->termination_poll_ms, 1000);
  EXPECT_EQ(c->termination_aws_url, "http://169.254.169.254");

  TempDir d;
  ASSERT_TRUE(fs::WriteFileAtomic(d.path + "/c.json",
                                  R"({"termination_providers": ["gce", "azure"],
                                      "termination_azure_vm_name": "vm-a"})")
                  .ok());
  c = Load({"--config", d.path + "/c.json", "--termination-poll-ms=250"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->termination_providers, (std::vector<std::string>{"gce", "azure"}));
  EXPECT_EQ(c->termination_poll_ms, 250);
  EXPECT_EQ(c->termination_azure_vm_name, "vm-a");
  c = Load({"--termination-providers", "aws,gce"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->termination_providers, (std::vector<std::string>{"aws", "gce"}));

  EXPECT_EQ(Load({"--termination-providers", "aws,oracle"}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Load({"--termination-poll-ms", "0"}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_NE(Usage().find("--termination-azure-url"), std::string::npos);
}

}  // namespace
TEST(Config, PeerKeys) {
  auto c = Load({});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->peer_listen.empty()) << "no peers by default";
  EXPECT_TRUE(c->peers.empty());
  EXPECT_FALSE(c->peer_process_members);
  c = Load(
      {"--peers", "node-b=10.0.0.2:9470,node-c=10.0.0.3:9470", "--peer-listen", "0.0.0.0:9470"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->peers, (std::map<std::string, std::string>{{"node-b", "10.0.0.2:9470"},
                                                          {"node-c", "10.0.0.3:9470"}}));
  TempDir d;
  ASSERT_TRUE(
      fs::WriteFileAtomic(d.path + "/c.json", R"({"peers": {"node-b": "10.0.0.2:9470"}})").ok());
  c = Load({"--config", d.path + "/c.json"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->peers.at("node-b"), "10.0.0.2:9470");
  EXPECT_EQ(Load({"--peers", "node-b"}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Load({"--peers", "=10.0.0.2:1"}).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace cryo::cryod
