#include "daemon/api/http_api.h"

#include <sys/stat.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "daemon/api/checkpoint_json.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "test/daemon/http_test_util.h"

namespace cryo::api {
namespace {

using ::testing::HasSubstr;

v1::CheckpointInfo Info(const std::string& id, const std::string& created, uint64_t size) {
  v1::CheckpointInfo c;
  c.set_checkpoint_id(id);
  c.set_workload("ml.train.worker");
  c.set_node_name("node-a");
  c.set_created_at(created);
  c.set_root_pid(42);
  c.set_size_bytes(size);
  c.set_file_count(3);
  c.set_kind("container");
  (*c.mutable_labels())["io.kubernetes.pod.name"] = "train-0";
  (*c.mutable_stage_ms())["dump"] = 80;
  return c;
}

// Stands in for the engine: canned answers, and what it was asked.
struct FakeEngine {
  std::vector<v1::CheckpointInfo> stored;
  std::string manifest;  // served by Get instead of the minimal one when set
  absl::Status fail;
  std::vector<std::string> asked;

  std::function<void()> on_list;  // runs in each List (a test may block there)
  absl::Mutex asked_mu;           // listings may run at once
  absl::StatusOr<std::vector<v1::CheckpointInfo>> List(const std::string& workload) {
    if (on_list) on_list();
    absl::MutexLock l(&asked_mu);
    asked.push_back("list:" + workload);
    if (!fail.ok()) return fail;
    return stored;
  }
  absl::StatusOr<v1::CheckpointInfo> Get(const std::string& id) {
    asked.push_back("get:" + id);
    if (!fail.ok()) return fail;
    for (const auto& c : stored) {
      if (c.checkpoint_id() != id) continue;
      v1::CheckpointInfo full = c;
      auto* f = full.add_files();
      f->set_path("images/pages-1.img");
      f->set_size(4096);
      f->set_checksum("xxh64:00ff");
      full.set_manifest_json(!manifest.empty() ? manifest
                                               : R"({"format": "cryo.checkpoint/v1", "id": ")" +
                                                     id + R"(", "source": {"kernel": "6.18.0"}})");
      return full;
    }
    return absl::NotFoundError("checkpoint '" + id + "' not found");
  }
};

class HttpApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    engine_.stored = {Info("old-1", "2026-11-01T10:00:00Z", 1024),
                      Info("new-2", "2026-11-02T10:00:00Z", 2048)};
    metrics::HttpRoutes routes;
    AddCheckpointRoutes(ReaderOver(&ready_), routes, access_);
    auto s = metrics::HttpServer::Create("127.0.0.1:0", std::move(routes));
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(*s);
    ready_.store(&engine_);
  }

  // GET, checking the content type; returns the code and fills `json` with the parsed body.
  int Get(const std::string& target, nlohmann::json* json) {
    std::string r = HttpGet(server_->port(), target);
    EXPECT_EQ(HttpHeader(r, "Content-Type"), "application/json") << r;
    *json = nlohmann::json::parse(HttpBody(r), nullptr, false);
    EXPECT_FALSE(json->is_discarded()) << r;
    return HttpCode(r);
  }

  ApiAccess access_{"", /*open=*/true};  // as on a loopback address
  FakeEngine engine_;
  std::atomic<FakeEngine*> ready_{nullptr};
  std::unique_ptr<metrics::HttpServer> server_;
};

// Issue 34: the API lists every namespace's checkpoints (ids, pod names) to whoever reaches the
// pod network. With a token, only callers who show it are answered: by the Authorization header,
// or in a POST /v1/query body (the API server's proxy strips Authorization; kubectl create --raw
// sends a body).
class HttpApiTokenTest : public HttpApiTest {
 protected:
  void SetUp() override {
    access_ = {kToken, /*open=*/false};
    HttpApiTest::SetUp();
  }
  static constexpr char kToken[] = "0123456789abcdef-token";
  int Code(const std::string& response, nlohmann::json* j) {
    *j = nlohmann::json::parse(HttpBody(response), nullptr, false);
    return HttpCode(response);
  }
};

