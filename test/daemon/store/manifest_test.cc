#include "daemon/store/manifest.h"

#include "gtest/gtest.h"

namespace cryo::store {
namespace {

Manifest Sample() {
  Manifest m;
  m.id = "job-1";
  m.workload = "trainer";
  m.node = "node-a";
  m.created_at = "2026-11-22T08:00:00.000Z";
  m.root_pid = 100;
  m.pids = {100, 101};
  m.tids = {100, 102, 101};
  m.command = "python";
  m.cmdline = {"python", "train.py"};
  m.kernel = "6.18.0";
  m.arch = "x86_64";
  m.criu_version = "4.1.1";
  m.leave_running = true;
  m.labels = {{"team", "ml"}};
  m.stage_ms = {{"dump", 12}};
  m.checksum_algorithm = "xxh3-128-chunked-64m";
  m.files = {{"images/pages-1.img", 4096, "aa"}, {"images/core-100.img", 10, "bb"}};
  m.gpu = {{"processes", nlohmann::json::array()}};
  return m;
}

TEST(Manifest, RoundTrips) {
  Manifest m = Sample();
  auto back = ParseManifest(ManifestToJson(m));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->id, m.id);
  EXPECT_EQ(back->pids, m.pids);
  EXPECT_EQ(back->tids, m.tids);
  EXPECT_EQ(back->cmdline, m.cmdline);
  EXPECT_EQ(back->labels, m.labels);
  EXPECT_TRUE(back->leave_running);
  ASSERT_EQ(back->files.size(), 2u);
  EXPECT_EQ(back->files[0].path, "images/pages-1.img");
  EXPECT_EQ(back->TotalBytes(), 4106u);
  EXPECT_EQ(back->gpu, m.gpu);
  EXPECT_TRUE(back->container.is_null());
  EXPECT_EQ(nlohmann::json::parse(ManifestToJson(m))["format"], kManifestFormat);
}

TEST(Manifest, RefusesNewerFormatWithAClearReason) {
  auto j = nlohmann::json::parse(ManifestToJson(Sample()));
  j["format"] = "cryo.checkpoint/v9";
  auto r = ParseManifest(j.dump());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("v9"), std::string::npos);
}

TEST(Manifest, RefusesGarbageAndUnsafePaths) {
  EXPECT_EQ(ParseManifest("{not json").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseManifest("{}").status().code(), absl::StatusCode::kInvalidArgument);
  for (const char* bad : {"../../etc/shadow", "/etc/shadow", "images//x", "images/./x", ""}) {
    auto j = nlohmann::json::parse(ManifestToJson(Sample()));
    j["files"][0]["path"] = bad;
    EXPECT_EQ(ParseManifest(j.dump()).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  auto j = nlohmann::json::parse(ManifestToJson(Sample()));
  j["files"][0].erase("checksum");
  EXPECT_EQ(ParseManifest(j.dump()).status().code(), absl::StatusCode::kInvalidArgument);
  j = nlohmann::json::parse(ManifestToJson(Sample()));
  j["target"]["root_pid"] = 0;
  EXPECT_EQ(ParseManifest(j.dump()).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace cryo::store
