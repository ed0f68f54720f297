#include "test/clients/kubectl/fake_apiserver.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace cryo::kubectl::testing {
namespace {

std::string Decode(absl::string_view in) {
  std::string out;
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] == '+') {
      out.push_back(' ');
    } else if (in[i] == '%' && i + 2 < in.size()) {
      int v = 0;
      if (absl::SimpleHexAtoi(in.substr(i + 1, 2), &v)) {
        out.push_back(static_cast<char>(v));
        i += 2;
      } else {
        out.push_back('%');
      }
    } else {
      out.push_back(in[i]);
    }
  }
  return out;
}

bool IsDiscovery(const std::string& path) {
  if (path == "/version" || path == "/api" || path == "/apis" || path == "/api/v1") return true;
  if (absl::StartsWith(path, "/openapi/")) return true;
  // /apis/GROUP/VERSION and nothing below it.
  std::vector<absl::string_view> parts = absl::StrSplit(path, '/', absl::SkipEmpty());
  return parts.size() == 3 && parts[0] == "apis";
}

// A connection, plain or TLS.
struct Conn {
  int fd;
  SSL* ssl;

  ssize_t Read(char* buf, size_t n) {
    if (ssl != nullptr) return SSL_read(ssl, buf, static_cast<int>(n));
    return ::recv(fd, buf, n, 0);
  }
  ssize_t Write(const char* buf, size_t n) {
    if (ssl != nullptr) return SSL_write(ssl, buf, static_cast<int>(n));
    return ::send(fd, buf, n, MSG_NOSIGNAL);
  }
};

// Reads from `conn` until `pred(buffer)` holds or the peer stops; false on EOF/timeout first.
template <typename Pred>
bool ReadUntil(Conn& conn, std::string* buf, Pred pred) {
  char tmp[8192];
  while (!pred(*buf)) {
    ssize_t n = conn.Read(tmp, sizeof(tmp));
    if (n < 0 && errno == EINTR && conn.ssl == nullptr) continue;
    if (n <= 0) return false;
    buf->append(tmp, n);
  }
  return true;
}

// A TLS context with a fresh self-signed certificate (P-256) for 127.0.0.1 and localhost;
// null on any failure. `pem` receives the certificate.
SSL_CTX* MakeTlsContext(std::string* pem) {
  EVP_PKEY* key = EVP_EC_gen("P-256");
  X509* cert = X509_new();
  SSL_CTX* ctx = nullptr;
  if (key != nullptr && cert != nullptr) {
    X509_set_version(cert, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(cert), 1);
    X509_gmtime_adj(X509_getm_notBefore(cert), -3600);
    X509_gmtime_adj(X509_getm_notAfter(cert), 24 * 3600);
    X509_set_pubkey(cert, key);
    X509_NAME* name = X509_get_subject_name(cert);
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                               reinterpret_cast<const unsigned char*>("fake-apiserver"), -1, -1, 0);
    X509_set_issuer_name(cert, name);
    X509V3_CTX v3;
    X509V3_set_ctx_nodb(&v3);
    X509V3_set_ctx(&v3, cert, cert, nullptr, nullptr, 0);
    for (auto [nid, value] : {std::pair{NID_subject_alt_name, "IP:127.0.0.1,DNS:localhost"},
                              std::pair{NID_basic_constraints, "critical,CA:TRUE"}}) {
      if (X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &v3, nid, value)) {
        X509_add_ext(cert, ext, -1);
        X509_EXTENSION_free(ext);
      }
    }
    if (X509_sign(cert, key, EVP_sha256()) > 0) {
      ctx = SSL_CTX_new(TLS_server_method());
      if (ctx != nullptr &&
          (SSL_CTX_use_certificate(ctx, cert) != 1 || SSL_CTX_use_PrivateKey(ctx, key) != 1)) {
        SSL_CTX_free(ctx);
        ctx = nullptr;
      }
      BIO* bio = BIO_new(BIO_s_mem());
      PEM_write_bio_X509(bio, cert);
      char* data = nullptr;
      long len = BIO_get_mem_data(bio, &data);
      pem->assign(data, len);
      BIO_free(bio);
    }
  }
  X509_free(cert);
  EVP_PKEY_free(key);
  return ctx;
}

}  // namespace

