#include "daemon/service/peer_tls.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "lib/base/fs.h"
#include "lib/base/status.h"

namespace cryo::service {
namespace {

constexpr uint64_t kMaxPemBytes = 64 << 10;

absl::StatusOr<std::string> ReadPem(const std::string& dir, const char* name) {
  const std::string path = fs::Join(dir, name);
  auto text = fs::ReadRegularFile(path, "the peer TLS file", kMaxPemBytes);
  if (!text.ok()) return text.status();
  if (!absl::StrContains(*text, "-----BEGIN ")) {
    return absl::InvalidArgumentError(absl::StrCat("the peer TLS file ", path, " holds no PEM"));
  }
  return text;
}

}  // namespace

absl::StatusOr<PeerTls> ReadPeerTls(const std::string& dir) {
  PeerTls t;
  CRYO_ASSIGN_OR_RETURN(t.ca, ReadPem(dir, "ca.crt"));
  CRYO_ASSIGN_OR_RETURN(t.cert, ReadPem(dir, "tls.crt"));
  CRYO_ASSIGN_OR_RETURN(t.key, ReadPem(dir, "tls.key"));
  return t;
}

std::shared_ptr<grpc::ServerCredentials> PeerServerCredentials(const PeerTls* tls) {
  if (tls == nullptr) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions o(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  o.pem_root_certs = tls->ca;
  o.pem_key_cert_pairs.push_back({tls->key, tls->cert});
  return grpc::SslServerCredentials(o);
}

std::shared_ptr<grpc::ChannelCredentials> PeerChannelCredentials(const PeerTls* tls) {
  if (tls == nullptr) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions o;
  o.pem_root_certs = tls->ca;
  o.pem_private_key = tls->key;
  o.pem_cert_chain = tls->cert;
  return grpc::SslCredentials(o);
}

void SetPeerTlsTarget(const PeerTls* tls, grpc::ChannelArguments* args) {
  if (tls != nullptr) args->SetSslTargetNameOverride(kPeerTlsName);
}

}  // namespace cryo::service
