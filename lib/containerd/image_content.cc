#include "lib/containerd/image_content.h"

#include <grpcpp/grpcpp.h>
#include <sys/utsname.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "containerd/v1/content.grpc.pb.h"
#include "containerd/v1/images.grpc.pb.h"
#include "lib/base/grpc_status.h"
#include "lib/base/json.h"
#include "lib/base/status.h"
#include "nlohmann/json.hpp"

namespace cryo::containerd {
namespace {

namespace images = ::containerd::services::images::v1;
namespace content = ::containerd::services::content::v1;

// Manifests, indexes and configs are small; anything bigger is not one.
constexpr int64_t kMaxJsonBlob = 4 << 20;

bool IsIndex(absl::string_view media_type) {
  return media_type == "application/vnd.oci.image.index.v1+json" ||
         media_type == "application/vnd.docker.distribution.manifest.list.v2+json";
}

std::string HostArch() {
  struct utsname u;
  if (::uname(&u) != 0) return "";
  absl::string_view m = u.machine;
  if (m == "x86_64") return "amd64";
  if (m == "aarch64") return "arm64";
  return std::string(m);
}

Blob BlobOf(const nlohmann::json& d) {
  Blob b;
  if (!d.is_object()) return b;
  if (d.contains("mediaType") && d["mediaType"].is_string()) b.media_type = d["mediaType"];
  if (d.contains("digest") && d["digest"].is_string()) b.digest = d["digest"];
  if (d.contains("size") && d["size"].is_number_integer()) b.size = d["size"].get<int64_t>();
  return b;
}

void AddStrings(const nlohmann::json& obj, std::map<std::string, std::string>* out) {
  if (!obj.is_object()) return;
  for (const auto& [k, v] : obj.items()) {
    if (v.is_string()) (*out)[k] = v.get<std::string>();
  }
}

// Manifests, indexes and configs are small; a blob past these is not one.
constexpr json::Limits kBlobLimits{4u << 20, 64};

absl::StatusOr<nlohmann::json> ParseJson(const std::string& data, const Blob& b) {
  auto parsed = json::Parse(data, kBlobLimits);
  nlohmann::json j = parsed.ok() ? std::move(*parsed) : nlohmann::json();
  if (!j.is_object()) {
    return absl::DataLossError(
        absl::StrCat("blob ", b.digest, " (", b.media_type, ") is not a JSON object"));
  }
  return j;
}

class ContainerdImages final : public ImageContent {
 public:
  ContainerdImages(std::shared_ptr<grpc::Channel> channel, std::string ns)
      : ns_(std::move(ns)),
        images_(images::Images::NewStub(channel)),
        content_(content::Content::NewStub(channel)) {}

  absl::StatusOr<ImageManifest> Manifest(const std::vector<std::string>& names,
                                         absl::Time deadline) override {
    absl::Status last = absl::NotFoundError("no image name given");
    for (const std::string& name : names) {
      if (name.empty()) continue;
      grpc::ClientContext ctx;
      Prepare(ctx, deadline);
      images::GetImageRequest req;
      req.set_name(name);
      images::GetImageResponse resp;
      grpc::Status s = images_->Get(&ctx, req, &resp);
      if (s.error_code() == grpc::StatusCode::NOT_FOUND) {
        last = absl::NotFoundError(absl::StrCat("containerd has no image named ", name));
        continue;
      }
      if (!s.ok()) {
        return Annotate(FromGrpc(s), absl::StrCat("containerd image service, image ", name));
      }
      ImageManifest m;
      m.name = resp.image().name();
      const auto& t = resp.image().target();
      Blob target{t.media_type(), t.digest(), t.size()};
      for (const auto& [k, v] : t.annotations()) m.annotations[k] = v;
      CRYO_RETURN_IF_ERROR(FillManifest(
          target, [&](const Blob& b) { return ReadSmall(b, deadline); }, &m));
      return m;
    }
    return last;
  }

  absl::Status ReadBlob(const Blob& blob, absl::Time deadline,
                        const std::function<absl::Status(absl::string_view)>& sink) override {
    grpc::ClientContext ctx;
    Prepare(ctx, deadline);
    content::ReadContentRequest req;
    req.set_digest(blob.digest);
    auto stream = content_->Read(&ctx, req);
    content::ReadContentResponse chunk;
    absl::Status sink_status;
    while (stream->Read(&chunk)) {
      sink_status = sink(chunk.data());
      if (!sink_status.ok()) {
        ctx.TryCancel();
        break;
      }
    }
    grpc::Status s = stream->Finish();
    if (!sink_status.ok()) return sink_status;
    if (!s.ok()) {
      return Annotate(FromGrpc(s), absl::StrCat("reading blob ", blob.digest, " from containerd"));
    }
    return absl::OkStatus();
  }

