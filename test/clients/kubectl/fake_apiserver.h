#pragma once

// A stand-in for the Kubernetes API server (and, behind its proxies, kubelet and cryod) for
// tests that run the real kubectl: HTTP/1.1 on 127.0.0.1 (port 0), plain or over TLS, canned
// answers per method and path, and a record of every request. Unknown paths get the API
// server's 404 Status. kubectl sends bearer tokens only over TLS, so tests of credentials need
// the TLS server (a self-signed certificate for 127.0.0.1, made at start).

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "nlohmann/json.hpp"

namespace cryo::kubectl::testing {

struct Request {
  std::string method;
  std::string path;                            // as sent
  std::string query;                           // as sent
  std::map<std::string, std::string> params;   // decoded query parameters
  std::map<std::string, std::string> headers;  // names in lower case; repeats joined by ", "
  std::string body;                            // de-chunked
  bool via_query = false;  // cryod's POST /v1/query, recorded as the GET it carried

  std::string Param(const std::string& k) const;
  nlohmann::json Json() const;  // the body parsed (null when it is not JSON)
};

struct Response {
  int code = 200;
  std::string body;
  std::string content_type = "application/json";
};

using Handler = std::function<Response(const Request&)>;

// A Kubernetes Status object, as the API server answers errors.
nlohmann::json StatusJson(int code, const std::string& reason, const std::string& message);
Response JsonResponse(const nlohmann::json& j, int code = 200);

class FakeApiServer {
 public:
  explicit FakeApiServer(bool tls = false);
  ~FakeApiServer();
  FakeApiServer(const FakeApiServer&) = delete;
  FakeApiServer& operator=(const FakeApiServer&) = delete;

  bool ok() const { return fd_ >= 0; }
  int port() const { return port_; }
  std::string url() const {
    return (tls_ ? "https://127.0.0.1:" : "http://127.0.0.1:") + std::to_string(port_);
  }
  // The server's certificate (PEM), for a client's --certificate-authority; "" without TLS.
  const std::string& certificate_pem() const { return cert_pem_; }

  // Answers METHOD PATH (path without the query) with `h`; a later call replaces it.
  void On(const std::string& method, const std::string& path, Handler h);
  void On(const std::string& method, const std::string& path, Response r);
  void OnJson(const std::string& method, const std::string& path, const nlohmann::json& j,
              int code = 200);
  // The discovery and OpenAPI v3 documents kubectl needs for `create -f -` and `patch`: core
  // v1 pods, batch/v1 jobs, apps/v1 deployments and statefulsets; field validation on the
  // server side, as a real API server advertises it.
  void ServeDiscovery();
  // cryod's POST PROXY/v1/query {"token", "get"} (through a pod or node proxy) is answered as
  // the GET PROXY+get it carries (a test sets that GET's answer once) when its token is `token`,
  // else 401 as cryod answers; recorded as that GET, with via_query set.
  void ServeCryodQueries(const std::string& token);

  // Every request so far, in arrival order.
  std::vector<Request> requests() const;
  // Without kubectl's own discovery (/version, /api, /apis, group versions, /openapi).
  std::vector<Request> ApiRequests() const;

 private:
  void Loop();
  // One request on a connection (`ssl`: its TLS session, or null).
  void Serve(int conn, void* ssl);

  bool tls_ = false;
  void* ssl_ctx_ = nullptr;  // SSL_CTX, kept out of this header
  std::string cert_pem_;
  int fd_ = -1;
  int port_ = 0;
  int wake_[2] = {-1, -1};
  mutable std::mutex mu_;
  std::map<std::pair<std::string, std::string>, Handler> handlers_;
  std::string cryod_token_;
  std::vector<Request> requests_;
  std::thread thread_;
};

// "GET /path" for each request: compact expectations.
std::vector<std::string> Lines(const std::vector<Request>& rs);

}  // namespace cryo::kubectl::testing