std::string Request::Param(const std::string& k) const {
  auto it = params.find(k);
  return it == params.end() ? "" : it->second;
}

nlohmann::json Request::Json() const {
  nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
  return j.is_discarded() ? nlohmann::json() : j;
}

nlohmann::json StatusJson(int code, const std::string& reason, const std::string& message) {
  return {{"kind", "Status"},    {"apiVersion", "v1"}, {"metadata", nlohmann::json::object()},
          {"status", "Failure"}, {"message", message}, {"reason", reason},
          {"code", code}};
}

Response JsonResponse(const nlohmann::json& j, int code) { return {code, j.dump()}; }

FakeApiServer::FakeApiServer(bool tls) : tls_(tls) {
  if (tls_) {
    ssl_ctx_ = MakeTlsContext(&cert_pem_);
    if (ssl_ctx_ == nullptr) return;
  }
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      ::listen(fd, 64) != 0 || ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0 ||
      ::pipe2(wake_, O_CLOEXEC) != 0) {
    if (fd >= 0) ::close(fd);
    return;
  }
  fd_ = fd;
  port_ = ntohs(a.sin_port);
  thread_ = std::thread([this] { Loop(); });
}

FakeApiServer::~FakeApiServer() {
  if (wake_[1] >= 0) (void)!::write(wake_[1], "x", 1);
  if (thread_.joinable()) thread_.join();
  for (int fd : {fd_, wake_[0], wake_[1]}) {
    if (fd >= 0) ::close(fd);
  }
  SSL_CTX_free(static_cast<SSL_CTX*>(ssl_ctx_));
}

void FakeApiServer::On(const std::string& method, const std::string& path, Handler h) {
  std::lock_guard<std::mutex> l(mu_);
  handlers_[{method, path}] = std::move(h);
}

void FakeApiServer::On(const std::string& method, const std::string& path, Response r) {
  On(method, path, [r](const Request&) { return r; });
}

void FakeApiServer::OnJson(const std::string& method, const std::string& path,
                           const nlohmann::json& j, int code) {
  On(method, path, JsonResponse(j, code));
}

void FakeApiServer::ServeCryodQueries(const std::string& token) {
  std::lock_guard<std::mutex> l(mu_);
  cryod_token_ = token;
}

void FakeApiServer::ServeDiscovery() {
  OnJson("GET", "/version", {{"major", "1"}, {"minor", "32"}, {"gitVersion", "v1.32.0"}});
  OnJson("GET", "/api",
         {{"kind", "APIVersions"},
          {"versions", {"v1"}},
          {"serverAddressByClientCIDRs",
           {{{"clientCIDR", "0.0.0.0/0"}, {"serverAddress", "127.0.0.1"}}}}});
  auto group = [](const std::string& name) {
    nlohmann::json v = {{"groupVersion", name + "/v1"}, {"version", "v1"}};
    return nlohmann::json{{"name", name}, {"versions", {v}}, {"preferredVersion", v}};
  };
  OnJson("GET", "/apis",
         {{"kind", "APIGroupList"},
          {"apiVersion", "v1"},
          {"groups", {group("batch"), group("apps")}}});
  auto resource = [](const std::string& name, const std::string& kind,
                     const std::string& short_name) {
    nlohmann::json r = {{"name", name},
                        {"singularName", absl::AsciiStrToLower(kind)},
                        {"namespaced", true},
                        {"kind", kind},
                        {"verbs", {"create", "get", "list", "patch"}}};
    if (!short_name.empty()) r["shortNames"] = {short_name};
    return r;
  };
  OnJson("GET", "/api/v1",
         {{"kind", "APIResourceList"},
          {"groupVersion", "v1"},
          {"resources", {resource("pods", "Pod", "po")}}});
  OnJson("GET", "/apis/batch/v1",
         {{"kind", "APIResourceList"},
          {"groupVersion", "batch/v1"},
          {"resources", {resource("jobs", "Job", "")}}});
  OnJson("GET", "/apis/apps/v1",
         {{"kind", "APIResourceList"},
          {"groupVersion", "apps/v1"},
          {"resources",
           {resource("deployments", "Deployment", "deploy"),
            resource("statefulsets", "StatefulSet", "sts")}}});
  // kubectl validates on the server when the OpenAPI document says PATCH of the kind takes
  // the fieldValidation parameter; otherwise it would need the whole schema.
  nlohmann::json paths = nlohmann::json::object();
  auto add = [&paths](const std::string& path, const std::string& group, const std::string& kind) {
    paths[path] = {
        {"patch",
         {{"x-kubernetes-group-version-kind",
           {{"group", group}, {"version", "v1"}, {"kind", kind}}},
          {"parameters",
           {{{"name", "fieldValidation"}, {"in", "query"}, {"schema", {{"type", "string"}}}}}}}}};
  };
  add("/api/v1/namespaces/{namespace}/pods/{name}", "", "Pod");
  OnJson(
      "GET", "/openapi/v3/api/v1",
      {{"openapi", "3.0.0"}, {"info", {{"title", "fake"}, {"version", "v1"}}}, {"paths", paths}});
  paths = nlohmann::json::object();
  add("/apis/batch/v1/namespaces/{namespace}/jobs/{name}", "batch", "Job");
  OnJson(
      "GET", "/openapi/v3/apis/batch/v1",
      {{"openapi", "3.0.0"}, {"info", {{"title", "fake"}, {"version", "v1"}}}, {"paths", paths}});
  paths = nlohmann::json::object();
  add("/apis/apps/v1/namespaces/{namespace}/deployments/{name}", "apps", "Deployment");
  add("/apis/apps/v1/namespaces/{namespace}/statefulsets/{name}", "apps", "StatefulSet");
  OnJson(
      "GET", "/openapi/v3/apis/apps/v1",
      {{"openapi", "3.0.0"}, {"info", {{"title", "fake"}, {"version", "v1"}}}, {"paths", paths}});
  OnJson("GET", "/openapi/v3",
         {{"paths",
           {{"api/v1", {{"serverRelativeURL", "/openapi/v3/api/v1?hash=A1"}}},
            {"apis/batch/v1", {{"serverRelativeURL", "/openapi/v3/apis/batch/v1?hash=B1"}}},
            {"apis/apps/v1", {{"serverRelativeURL", "/openapi/v3/apis/apps/v1?hash=C1"}}}}}});
}

