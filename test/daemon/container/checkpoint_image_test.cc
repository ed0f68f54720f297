// Checkpoint images unpacked from an in-memory content store: the store's layout, every file
// checked against the archive's cryo-manifest.json, and what is refused.
#include "daemon/container/checkpoint_image.h"

#include <archive.h>
#include <archive_entry.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/container/archive.h"
#include "daemon/store/checksum.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/base/fs.h"
#include "test/daemon/test_util.h"

namespace cryo::container {
namespace {

using ::testing::HasSubstr;

class FakeImages final : public containerd::ImageContent {
 public:
  std::map<std::string, std::string> blobs;  // digest -> bytes
  bool endless = false;                      // zeros follow each blob until the reader stops
  absl::StatusOr<containerd::ImageManifest> Manifest(const std::vector<std::string>&,
                                                     absl::Time) override {
    return absl::UnimplementedError("not used");
  }
  absl::Status ReadBlob(const containerd::Blob& b, absl::Time,
                        const std::function<absl::Status(absl::string_view)>& sink) override {
    auto it = blobs.find(b.digest);
    if (it == blobs.end()) return absl::NotFoundError(b.digest);
    // In small pieces, as a gRPC stream delivers them.
    for (size_t off = 0; off < it->second.size(); off += 1000) {
      if (absl::Status s = sink(absl::string_view(it->second).substr(off, 1000)); !s.ok()) return s;
    }
    const std::string zeros(1000, '\0');
    while (endless) {
      if (absl::Status s = sink(zeros); !s.ok()) return s;
    }
    return absl::OkStatus();
  }
};

struct Entry {
  std::string name;
  std::string data;
  bool symlink = false;
};

// A layer as buildah writes one: a gzip-compressed tar.
std::string Layer(const std::vector<Entry>& entries) {
  std::string out(1 << 20, '\0');
  size_t used = 0;
  struct archive* a = archive_write_new();
  archive_write_set_format_pax_restricted(a);
  archive_write_add_filter_gzip(a);
  archive_write_open_memory(a, out.data(), out.size(), &used);
  for (const auto& e : entries) {
    struct archive_entry* h = archive_entry_new();
    archive_entry_set_pathname(h, e.name.c_str());
    if (e.symlink) {
      archive_entry_set_filetype(h, AE_IFLNK);
      archive_entry_set_symlink(h, e.data.c_str());
      archive_entry_set_perm(h, 0777);
    } else {
      archive_entry_set_filetype(h, AE_IFREG);
      archive_entry_set_perm(h, 0644);
      archive_entry_set_size(h, e.data.size());
    }
    archive_write_header(a, h);
    if (!e.symlink) archive_write_data(a, e.data.data(), e.data.size());
    archive_entry_free(h);
  }
  archive_write_close(a);
  archive_write_free(a);
  out.resize(used);
  return out;
}

std::string Checksum(const std::string& data) {
  ChunkedHasher h;
  h.Update(data.data(), data.size());
  return h.Finish().checksum;
}

// cryo-manifest.json for `files` (archive names -> contents).
std::string CryoManifest(const std::map<std::string, std::string>& files) {
  store::Manifest m;
  m.id = "ckpt-1";
  m.workload = "ns.trainer.counter";
  m.node = "node-a";
  m.created_at = "2026-11-25T08:00:00.000Z";
  m.kind = store::CheckpointKind::kContainer;
  m.container = store::ContainerSection{};
  m.container->id = "abc";
  m.container->image = "docker.io/cryo/busybox:e2e";
  m.container->image_ref = "sha256:1234";
  m.root_pid = 2;
  m.pids = {2};
  m.tids = {2};
  m.kernel = "6.18.0";
  m.arch = "x86_64";
  m.criu_version = "4.1.1";
  m.checksum_algorithm = kChecksumAlgorithm;
  for (const auto& [name, data] : files) m.files.push_back({name, data.size(), Checksum(data)});
  return store::ManifestToJson(m);
}

class CheckpointImageTest : public ::testing::Test {
 protected:
  absl::StatusOr<UnpackedImage> Unpack(const std::vector<Entry>& entries) {
    images_.blobs["sha256:layer"] = Layer(entries);
    containerd::ImageManifest im;
    im.name = "localhost/ckpt:1";
    im.layers = {{"application/vnd.oci.image.layer.v1.tar+gzip", "sha256:layer", 0}};
    ImportLimits limits;
    limits.max_bytes = max_bytes_;
    limits.stop = stop_;
    limits.room = room_;
    return UnpackCheckpointImage(images_, im, tmp_.path, absl::InfiniteFuture(), 2, limits);
  }

