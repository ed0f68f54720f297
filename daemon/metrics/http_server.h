#pragma once

// A very small HTTP/1.0 server for /metrics and /healthz. prometheus-cpp's exposer cannot serve
// a health endpoint beside the metrics, and these two GETs need nothing more.

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace cryo::metrics {

struct HttpResponse {
  int code = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

using HttpHandler = std::function<HttpResponse()>;

class HttpServer {
 public:
  // address "HOST:PORT"; port 0 picks a free one (see port()).
  static absl::StatusOr<std::unique_ptr<HttpServer>> Create(
      const std::string& address, std::map<std::string, HttpHandler> handlers);
  ~HttpServer();
  int port() const { return port_; }

 private:
  HttpServer(int fd, int port, std::map<std::string, HttpHandler> handlers);
  void Loop();
  void Serve(int conn);

  int fd_;
  int port_;
  int wake_[2] = {-1, -1};
  std::map<std::string, HttpHandler> handlers_;
  std::thread thread_;
};

}  // namespace cryo::metrics