std::vector<Request> FakeApiServer::requests() const {
  std::lock_guard<std::mutex> l(mu_);
  return requests_;
}

std::vector<Request> FakeApiServer::ApiRequests() const {
  std::vector<Request> out;
  for (auto& r : requests()) {
    if (!IsDiscovery(r.path)) out.push_back(r);
  }
  return out;
}

void FakeApiServer::Loop() {
  for (;;) {
    pollfd p[2] = {{fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    if (::poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (p[1].revents) return;
    if (p[0].revents & POLLIN) {
      int conn = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (conn < 0) continue;
      timeval tv{10, 0};
      ::setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
      ::setsockopt(conn, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
      SSL* ssl = nullptr;
      if (tls_) {
        ssl = SSL_new(static_cast<SSL_CTX*>(ssl_ctx_));
        SSL_set_fd(ssl, conn);
        if (SSL_accept(ssl) != 1) {  // a client that refused the certificate, say
          SSL_free(ssl);
          ::close(conn);
          continue;
        }
      }
      Serve(conn, ssl);
      if (ssl != nullptr) {
        SSL_shutdown(ssl);
        SSL_free(ssl);
      }
      ::close(conn);
    }
  }
}

void FakeApiServer::Serve(int fd, void* ssl_session) {
  // One request per connection ("Connection: close"): kubectl opens as many as it needs.
  Conn conn{fd, static_cast<SSL*>(ssl_session)};
  std::string buf;
  if (!ReadUntil(conn, &buf,
                 [](const std::string& b) { return b.find("\r\n\r\n") != std::string::npos; })) {
    return;
  }
  const size_t head_end = buf.find("\r\n\r\n");
  std::vector<std::string> lines = absl::StrSplit(buf.substr(0, head_end), "\r\n");
  std::vector<std::string> first = absl::StrSplit(lines[0], ' ');
  if (first.size() < 2) return;
  Request req;
  req.method = first[0];
  const std::string& target = first[1];
  const size_t q = target.find('?');
  req.path = target.substr(0, q);
  req.query = q == std::string::npos ? "" : target.substr(q + 1);
  for (absl::string_view kv : absl::StrSplit(req.query, '&', absl::SkipEmpty())) {
    std::pair<std::string, std::string> p = absl::StrSplit(kv, absl::MaxSplits('=', 1));
    req.params[Decode(p.first)] = Decode(p.second);
  }
  for (size_t i = 1; i < lines.size(); ++i) {
    auto colon = lines[i].find(':');
    if (colon == std::string::npos) continue;
    // A repeated header (Impersonate-Group, one per group) as the values joined by ", ".
    std::string& v = req.headers[absl::AsciiStrToLower(lines[i].substr(0, colon))];
    absl::StrAppend(&v, v.empty() ? "" : ", ",
                    absl::StripAsciiWhitespace(lines[i].substr(colon + 1)));
  }
  std::string rest = buf.substr(head_end + 4);
  if (absl::AsciiStrToLower(req.headers["transfer-encoding"]) == "chunked") {
    // size CRLF data CRLF ... 0 CRLF CRLF
    for (;;) {
      if (!ReadUntil(conn, &rest,
                     [](const std::string& b) { return b.find("\r\n") != std::string::npos; })) {
        break;
      }
      size_t eol = rest.find("\r\n");
      uint64_t size = 0;
      if (!absl::SimpleHexAtoi(rest.substr(0, rest.find(';') < eol ? rest.find(';') : eol),
                               &size)) {
        break;
      }
      if (size == 0) break;
      if (!ReadUntil(conn, &rest,
                     [&](const std::string& b) { return b.size() >= eol + 2 + size + 2; })) {
        break;
      }
      req.body += rest.substr(eol + 2, size);
      rest = rest.substr(eol + 2 + size + 2);
    }
  } else {
    size_t len = 0;
    (void)absl::SimpleAtoi(req.headers["content-length"], &len);
    ReadUntil(conn, &rest, [len](const std::string& b) { return b.size() >= len; });
    req.body = rest.substr(0, len);
  }

  Handler h;
  bool bad_token = false;
  {
    std::lock_guard<std::mutex> l(mu_);
    static constexpr char kQuery[] = "/proxy/v1/query";
    if (!cryod_token_.empty() && req.method == "POST" && absl::EndsWith(req.path, kQuery)) {
      const nlohmann::json q = req.Json();
      const std::string get = q.is_object() && q.contains("get") && q["get"].is_string()
                                  ? q["get"].get<std::string>()
                                  : "";
      bad_token = !q.is_object() || !q.contains("token") || q["token"] != cryod_token_;
      const std::string prefix = req.path.substr(0, req.path.size() - std::strlen(kQuery));
      const size_t qm = get.find('?');
      req.method = "GET";
      req.path = prefix + "/proxy" + get.substr(0, qm);
      // The query's own parameters (kubectl's timeout) stay; the GET's are added.
      const std::string inner = qm == std::string::npos ? "" : get.substr(qm + 1);
      req.query = req.query.empty() ? inner : inner.empty() ? req.query : req.query + "&" + inner;
      for (absl::string_view kv : absl::StrSplit(inner, '&', absl::SkipEmpty())) {
        std::pair<std::string, std::string> p = absl::StrSplit(kv, absl::MaxSplits('=', 1));
        req.params[Decode(p.first)] = Decode(p.second);
      }
      req.via_query = true;
    }
    requests_.push_back(req);
    auto it = handlers_.find({req.method, req.path});
    if (it != handlers_.end()) h = it->second;
  }
  Response resp =
      bad_token ? JsonResponse({{"error",
                                 {{"code", "UNAUTHENTICATED"},
                                  {"message", "wrong token for cryod's checkpoint API"}}}},
                               401)
      : h       ? h(req)
                : JsonResponse(
                      StatusJson(404, "NotFound", "the server could not find the requested resource"),
                      404);
  std::string out = absl::StrCat("HTTP/1.1 ", resp.code, " X\r\nContent-Type: ", resp.content_type,
                                 "\r\nContent-Length: ", resp.body.size(),
                                 "\r\nConnection: close\r\n\r\n", resp.body);
  size_t off = 0;
  while (off < out.size()) {
    ssize_t n = conn.Write(out.data() + off, out.size() - off);
    if (n <= 0) break;
    off += n;
  }
}

std::vector<std::string> Lines(const std::vector<Request>& rs) {
  std::vector<std::string> out;
  for (const auto& r : rs) out.push_back(r.method + " " + r.path);
  return out;
}

}  // namespace cryo::kubectl::testing