TEST_F(HttpApiTokenTest, OnlyCallersWithTheTokenAreAnswered) {
  nlohmann::json j;
  EXPECT_EQ(Code(HttpGet(server_->port(), "/v1/checkpoints"), &j), 401);
  EXPECT_EQ(j["error"]["code"], "UNAUTHENTICATED");
  EXPECT_THAT(j["error"]["message"].get<std::string>(), HasSubstr("/v1/query"));
  EXPECT_EQ(Code(HttpGet(server_->port(), "/v1/checkpoints/new-2",
                         "Authorization: Bearer 0123456789abcdef-tokex\r\n"),
                 &j),
            401);
  EXPECT_EQ(Code(HttpGet(server_->port(), "/v1/checkpoints/new-2",
                         "Authorization: Basic 0123456789abcdef-token\r\n"),
                 &j),
            401);
  EXPECT_TRUE(engine_.asked.empty()) << "the engine was asked for an unauthenticated caller";
  ASSERT_EQ(Code(HttpGet(server_->port(), "/v1/checkpoints/new-2",
                         std::string("Authorization: Bearer ") + kToken + "\r\n"),
                 &j),
            200);
  EXPECT_EQ(j["checkpoint_id"], "new-2");
}

TEST_F(HttpApiTokenTest, AQueryCarriesItsTokenInItsBody) {
  nlohmann::json j;
  const nlohmann::json q = {{"token", kToken}, {"get", "/v1/checkpoints?workload="}};
  ASSERT_EQ(Code(HttpPost(server_->port(), "/v1/query", q.dump()), &j), 200) << j;
  ASSERT_TRUE(j.is_array());
  EXPECT_EQ(j.size(), 2u);
  ASSERT_EQ(
      Code(HttpPost(server_->port(), "/v1/query",
                    nlohmann::json{{"token", kToken}, {"get", "/v1/checkpoints/old-1"}}.dump()),
           &j),
      200);
  EXPECT_EQ(j["checkpoint_id"], "old-1");
  // A wrong token, none, a path outside the API, a body that is not a query.
  EXPECT_EQ(Code(HttpPost(server_->port(), "/v1/query",
                          nlohmann::json{{"token", "x"}, {"get", "/v1/checkpoints"}}.dump()),
                 &j),
            401);
  EXPECT_EQ(Code(HttpPost(server_->port(), "/v1/query",
                          nlohmann::json{{"get", "/v1/checkpoints"}}.dump()),
                 &j),
            401);
  EXPECT_EQ(Code(HttpPost(server_->port(), "/v1/query",
                          nlohmann::json{{"token", kToken}, {"get", "/metrics"}}.dump()),
                 &j),
            400);
  EXPECT_EQ(Code(HttpPost(server_->port(), "/v1/query", "[1,2"), &j), 400);
  // A body beyond the bound is refused before it is read.
  EXPECT_EQ(HttpCode(HttpPost(server_->port(), "/v1/query", std::string(20000, ' '))), 413);
  // Only the query takes POST.
  EXPECT_EQ(HttpCode(HttpPost(server_->port(), "/v1/checkpoints", "{}")), 405);
}

// No token and not on loopback (the chart without its Secret): the API is off, the reason said.
TEST_F(HttpApiTokenTest, WithoutATokenBeyondLoopbackTheApiIsOff) {
  server_.reset();
  metrics::HttpRoutes routes;
  AddCheckpointRoutes(ReaderOver(&ready_), routes, ApiAccess{"", /*open=*/false});
  auto s = metrics::HttpServer::Create("127.0.0.1:0", std::move(routes));
  ASSERT_TRUE(s.ok()) << s.status();
  server_ = std::move(*s);
  nlohmann::json j;
  EXPECT_EQ(Code(HttpGet(server_->port(), "/v1/checkpoints"), &j), 403);
  EXPECT_THAT(j["error"]["message"].get<std::string>(), HasSubstr("http_api_token_file"));
  EXPECT_EQ(Code(HttpPost(server_->port(), "/v1/query",
                          nlohmann::json{{"token", ""}, {"get", "/v1/checkpoints"}}.dump()),
                 &j),
            403);
  EXPECT_TRUE(engine_.asked.empty());
}

