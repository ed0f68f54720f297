#include "daemon/store/manifest.h"

#include <functional>
#include <set>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "lib/base/limits.h"

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
  EXPECT_FALSE(back->container.has_value());
  EXPECT_EQ(nlohmann::json::parse(ManifestToJson(m))["format"], kManifestFormat);
}

// A file of GPU data cryod wrote: its chunks' digests, and the chunks an earlier checkpoint
// holds. What does not add up is refused.
TEST(Manifest, ChunkDigestsAndReferencesRoundTripAndAreChecked) {
  Manifest m = Sample();
  const std::string d(32, 'a');
  const uint64_t chunk = 64ull << 20;
  m.files.push_back({"gpu/fastpath-100-0", 2 * chunk + 5, "cc", {d, d, d}, {{"job-0", {0, 2}}}});
  auto back = ParseManifest(ManifestToJson(m));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->files[2].chunks, m.files[2].chunks);
  EXPECT_EQ(back->files[2].refs, m.files[2].refs);
  EXPECT_EQ(back->ReferencedBytes(), chunk + 5) << "chunk 0 whole, and the 5 bytes of chunk 2";
  EXPECT_EQ(back->WrittenBytes(), 4106 + chunk);
  EXPECT_EQ(back->References(), (std::set<std::string>{"job-0"}));
  EXPECT_EQ(nlohmann::json::parse(ManifestToJson(m))["bytes_referenced"], chunk + 5);

  auto refused = [&](const std::function<void(nlohmann::json&)>& edit, const std::string& why) {
    auto j = nlohmann::json::parse(ManifestToJson(m));
    edit(j["files"][2]);
    auto r = ParseManifest(j.dump());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << why;
    EXPECT_NE(r.status().message().find(why), std::string::npos) << r.status();
  };
  refused([](nlohmann::json& f) { f["chunks"].erase(0); }, "2 chunk digests for");
  refused([](nlohmann::json& f) { f["chunks"][1] = "xyz"; }, "not one");
  refused([](nlohmann::json& f) { f["refs"]["job-0"].push_back(3); }, "does not have");
  refused([](nlohmann::json& f) { f["refs"]["job-9"] = {2}; }, "or twice");
  refused([](nlohmann::json& f) { f["refs"]["../x"] = {1}; }, "refers to");
  refused([](nlohmann::json& f) { f["refs"]["job-1"] = {1}; }, "its own checkpoint");
  refused([](nlohmann::json& f) { f.erase("chunks"); }, "no digest of");
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

// Found on 2026-11-24: a manifest whose "format" was a number threw out of ParseManifest and
// aborted cryod on every node that listed the store.
TEST(Manifest, EveryFieldOfEveryTypeIsAnErrorNeverACrash) {
  Manifest c = Sample();
  c.kind = CheckpointKind::kContainer;
  c.container = ContainerSection{};
  c.container->id = "abc";
  c.gpu_processes = {{100, "cuda", {{"uuid", "GPU-1"}}, 7}};
  const nlohmann::json base = nlohmann::json::parse(ManifestToJson(c));
  const nlohmann::json flat = base.flatten();
  const std::vector<nlohmann::json> wrong = {
      nlohmann::json(7),       nlohmann::json(-1),      nlohmann::json("x"),
      nlohmann::json(true),    nlohmann::json::array(), nlohmann::json::object(),
      nlohmann::json(nullptr), nlohmann::json(1.5),     nlohmann::json(1ull << 63)};
  std::vector<std::string> paths;
  for (const auto& [leaf, v] : flat.items()) {
    // Every leaf and every object or array above it.
    std::string p = leaf;
    while (!p.empty()) {
      paths.push_back(p);
      p = p.substr(0, p.rfind('/'));
    }
  }
  int refused = 0;
  for (const std::string& p : paths) {
    for (const auto& w : wrong) {
      nlohmann::json j = base;
      j[nlohmann::json::json_pointer(p)] = w;
      auto r = ParseManifest(j.dump());  // must return, whatever it says
      if (!r.ok()) {
        ++refused;
        EXPECT_TRUE(absl::IsInvalidArgument(r.status()) || absl::IsFailedPrecondition(r.status()))
            << p << " = " << w.dump() << ": " << r.status();
      }
    }
  }
  EXPECT_GT(refused, 100);
  auto j = base;
  j["format"] = 1;
  EXPECT_EQ(ParseManifest(j.dump()).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(Manifest, AContainerCheckpointNeedsItsContainerSection) {
  Manifest c = Sample();
  c.kind = CheckpointKind::kContainer;
  auto r = ParseManifest(ManifestToJson(c));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("container"), std::string::npos) << r.status();
}

TEST(Manifest, DeepNestingAndHugeInputAreRefusedCheaply) {
  std::string deep = R"({"format": "cryo.checkpoint/v1", "labels": )";
  deep += std::string(400000, '[') + std::string(400000, ']') + "}";
  auto r = ParseManifest(deep);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("deeper"), std::string::npos) << r.status();
  std::string huge(kMaxManifestBytes + 1, ' ');
  EXPECT_EQ(ParseManifest(huge).status().code(), absl::StatusCode::kInvalidArgument);
}

// Found on 2026-11-24: manifests already in a store were taken with labels of any size (three
// 1 MiB labels broke every list: gRPC's 4 MiB message limit). A manifest is now held to the
// bounds a request is.
TEST(Manifest, LabelsAndListedFieldsAreBoundedAsRequestsAre) {
  auto refused = [](Manifest m, const char* what) {
    auto r = ParseManifest(ManifestToJson(m));
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << what;
  };
  Manifest m = Sample();
  for (int i = 0; i < 3; ++i) m.labels[absl::StrCat("k", i)] = std::string(1 << 20, 'x');
  refused(m, "three 1 MiB labels");
  m = Sample();
  for (int i = 0; i < 65; ++i) m.labels[absl::StrCat("k", i)] = "v";
  refused(m, "65 labels");
  m = Sample();
  for (int i = 0; i < 5; ++i) m.labels[absl::StrCat("k", i)] = std::string(4000, 'x');
  refused(m, "20 KB of labels in all");
  m = Sample();
  m.labels["k"] = "line\nbreak";
  refused(m, "a control character in a label");
  m = Sample();
  m.labels[""] = "v";
  refused(m, "an empty label key");
  m = Sample();
  m.workload = std::string(300, 'w');
  refused(m, "a long workload");
  m = Sample();
  m.command = std::string(5000, 'c');
  refused(m, "a long command");
  m = Sample();
  m.pids.assign(kMaxManifestTasks + 1, 7);
  refused(m, "too many pids");

  m = Sample();
  m.labels.clear();
  for (size_t i = 0; i < limits::kMaxLabels; ++i) m.labels[absl::StrCat("k", i)] = "v";
  EXPECT_TRUE(ParseManifest(ManifestToJson(m)).ok()) << "the limit itself is fine";
}

}  // namespace
}  // namespace cryo::store
