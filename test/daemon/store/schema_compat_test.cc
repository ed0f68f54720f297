// What cryo wrote before its formats were described by one table each (issue 35, must 4) still
// reads, and writes back byte for byte: a container job member's manifest written by a real
// kubelet run on 2026-11-29 (signed), a manifest with every section the process and GPU paths
// fill, and a journal entry of a fast-path checkpoint, the last two written by main at edc22ae.
#include "daemon/journal/journal.h"
#include "daemon/store/manifest.h"
#include "gtest/gtest.h"
#include "lib/base/fs.h"

namespace cryo {
namespace {

std::string Fixture(const std::string& name) {
  auto text = fs::ReadFile(std::string(CRYO_SOURCE_DIR "/test/daemon/testdata/") + name);
  EXPECT_TRUE(text.ok()) << name << ": " << text.status();
  return text.ok() ? *text : "";
}

// Every field a checkpoint of the fast path fills that the kubelet run's manifest lacks.
store::Manifest ProcessManifestWithEverything() {
  store::Manifest m;
  m.id = "train-2";
  m.workload = "train";
  m.node = "gpu-node-a";
  m.created_at = "2026-11-30T01:00:00Z";
  m.root_pid = 4242;
  m.pids = {4242, 4243};
  m.tids = {4242, 4243, 4250};
  m.command = "python3";
  m.cmdline = {"python3", "train.py", "--steps", "1000"};
  m.kernel = "6.18.44";
  m.arch = "x86_64";
  m.criu_version = "4.1.1";
  m.cryo_version = "0.1.0";
  m.leave_running = true;
  m.options.tcp_established = true;
  m.options.ghost_limit = 1 << 20;
  m.labels = {{"team", "vision"}};
  m.stage_ms = {{"dump", 812}, {"gpu_drain", 120}};
  m.checksum_algorithm = "xxh3-128-chunked";
  m.files.push_back({"images/core-4242.img", 2411, "964ecdb5abe89ef782e75d168fa4baee"});
  store::ManifestFile g{"gpu/fastpath-4242.0.bin", 3 * (64ull << 20),
                        "17007fb6eb11139ff6c940810dfd8977"};
  g.chunks = {"00000000000000000000000000000001", "00000000000000000000000000000002",
              "00000000000000000000000000000003"};
  g.refs = {{"train-1", {0, 2}}};
  m.files.push_back(g);
  m.gpu = {{"cuda", {{"driver_version", "580.159.04"}, {"plugin_version", "1"}}}};
  gpu::GpuProcess p;
  p.pid = 4243;
  p.plugin = "cuda";
  p.facts = {{"devices", {{{"uuid", "GPU-1"}, {"memory_used_bytes", 1234}}}}};
  m.gpu_processes = {p};
  gpu::FastpathProcess f;
  f.pid = 4243;
  f.ns_pid = 4243;
  f.files = 1;
  f.bytes = 3 * (64ull << 20);
  f.allocations = 7;
  f.driver_bytes = 512 << 20;
  f.imports = {{9, 4242, 3}};
  m.gpu_fastpath = {f};
  m.signature = "hmac-sha256:00";
  return m;
}

journal::Entry FastpathCheckpointEntry() {
  journal::Entry e;
  e.op_id = "ckpt-20261130-010000-1";
  e.kind = journal::OpKind::kCheckpoint;
  e.checkpoint_id = "train-2";
  e.state = journal::OpState::kDumping;
  e.steps = {"stage", "gpu_drain", "gpu_lock", "dump"};
  e.tasks = {{4242, 123456, false}, {4243, 123457, true}};
  e.criu_pid = 5000;
  e.criu_start_time = 123999;
  e.staging_dir = "/var/lib/cryo/store/.staging/train-2";
  e.leave_running = true;
  e.tcp_established = true;
  gpu::GpuProcess p;
  p.pid = 4243;
  p.plugin = "cuda";
  e.gpu = {p};
  gpu::FastpathProcess f;
  f.pid = 4243;
  f.ns_pid = 1;
  f.memory = true;
  f.bytes = 1 << 30;
  e.fastpath = {f};
  e.container_init_pid = 4100;
  e.started_at = "2026-11-30T01:00:00Z";
  e.boot_id = "b0d1e2f3";
  return e;
}

TEST(SchemaCompat, AKubeletRunsSignedContainerManifestReadsAndWritesBackTheSame) {
  const std::string text = Fixture("manifest-container-job-2026-11-29.json");
  auto m = store::ParseManifest(text);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->kind, store::CheckpointKind::kContainer);
  ASSERT_TRUE(m->container.has_value());
  ASSERT_TRUE(m->job.has_value());
  EXPECT_EQ(m->job->job, "sums");
  EXPECT_EQ(m->job->pod_ips, std::vector<std::string>{"10.89.0.2"});
  EXPECT_TRUE(m->credentials.has_value());
  EXPECT_FALSE(m->signature.empty());
  EXPECT_FALSE(m->files.empty());
  // Written back, it is the text that was signed: not a key more or less, not a value changed.
  EXPECT_EQ(store::ManifestToJson(*m), text);
}

TEST(SchemaCompat, AManifestWithEverySectionOfTheFastPathReadsAndWritesBackTheSame) {
  const std::string text = Fixture("manifest-fastpath-2026-11-30.json");
  auto m = store::ParseManifest(text);
  ASSERT_TRUE(m.ok()) << m.status();
  const store::Manifest want = ProcessManifestWithEverything();
  EXPECT_EQ(m->cmdline, want.cmdline);
  EXPECT_EQ(m->options.ghost_limit, want.options.ghost_limit);
  ASSERT_EQ(m->files.size(), 2u);
  EXPECT_EQ(m->files[1].chunks, want.files[1].chunks);
  EXPECT_EQ(m->files[1].refs, want.files[1].refs);
  ASSERT_EQ(m->gpu_fastpath.size(), 1u);
  EXPECT_EQ(m->gpu_fastpath[0].imports.size(), 1u);
  EXPECT_EQ(m->gpu_fastpath[0].driver_bytes, want.gpu_fastpath[0].driver_bytes);
  EXPECT_EQ(m->gpu_processes[0].facts, want.gpu_processes[0].facts);
  EXPECT_EQ(store::ManifestToJson(*m), text);
  EXPECT_EQ(store::ManifestToJson(want), text) << "today's writer writes what was written";
}

TEST(SchemaCompat, AFastPathCheckpointsJournalEntryReadsAndWritesBackTheSame) {
  const std::string text = Fixture("journal-entry-fastpath-2026-11-30.json");
  auto e = journal::ParseEntry(text);
  ASSERT_TRUE(e.ok()) << e.status();
  const journal::Entry want = FastpathCheckpointEntry();
  EXPECT_EQ(e->steps, want.steps);
  ASSERT_EQ(e->tasks.size(), 2u);
  EXPECT_TRUE(e->tasks[1].was_stopped);
  ASSERT_EQ(e->fastpath.size(), 1u);
  EXPECT_TRUE(e->fastpath[0].memory);
  EXPECT_EQ(e->gpu[0].plugin, "cuda");
  EXPECT_EQ(e->container_init_pid, 4100);
  EXPECT_EQ(journal::EntryToJson(*e).dump(2) + "\n", text);
}

// The tables' enum fields: a name out of the list is refused naming what was read; a manifest
// without "kind" is a process checkpoint, as before the tables.
TEST(SchemaCompat, AnEnumOutsideItsNamesIsRefusedNamingItAndAnAbsentKindIsAProcess) {
  nlohmann::json m = nlohmann::json::parse(Fixture("manifest-fastpath-2026-11-30.json"));
  m["kind"] = "vm";
  auto bad = store::ParseManifest(m.dump());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("unknown checkpoint kind 'vm'"), std::string::npos)
      << bad.status();
  m.erase("kind");
  auto absent = store::ParseManifest(m.dump());
  ASSERT_TRUE(absent.ok()) << absent.status();
  EXPECT_EQ(absent->kind, store::CheckpointKind::kProcess);