TEST(HttpApiTokenFileTest, OnlyARegularFileWithALongEnoughTokenIsTaken) {
  char tmpl[] = "/tmp/cryo-token-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir + "/" + name) << text;
    return dir + "/" + name;
  };
  auto good = ReadApiToken(write("good", "  0123456789abcdef-token \nsecond line\n"));
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_EQ(*good, "0123456789abcdef-token");
  EXPECT_FALSE(ReadApiToken(write("short", "abc\n")).ok());
  EXPECT_FALSE(ReadApiToken(dir + "/missing").ok());
  ASSERT_EQ(::mkfifo((dir + "/fifo").c_str(), 0600), 0);
  auto fifo = ReadApiToken(dir + "/fifo");  // must not block
  EXPECT_FALSE(fifo.ok());
  EXPECT_THAT(std::string(fifo.status().message()), HasSubstr("not a regular file"));
  EXPECT_TRUE(metrics::IsLoopbackAddress("127.0.0.1:9464"));
  EXPECT_TRUE(metrics::IsLoopbackAddress("[::1]:9464"));
  EXPECT_FALSE(metrics::IsLoopbackAddress("0.0.0.0:9464"));
  EXPECT_FALSE(metrics::IsLoopbackAddress(":9464"));
  std::filesystem::remove_all(dir);
}

TEST_F(HttpApiTest, ListsNewestFirstAsTheCliPrintsThem) {
  nlohmann::json j;
  ASSERT_EQ(Get("/v1/checkpoints", &j), 200);
  ASSERT_TRUE(j.is_array());
  ASSERT_EQ(j.size(), 2u);
  EXPECT_EQ(j[0]["checkpoint_id"], "new-2");
  EXPECT_EQ(j[1]["checkpoint_id"], "old-1");
  // Each element is the CLI's JSON of the same CheckpointInfo (64-bit numbers as strings).
  EXPECT_EQ(j[0], nlohmann::json::parse(MessageToJson(engine_.stored[1])));
  EXPECT_EQ(j[0]["size_bytes"], "2048");
  EXPECT_EQ(j[0]["labels"]["io.kubernetes.pod.name"], "train-0");
  EXPECT_FALSE(j[0].contains("manifest"));
  EXPECT_EQ(engine_.asked, std::vector<std::string>{"list:"});
}

// A listing reads the whole store: at most kMaxConcurrentListings run at once, and one more is
// answered 503 at once instead of waiting its turn (issue 34: anonymous listing loops took
// cryod to gigabytes).
TEST_F(HttpApiTest, ListingsInFlightAreBoundedAndOneMoreIsRefusedAtOnce) {
  absl::Mutex mu;
  int inside = 0;
  bool release = false;
  engine_.on_list = [&] {
    absl::MutexLock l(&mu);
    ++inside;
    mu.Await(absl::Condition(&release));
  };
  std::vector<std::thread> held;
  std::vector<int> codes(kMaxConcurrentListings, 0);
  for (int i = 0; i < kMaxConcurrentListings; ++i) {
    held.emplace_back([&, i] { codes[i] = HttpCode(HttpGet(server_->port(), "/v1/checkpoints")); });
  }
  {
    absl::MutexLock l(&mu);
    mu.Await(absl::Condition(
        +[](int* n) { return *n == kMaxConcurrentListings; }, &inside));
  }
  nlohmann::json j;
  EXPECT_EQ(Get("/v1/checkpoints", &j), 503);
  EXPECT_EQ(j["error"]["code"], "UNAVAILABLE");
  EXPECT_EQ(Get("/v1/checkpoints/new-2", &j), 200) << "one checkpoint is not a listing";
  {
    absl::MutexLock l(&mu);
    release = true;
  }
  for (auto& t : held) t.join();
  for (int c : codes) EXPECT_EQ(c, 200);
  engine_.on_list = nullptr;
  EXPECT_EQ(Get("/v1/checkpoints", &j), 200) << "served again once they ended";
}

TEST_F(HttpApiTest, ListPassesTheWorkloadFilter) {
  nlohmann::json j;
  ASSERT_EQ(Get("/v1/checkpoints?workload=ml.train%2Bx.worker", &j), 200);
  EXPECT_EQ(engine_.asked, std::vector<std::string>{"list:ml.train+x.worker"});
}

