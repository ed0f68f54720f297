#pragma once

// A very small HTTP/1.0 server for /metrics, /healthz and cryod's read-only JSON API.
// prometheus-cpp's exposer cannot serve anything beside the metrics, and these GETs need
// nothing more than one request per connection.

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/base/wake_pipe.h"

namespace cryo::metrics {

struct HttpRequest {
  std::string method;  // GET or HEAD
  std::string path;    // percent-decoded, without the query
  std::string query;   // as sent, after '?'
  // Decoded query parameters; a repeated key keeps its last value.
  std::map<std::string, std::string> params;
  // For a prefix route: what follows the prefix and its '/' ("" for the prefix itself).
  std::string rest;

  // The parameter's value, or "" when absent.
  std::string Param(const std::string& key) const;
};

struct HttpResponse {
  int code = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

using HttpHandler = std::function<HttpResponse(const HttpRequest&)>;

// Which handler serves which path. An exact route wins over a prefix route; among prefix
// routes the longest wins.
class HttpRoutes {
 public:
  HttpRoutes& Exact(std::string path, HttpHandler handler);
  // For handlers that need nothing from the request (/metrics, /healthz).
  HttpRoutes& Exact(std::string path, std::function<HttpResponse()> handler);
  // Serves `prefix` itself and every path below it ("/v1/checkpoints" and
  // "/v1/checkpoints/ID", not "/v1/checkpointsX").
  HttpRoutes& Prefix(std::string prefix, HttpHandler handler);

  // The handler for a decoded path, or nullptr; `rest` receives the part after a prefix.
  const HttpHandler* Match(const std::string& path, std::string* rest) const;

 private:
  std::map<std::string, HttpHandler> exact_;
  std::vector<std::pair<std::string, HttpHandler>> prefix_;  // longest first
};

// Decodes %XX and, when `plus_is_space` (query strings), '+'. False on a malformed escape.
bool PercentDecode(const std::string& in, bool plus_is_space, std::string* out);

// Parses "GET /path?query HTTP/1.x" into `req` (method, path, query, params). False when the
// request line is malformed.
bool ParseRequestLine(const std::string& line, HttpRequest* req);

class HttpServer {
 public:
  // address "HOST:PORT"; port 0 picks a free one (see port()).
  static absl::StatusOr<std::unique_ptr<HttpServer>> Create(const std::string& address,
                                                            HttpRoutes routes);
  ~HttpServer();
  int port() const { return port_; }

 private:
  HttpServer(int fd, int port, HttpRoutes routes);
  void Loop();
  void Serve(int conn);
  HttpResponse Dispatch(const std::string& request_line);

  int fd_;
  int port_;
  WakePipe wake_;
  HttpRoutes routes_;
  std::thread thread_;
};

}  // namespace cryo::metrics