  nlohmann::json e = nlohmann::json::parse(Fixture("journal-entry-fastpath-2026-11-30.json"));
  e["kind"] = "migrate";
  auto entry = journal::ParseEntry(e.dump());
  ASSERT_FALSE(entry.ok());
  EXPECT_EQ(entry.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(entry.status().message().find("unknown kind 'migrate'"), std::string::npos)
      << entry.status();
  e["kind"] = "checkpoint";
  e.erase("state");
  EXPECT_FALSE(journal::ParseEntry(e.dump()).ok()) << "a journal entry's state is required";
}

// The GPU process records are read by their tables too: what names a file or a process out of
// range is refused, naming the record.
TEST(SchemaCompat, GpuProcessRecordsOutOfRangeAreRefusedNamingTheRecord) {
  const nlohmann::json m = nlohmann::json::parse(Fixture("manifest-fastpath-2026-11-30.json"));
  auto refused = [&](const char* section, const char* key, nlohmann::json v, const char* says) {
    nlohmann::json c = m;
    c[section][0][key] = std::move(v);
    auto got = store::ParseManifest(c.dump());
    ASSERT_FALSE(got.ok()) << section << "." << key;
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(got.status().message().find(says), std::string::npos) << got.status();
  };
  refused("gpu_fastpath", "files", 65, "gpu_fastpath[0]: pid, ns_pid or files out of range");
  refused("gpu_fastpath", "ns_pid", 0, "gpu_fastpath[0]: pid, ns_pid or files out of range");
  refused("gpu_fastpath", "imports",
          nlohmann::json::array({{{"id", 1}, {"from", 0}, {"export", 2}}}),
          "imports[0]: from out of range");
  refused("gpu_fastpath", "imports", nlohmann::json::array({{{"id", 1}, {"from", 3}}}),
          "imports[0].export' is missing");
  refused("gpu_processes", "plugin", "", "gpu_processes[0] has no pid or plugin");
  refused("gpu_processes", "facts", "none", "gpu_processes[0].facts is not an object");
}

}  // namespace
}  // namespace cryo