TEST_F(HttpApiTest, GetHasFilesAndTheManifestAsAnObject) {
  nlohmann::json j;
  ASSERT_EQ(Get("/v1/checkpoints/old-1", &j), 200);
  EXPECT_EQ(j["checkpoint_id"], "old-1");
  ASSERT_EQ(j["files"].size(), 1u);
  EXPECT_EQ(j["files"][0]["path"], "images/pages-1.img");
  EXPECT_EQ(j["files"][0]["size"], "4096");
  EXPECT_EQ(j["manifest"]["source"]["kernel"], "6.18.0");
  EXPECT_FALSE(j.contains("manifest_json"));
  EXPECT_FALSE(j.contains("redacted")) << "nothing to withhold";
  EXPECT_EQ(engine_.asked, std::vector<std::string>{"get:old-1"});
}

TEST_F(HttpApiTest, GetWithholdsTheCommandLineAndContainerAnnotations) {
  // The shape store::ManifestToJson writes, with what a job's argv and a pod may carry.
  engine_.manifest = R"({"format": "cryo.checkpoint/v1", "id": "old-1",
    "target": {"root_pid": 1, "pids": [1, 7], "tids": [1, 7, 8], "command": "python3",
               "cmdline": ["python3", "train.py", "--hf-token=hf_SECRET123"]},
    "source": {"kernel": "6.18.0", "arch": "x86_64"},
    "container": {"id": "3f2a", "name": "worker", "image": "registry.local/train:1",
                  "labels": {"io.kubernetes.pod.name": "train-0"},
                  "annotations": {"io.kubernetes.container.preStopHandler":
                                  "{\"exec\":{\"command\":[\"curl\",\"-u\",\"admin:SECRET456\"]}}"}},
    "files": []})";
  std::string r = HttpGet(server_->port(), "/v1/checkpoints/old-1");
  ASSERT_EQ(HttpCode(r), 200) << r;
  const std::string body = HttpBody(r);
  EXPECT_EQ(body.find("SECRET123"), std::string::npos) << body;
  EXPECT_EQ(body.find("SECRET456"), std::string::npos) << body;
  nlohmann::json j = nlohmann::json::parse(body);
  EXPECT_EQ(j["manifest"]["target"]["command"], "python3") << "the command name stays";
  EXPECT_EQ(j["manifest"]["target"]["tids"], nlohmann::json({1, 7, 8}));
  EXPECT_FALSE(j["manifest"]["target"].contains("cmdline"));
  EXPECT_FALSE(j["manifest"]["container"].contains("annotations"));
  EXPECT_EQ(j["manifest"]["container"]["image"], "registry.local/train:1");
  EXPECT_EQ(j["redacted"],
            nlohmann::json({"/manifest/target/cmdline", "/manifest/container/annotations"}));
}

TEST_F(HttpApiTest, ProcessModeManifestHasOnlyTheCommandLineWithheld) {
  engine_.manifest = R"({"format": "cryo.checkpoint/v1", "id": "old-1",
    "target": {"root_pid": 42, "command": "sleep", "cmdline": ["sleep", "1000"]},
    "container": null})";
  nlohmann::json j;
  ASSERT_EQ(Get("/v1/checkpoints/old-1", &j), 200);
  EXPECT_EQ(j["manifest"]["target"], nlohmann::json({{"root_pid", 42}, {"command", "sleep"}}));
  EXPECT_TRUE(j["manifest"]["container"].is_null());
  EXPECT_EQ(j["redacted"], nlohmann::json({"/manifest/target/cmdline"}));
}

TEST_F(HttpApiTest, UnknownIdIsA404JsonError) {
  nlohmann::json j;
  ASSERT_EQ(Get("/v1/checkpoints/nope", &j), 404);
  EXPECT_EQ(j["error"]["code"], "NOT_FOUND");
  EXPECT_EQ(j["error"]["message"], "checkpoint 'nope' not found");
}

TEST_F(HttpApiTest, UnsafeIdsAreRefusedBeforeTheEngine) {
  nlohmann::json j;
  for (const char* target : {"/v1/checkpoints/..", "/v1/checkpoints/a%2F..%2F..%2Fetc",
                             "/v1/checkpoints/a/b", "/v1/checkpoints/-rf"}) {
    ASSERT_EQ(Get(target, &j), 400) << target;
    EXPECT_EQ(j["error"]["code"], "INVALID_ARGUMENT") << target;
  }
  EXPECT_TRUE(engine_.asked.empty());
}