  const std::map<std::string, std::string> files_ = {
      {"checkpoint/pages-1.img", std::string(5000, 'p')},
      {"checkpoint/inventory.img", "inv"},
      {"rootfs-diff.tar", std::string(3000, 'r')},
      {"deleted.files", "[]"}};

  std::vector<Entry> Good() {
    std::vector<Entry> e;
    for (const auto& [n, d] : files_) e.push_back({n, d});
    e.push_back({"config.dump", R"({"rootfsImageName": "docker.io/cryo/busybox:e2e"})"});
    e.push_back({"spec.dump", "{}"});
    e.push_back({"cryo-manifest.json", CryoManifest(files_)});
    return e;
  }

  uint64_t max_bytes_ = 1ull << 30;
  std::function<bool()> stop_;
  std::function<absl::Status(uint64_t)> room_;
  FakeImages images_;
  TempDir tmp_;
  const std::string& dir_ = tmp_.path;
};

TEST_F(CheckpointImageTest, UnpacksIntoTheStoreLayoutAndChecksEveryFile) {
  auto u = Unpack(Good());
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(u->rootfs_image, "docker.io/cryo/busybox:e2e");
  EXPECT_EQ(u->manifest.container->image, "docker.io/cryo/busybox:e2e");
  std::vector<std::string> paths;
  for (const auto& f : u->manifest.files) paths.push_back(f.path);
  EXPECT_THAT(paths, ::testing::UnorderedElementsAre("images/pages-1.img", "images/inventory.img",
                                                     "container/rootfs-diff.tar",
                                                     "container/deleted.files"));
  auto pages = fs::ReadFile(fs::Join(dir_, "images/pages-1.img"));
  ASSERT_TRUE(pages.ok());
  EXPECT_EQ(*pages, files_.at("checkpoint/pages-1.img"));
  EXPECT_TRUE(fs::Exists(fs::Join(dir_, "container/rootfs-diff.tar")));
  // What cryo does not restore from is not written.
  EXPECT_FALSE(fs::Exists(fs::Join(dir_, "spec.dump")));
}

TEST_F(CheckpointImageTest, AFileThatFailsItsChecksumIsDataLossNamingIt) {
  std::vector<Entry> e = Good();
  for (auto& x : e) {
    if (x.name == "checkpoint/pages-1.img") x.data[100] ^= 1;
  }
  auto u = Unpack(e);
  ASSERT_FALSE(u.ok());
  EXPECT_EQ(u.status().code(), absl::StatusCode::kDataLoss) << u.status();
  EXPECT_THAT(u.status().message(), HasSubstr("pages-1.img"));
  EXPECT_THAT(u.status().message(), HasSubstr("localhost/ckpt:1"));
}

// An image's manifest that refers to another checkpoint for part of its GPU data would have a
// restore read that checkpoint (anyone's, in the store) into the image author's job: refused.
TEST_F(CheckpointImageTest, AManifestThatRefersToAnotherCheckpointIsRefused) {
  std::vector<Entry> e = Good();
  for (auto& x : e) {
    if (x.name != "cryo-manifest.json") continue;
    auto j = nlohmann::json::parse(x.data);
    j["files"][0]["chunks"] = {std::string(32, 'a')};
    j["files"][0]["refs"] = {{"victims-checkpoint", {0}}};
    x.data = j.dump();
  }
  auto u = Unpack(e);
  ASSERT_FALSE(u.ok());
  EXPECT_EQ(u.status().code(), absl::StatusCode::kPermissionDenied) << u.status();
  EXPECT_THAT(u.status().message(), HasSubstr("victims-checkpoint"));
}

TEST_F(CheckpointImageTest, AMissingFileIsDataLoss) {
  std::vector<Entry> e;
  for (const auto& x : Good()) {
    if (x.name != "rootfs-diff.tar") e.push_back(x);
  }
  auto u = Unpack(e);
  ASSERT_FALSE(u.ok());
  EXPECT_EQ(u.status().code(), absl::StatusCode::kDataLoss) << u.status();
}

TEST_F(CheckpointImageTest, AnArchiveWithoutCryosManifestIsRefused) {
  std::vector<Entry> e;
  for (const auto& x : Good()) {
    if (x.name != "cryo-manifest.json") e.push_back(x);
  }
  auto u = Unpack(e);
  ASSERT_FALSE(u.ok());
  EXPECT_EQ(u.status().code(), absl::StatusCode::kFailedPrecondition) << u.status();
  EXPECT_THAT(u.status().message(), HasSubstr("cryo-manifest.json"));
}

// Found in review: files cryo-manifest.json does not list were published unverified (CRIU
// reads images by name), a second cryo-manifest.json silently won, and an entry as large as
// the store filled it.
TEST_F(CheckpointImageTest, UnlistedFilesASecondManifestAndTooManyBytesAreRefused) {
  std::vector<Entry> e = Good();
  e.push_back({"checkpoint/core-99.img", "not listed"});
  auto u = Unpack(e);
  EXPECT_EQ(u.status().code(), absl::StatusCode::kDataLoss) << u.status();
  EXPECT_NE(u.status().message().find("core-99.img"), std::string::npos) << u.status();
  EXPECT_NE(u.status().message().find("does not list"), std::string::npos) << u.status();

  e = Good();
  e.push_back({"cryo-manifest.json", CryoManifest(files_)});
  u = Unpack(e);
  EXPECT_EQ(u.status().code(), absl::StatusCode::kDataLoss) << u.status();
  EXPECT_NE(u.status().message().find("second"), std::string::npos) << u.status();

  max_bytes_ = 4096;  // less than pages-1.img alone
  u = Unpack(Good());
  EXPECT_EQ(u.status().code(), absl::StatusCode::kResourceExhausted) << u.status();
  EXPECT_LT(fs::TreeBytes(dir_), 2u * 1048576) << "writing stopped at the bound";

  // A 17 MiB cryo-manifest.json: DATA_LOSS naming it (was: the feeder's broken pipe).
  max_bytes_ = 1ull << 30;
  e = Good();
  for (auto& x : e) {
    if (x.name == "cryo-manifest.json") x.data = std::string(17u << 20, ' ');
  }
  u = Unpack(e);
  EXPECT_EQ(u.status().code(), absl::StatusCode::kDataLoss) << u.status();
  EXPECT_NE(u.status().message().find("cryo-manifest.json is larger than"), std::string::npos)
      << u.status();

  e = Good();
  std::string deep = "checkpoint";
  for (int i = 0; i < 40; ++i) deep += "/d";
  e.push_back({deep + "/x.img", "x"});
  u = Unpack(e);
  EXPECT_EQ(u.status().code(), absl::StatusCode::kDataLoss) << u.status();
  EXPECT_NE(u.status().message().find("nested deeper"), std::string::npos) << u.status();
}

// Issue 34: three imports at once each counted the same free space and filled the store (ENOSPC).
// Now an import asks for room as it writes, every ImportLimits::kRoomEvery bytes, and stops with
// the answer when the store (shared with the node's checkpoints and other imports) has none.
TEST_F(CheckpointImageTest, AnImportAsksForRoomAsItWritesAndStopsWhenThereIsNone) {
  std::map<std::string, std::string> files = files_;
  files["checkpoint/pages-2.img"] = std::string(40u << 20, 'q');
  std::vector<Entry> e;
  for (const auto& [n, d] : files) e.push_back({n, d});
  e.push_back({"config.dump", R"({"rootfsImageName": "docker.io/cryo/busybox:e2e"})"});
  e.push_back({"cryo-manifest.json", CryoManifest(files)});
  std::vector<uint64_t> asked;
  room_ = [&](uint64_t written) {
    asked.push_back(written);
    if (asked.size() < 2) return absl::OkStatus();
    return absl::ResourceExhaustedError("no room left for the import (the test's store)");
  };
  auto u = Unpack(e);
  EXPECT_EQ(u.status().code(), absl::StatusCode::kResourceExhausted) << u.status();
  EXPECT_NE(u.status().message().find("no room left"), std::string::npos) << u.status();
  ASSERT_EQ(asked.size(), 2u);
  EXPECT_GE(asked[0], ImportLimits::kRoomEvery);
  EXPECT_GE(asked[1], 2 * ImportLimits::kRoomEvery);
  EXPECT_LT(fs::TreeBytes(dir_), 3 * ImportLimits::kRoomEvery) << "writing stopped when asked";

  // With room, the same image imports whole.
  asked.clear();
  room_ = [&](uint64_t written) {
    asked.push_back(written);
    return absl::OkStatus();
  };
  u = Unpack(e);
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(asked.size(), 2u) << "40 MiB crosses 16 MiB twice";
}

// Found in review: a layer that never ends ran until the caller's deadline, and SIGTERM did not
// stop it.
TEST_F(CheckpointImageTest, ALayerThatNeverEndsIsRefusedAndAStopEndsAnImport) {
  images_.endless = true;
  auto u = Unpack(Good());
  EXPECT_EQ(u.status().code(), absl::StatusCode::kDataLoss) << u.status();
  EXPECT_NE(u.status().message().find("past the end"), std::string::npos) << u.status();
  images_.endless = false;
  stop_ = [] { return true; };  // cryod's SIGTERM, or the caller's deadline
  u = Unpack(Good());
  EXPECT_EQ(u.status().code(), absl::StatusCode::kCancelled) << u.status();
}

TEST_F(CheckpointImageTest, ALinkInTheLayerIsRefusedAndNeverCreated) {
  std::vector<Entry> e = Good();
  e.insert(e.begin(), {"checkpoint/evil.img", "/etc/shadow", /*symlink=*/true});
  auto u = Unpack(e);
  ASSERT_FALSE(u.ok());
  EXPECT_EQ(u.status().code(), absl::StatusCode::kDataLoss) << u.status();
  EXPECT_THAT(u.status().message(), HasSubstr("not a regular file"));
  EXPECT_FALSE(fs::Exists(fs::Join(dir_, "images/evil.img")));
}

TEST(StorePathOfArchiveFile, MapsTheArchiveOntoTheStoreLayout) {
  EXPECT_EQ(StorePathOfArchiveFile("checkpoint/pages-1.img"), "images/pages-1.img");
  EXPECT_EQ(StorePathOfArchiveFile("rootfs-diff.tar"), "container/rootfs-diff.tar");
  EXPECT_EQ(StorePathOfArchiveFile("deleted.files"), "container/deleted.files");
  EXPECT_EQ(StorePathOfArchiveFile("config.dump"), "");
  EXPECT_EQ(StorePathOfArchiveFile("checkpoint/"), "");
  // cryo's other files (the GPU fast path's data), but never CRIU's images or the writable
  // layer by a second name.
  EXPECT_EQ(StorePathOfArchiveFile("cryo/gpu/fastpath-7.0.bin"), "gpu/fastpath-7.0.bin");
  EXPECT_EQ(StorePathOfArchiveFile("cryo/images/pages-1.img"), "");
  EXPECT_EQ(StorePathOfArchiveFile("cryo/container/rootfs-diff.tar"), "");
  EXPECT_EQ(StorePathOfArchiveFile("cryo/"), "");
  // The writer's half of the same mapping: every store path there and back.
  for (const char* p : {"images/pages-1.img", "container/rootfs-diff.tar",
                        "container/deleted.files", "gpu/fastpath-7.0.bin"}) {
    EXPECT_EQ(StorePathOfArchiveFile(ArchivePathOfStoreFile(p)), p);
  }
  EXPECT_EQ(ArchivePathOfStoreFile("gpu/fastpath-7.0.bin"), "cryo/gpu/fastpath-7.0.bin");
}

// A GPU job's checkpoint image: the fast path's data comes in at its place in the store.
TEST_F(CheckpointImageTest, TheGpuFastPathsDataComesWithTheImage) {
  std::map<std::string, std::string> files = files_;
  files["cryo/gpu/fastpath-7.0.bin"] = std::string(7000, 'g');
  std::vector<Entry> e;
  for (const auto& [n, d] : files) e.push_back({n, d});
  e.push_back({"config.dump", R"({"rootfsImageName": "docker.io/cryo/busybox:e2e"})"});
  e.push_back({"cryo-manifest.json", CryoManifest(files)});
  auto u = Unpack(e);
  ASSERT_TRUE(u.ok()) << u.status();
  auto gpu = fs::ReadFile(fs::Join(dir_, "gpu/fastpath-7.0.bin"));
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  EXPECT_EQ(*gpu, files.at("cryo/gpu/fastpath-7.0.bin"));
  bool listed = false;
  for (const auto& f : u->manifest.files) listed = listed || f.path == "gpu/fastpath-7.0.bin";
  EXPECT_TRUE(listed);
}

// kubelet's archive holds cryo's files whole: the chunks an incremental checkpoint left to an
// earlier one are read from that one's file at the same offsets.
TEST(WriteCheckpointArchive, WritesCryosFilesWholeReadingTheirHolesFromElsewhere) {
  TempDir tmp;
  const uint64_t chunk = 8192;
  // Chunk 1 of the file is a hole here; the earlier checkpoint's file holds it.
  std::string own(3 * chunk - 100, 'a');
  std::fill(own.begin() + chunk, own.begin() + 2 * chunk, '\0');
  std::string earlier(3 * chunk - 100, 'x');
  std::fill(earlier.begin() + chunk, earlier.begin() + 2 * chunk, 'b');
  ASSERT_TRUE(fs::WriteFileAtomic(fs::Join(tmp.path, "own.bin"), own).ok());
  ASSERT_TRUE(fs::WriteFileAtomic(fs::Join(tmp.path, "earlier.bin"), earlier).ok());
  ASSERT_TRUE(fs::MakeDirs(fs::Join(tmp.path, "images"), 0700).ok());
  ArchiveInput in;
  in.images_dir = fs::Join(tmp.path, "images");
  in.files.push_back({"cryo/gpu/fastpath-7.0.bin",
                      fs::Join(tmp.path, "own.bin"),
                      own.size(),
                      chunk,
                      {{1, fs::Join(tmp.path, "earlier.bin")}}});
  const std::string path = fs::Join(tmp.path, "out.tar");
  ASSERT_TRUE(WriteCheckpointArchive(in, path).ok());
  auto got = ReadArchiveFile(path, "cryo/gpu/fastpath-7.0.bin");
  ASSERT_TRUE(got.ok()) << got.status();
  std::string want(3 * chunk - 100, 'a');
  std::fill(want.begin() + chunk, want.begin() + 2 * chunk, 'b');
  EXPECT_EQ(*got, want);

  // A file shorter than the manifest says is an error, not a short archive.
  in.files[0].size = own.size() + 10;
  EXPECT_EQ(WriteCheckpointArchive(in, path).code(), absl::StatusCode::kDataLoss);
}

// What containerd holds for an image made by buildah and pushed to an OCI archive, and for a
// multi-platform index.
TEST(FillManifest, ReadsAnnotationsLayersAndConfigLabelsThroughAnIndex) {
  std::map<std::string, std::string> blobs = {
      {"sha256:idx",
       R"({"schemaVersion":2,"manifests":[
           {"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:other",
            "size":1,"platform":{"os":"linux","architecture":"s390x"}},
           {"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:man",
            "size":1,"platform":{"os":"linux","architecture":"amd64"}},
           {"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:arm",
            "size":1,"platform":{"os":"linux","architecture":"arm64"}}],
          "annotations":{"from.index":"1"}})"},
      {"sha256:man",
       R"({"schemaVersion":2,"config":{"mediaType":"application/vnd.oci.image.config.v1+json",
           "digest":"sha256:cfg","size":2},
          "layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip",
                     "digest":"sha256:l1","size":183}],
          "annotations":{"org.criu.checkpoint.container.name":"counter"}})"},
      {"sha256:cfg", R"({"config":{"Labels":{"io.buildah.version":"1.28.2"}}})"},
  };
  containerd::ImageManifest m;
  absl::Status st = containerd::FillManifest(
      {"application/vnd.oci.image.index.v1+json", "sha256:idx", 1},
      [&](const containerd::Blob& b) -> absl::StatusOr<std::string> {
        auto it = blobs.find(b.digest);
        if (it == blobs.end()) return absl::NotFoundError(b.digest);
        return it->second;
      },
      &m);
#if defined(__x86_64__)
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(m.manifest.digest, "sha256:man");
  EXPECT_EQ(m.annotations.at("from.index"), "1");
  EXPECT_EQ(m.annotations.at("org.criu.checkpoint.container.name"), "counter");
  EXPECT_EQ(m.config_labels.at("io.buildah.version"), "1.28.2");
  ASSERT_EQ(m.layers.size(), 1u);
  EXPECT_EQ(m.layers[0].digest, "sha256:l1");
#else
  (void)st;
#endif
}

// An image's blobs come from a registry: nesting past any real manifest is refused as damage,
// cheaply, never parsed.
TEST(FillManifest, ADeeplyNestedBlobIsDamageNotACrash) {
  const std::string deep = "{\"a\":" + std::string(200000, '[') + std::string(200000, ']') + "}";
  containerd::ImageManifest m;
  absl::Status st = containerd::FillManifest(
      {"application/vnd.oci.image.manifest.v1+json", "sha256:man", 1},
      [&](const containerd::Blob&) -> absl::StatusOr<std::string> { return deep; }, &m);
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
}

}  // namespace
}  // namespace cryo::container
