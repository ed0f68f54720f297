#pragma once

// Mutual TLS between the nodes' cryods (the Peer service, job checkpoints across nodes): every
// cryod holds the one certificate the chart makes for them all, signed by the chart's CA, and
// shows it both as server and as client; a peer that cannot show one signed by that CA is cut
// off in the handshake, before the nodes' token is even read.

#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/support/channel_arguments.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace cryo::service {

// The name in the certificate (its subjectAltName) every cryod checks of the other: peers are
// dialled by pod IP, which no certificate made once for all nodes can name.
inline constexpr char kPeerTlsName[] = "cryo-peer";

struct PeerTls {
  std::string ca;    // ca.crt: the CA that signed every node's certificate (PEM)
  std::string cert;  // tls.crt
  std::string key;   // tls.key
};

// ca.crt, tls.crt and tls.key of `dir` (a kubernetes.io/tls Secret with its ca.crt): each a
// regular file of PEM under 64 KiB. INVALID_ARGUMENT or NOT_FOUND naming the file otherwise.
absl::StatusOr<PeerTls> ReadPeerTls(const std::string& dir);

// Null `tls`: plaintext (the nodes' token alone).
std::shared_ptr<grpc::ServerCredentials> PeerServerCredentials(const PeerTls* tls);
std::shared_ptr<grpc::ChannelCredentials> PeerChannelCredentials(const PeerTls* tls);
// With `tls`: the name the server's certificate must carry (kPeerTlsName).
void SetPeerTlsTarget(const PeerTls* tls, grpc::ChannelArguments* args);

}  // namespace cryo::service