// Found by the fuzzer (fuzz.http, 2026-11-25): an id starting with '.' and holding bytes that
// are not UTF-8 was quoted raw into the error message, and writing that JSON threw: one
// unauthenticated GET ended cryod (std::terminate). Now it is a 400 with valid JSON.
TEST_F(HttpApiTest, AnIdThatIsNotUtf8IsA400WithValidJson) {
  nlohmann::json j;
  for (const char* target :
       {"/v1/checkpoints/.%FFn", "/v1/checkpoints/-%C3%28", "/v1/checkpoints/a%FF"}) {
    ASSERT_EQ(Get(target, &j), 400) << target;
    EXPECT_EQ(j["error"]["code"], "INVALID_ARGUMENT") << target;
  }
  EXPECT_TRUE(engine_.asked.empty());
}

TEST_F(HttpApiTest, EngineErrorsMapToHttpCodes) {
  engine_.fail = absl::InternalError("store unreadable");
  nlohmann::json j;
  ASSERT_EQ(Get("/v1/checkpoints", &j), 500);
  EXPECT_EQ(j["error"]["code"], "INTERNAL");
  EXPECT_EQ(j["error"]["message"], "store unreadable");
}

TEST_F(HttpApiTest, UnavailableUntilTheEngineExists) {
  ready_.store(nullptr);
  nlohmann::json j;
  ASSERT_EQ(Get("/v1/checkpoints", &j), 503);
  EXPECT_EQ(j["error"]["code"], "UNAVAILABLE");
  ASSERT_EQ(Get("/v1/checkpoints/old-1", &j), 503);
  EXPECT_TRUE(engine_.asked.empty());
  ready_.store(&engine_);
  ASSERT_EQ(Get("/v1/checkpoints/old-1", &j), 200);
}

TEST(CheckpointJsonTest, WithholdsAManifestItCannotRedact) {
  v1::CheckpointInfo c;
  c.set_checkpoint_id("x");
  c.set_command("python3");
  c.set_manifest_json(R"({"target": {"cmdline": ["python3", "--password=SECRET"]} broken)");
  nlohmann::json j = CheckpointToJson(c);
  EXPECT_FALSE(j.contains("manifest_json"));
  EXPECT_FALSE(j.contains("manifest"));
  EXPECT_EQ(j.dump().find("SECRET"), std::string::npos) << j.dump();
  EXPECT_EQ(j["redacted"], nlohmann::json({"/manifest_json"}));
  EXPECT_EQ(j["command"], "python3");
}

TEST(CheckpointJsonTest, ListEntriesWithoutAManifestAreUnchanged) {
  v1::CheckpointInfo c;
  c.set_checkpoint_id("x");
  c.set_command("python3");
  EXPECT_EQ(CheckpointToJson(c), nlohmann::json::parse(MessageToJson(c)));
}

// Every field with its proto name, zero values included (issue 38: a reader found
// "leave_running" missing for false and `cryo -o json list` of nothing printing {}).
TEST(CheckpointJsonTest, MessageToJsonUsesProtoFieldNamesAndPrintsZeroValues) {
  v1::CheckpointInfo c;
  c.set_checkpoint_id("x");
  c.set_root_pid(7);
  const nlohmann::json j = nlohmann::json::parse(MessageToJson(c, false));
  EXPECT_EQ(j["checkpoint_id"], "x");
  EXPECT_EQ(j["root_pid"], 7);
  EXPECT_EQ(j["leave_running"], false);
  EXPECT_EQ(j["workload"], "");
  EXPECT_EQ(j["pids"], nlohmann::json::array());
  EXPECT_FALSE(j.contains("checkpointId"));
  v1::ListCheckpointsResponse none;
  EXPECT_EQ(nlohmann::json::parse(MessageToJson(none, false))["checkpoints"],
            nlohmann::json::array());
  EXPECT_EQ(ErrorJson("NOT_FOUND", "m"),
            nlohmann::json({{"error", {{"code", "NOT_FOUND"}, {"message", "m"}}}}));
}

}  // namespace
}  // namespace cryo::api