 private:
  void Prepare(grpc::ClientContext& ctx, absl::Time deadline) {
    ctx.set_deadline(absl::ToChronoTime(deadline));
    ctx.AddMetadata("containerd-namespace", ns_);
  }

  absl::StatusOr<std::string> ReadSmall(const Blob& b, absl::Time deadline) {
    if (b.size > kMaxJsonBlob) {
      return absl::DataLossError(
          absl::StrCat("blob ", b.digest, " of ", b.size, " bytes is too large for a manifest"));
    }
    std::string out;
    CRYO_RETURN_IF_ERROR(ReadBlob(b, deadline, [&](absl::string_view d) {
      if (static_cast<int64_t>(out.size() + d.size()) > kMaxJsonBlob) {
        return absl::DataLossError(absl::StrCat("blob ", b.digest, " is too large"));
      }
      out.append(d.data(), d.size());
      return absl::OkStatus();
    }));
    return out;
  }

  std::string ns_;
  std::unique_ptr<images::Images::Stub> images_;
  std::unique_ptr<content::Content::Stub> content_;
};

}  // namespace

absl::Status FillManifest(const Blob& target,
                          const std::function<absl::StatusOr<std::string>(const Blob&)>& read,
                          ImageManifest* m) {
  Blob manifest = target;
  CRYO_ASSIGN_OR_RETURN(std::string data, read(target));
  CRYO_ASSIGN_OR_RETURN(nlohmann::json j, ParseJson(data, target));
  // An index says so by its media type, or (OCI layouts without one) by its manifests list.
  if (IsIndex(target.media_type) || IsIndex(j.value("mediaType", "")) ||
      (j.contains("manifests") && !j.contains("layers"))) {
    AddStrings(j.value("annotations", nlohmann::json()), &m->annotations);
    const nlohmann::json list = j.value("manifests", nlohmann::json::array());
    if (!list.is_array() || list.empty()) {
      return absl::DataLossError(absl::StrCat("index ", target.digest, " lists no manifest"));
    }
    const std::string arch = HostArch();
    nlohmann::json pick = list.size() == 1 ? list[0] : nlohmann::json();
    for (const auto& d : list) {
      if (!pick.is_null()) break;
      const nlohmann::json p = d.is_object() ? d.value("platform", nlohmann::json()) : nullptr;
      if (p.is_object() && p.value("os", "") == "linux" && p.value("architecture", "") == arch) {
        pick = d;
      }
    }
    if (pick.is_null()) {
      return absl::NotFoundError(
          absl::StrCat("index ", target.digest, " has no manifest for linux/", arch));
    }
    AddStrings(pick.value("annotations", nlohmann::json()), &m->annotations);
    manifest = BlobOf(pick);
    CRYO_ASSIGN_OR_RETURN(data, read(manifest));
    CRYO_ASSIGN_OR_RETURN(j, ParseJson(data, manifest));
  }
  if (!j.contains("layers") || !j["layers"].is_array()) {
    return absl::DataLossError(
        absl::StrCat("blob ", manifest.digest, " is not an image manifest (no layers)"));
  }
  m->manifest = manifest;
  AddStrings(j.value("annotations", nlohmann::json()), &m->annotations);
  for (const auto& l : j["layers"]) {
    Blob b = BlobOf(l);
    if (b.digest.empty()) {
      return absl::DataLossError(
          absl::StrCat("manifest ", manifest.digest, " has a layer without digest"));
    }
    m->layers.push_back(std::move(b));
  }
  Blob config = BlobOf(j.value("config", nlohmann::json()));
  if (!config.digest.empty()) {
    CRYO_ASSIGN_OR_RETURN(std::string cdata, read(config));
    auto parsed = json::Parse(cdata, kBlobLimits);
    nlohmann::json c = parsed.ok() ? std::move(*parsed) : nlohmann::json();
    if (c.is_object() && c.contains("config") && c["config"].is_object()) {
      AddStrings(c["config"].value("Labels", nlohmann::json()), &m->config_labels);
    }
  }
  return absl::OkStatus();
}

std::unique_ptr<ImageContent> NewImageContent(std::shared_ptr<grpc::Channel> channel,
                                              std::string ns) {
  return std::make_unique<ContainerdImages>(std::move(channel), std::move(ns));
}

absl::StatusOr<std::unique_ptr<ImageContent>> ConnectImageContent(absl::string_view endpoint,
                                                                  std::string ns) {
  absl::string_view path = endpoint;
  if (!absl::ConsumePrefix(&path, "unix://")) absl::ConsumePrefix(&path, "unix:");
  if (path.empty() || path[0] != '/') {
    return absl::InvalidArgumentError(
        absl::StrCat("runtime endpoint '", endpoint, "' is not a unix socket"));
  }
  return NewImageContent(
      grpc::CreateChannel(absl::StrCat("unix://", path), grpc::InsecureChannelCredentials()),
      std::move(ns));
}

}  // namespace cryo::containerd
