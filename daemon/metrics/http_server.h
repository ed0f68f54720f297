#pragma once

// cryod's HTTP endpoint for /metrics, /healthz and the read-only JSON API. One thread reads
// every connection's request as it arrives (idle and slow clients cost a descriptor, never a
// worker), each request within a deadline as a whole; whole requests go to a bounded pool of
// workers. Past its caps a connection is refused at once (503), not queued, so a flood does not
// hold back the readiness probe (issue 34: civetweb, used before, queued them). One request per
// connection, HTTP/1.1 answers with Connection: close. prometheus-cpp's exposer cannot serve
// anything beside the metrics. Routing and request parsing (Dispatch) can be tested and fuzzed
// without a socket.

#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace cryo::metrics {

// The longest body a POST may carry.
inline constexpr size_t kMaxRequestBody = 16 << 10;

struct HttpRequest {
  std::string method;  // GET, HEAD or POST
  std::string path;    // percent-decoded, without the query
  std::string query;   // as sent, after '?'
  // Decoded query parameters; a repeated key keeps its last value.
  std::map<std::string, std::string> params;
  // For a prefix route: what follows the prefix and its '/' ("" for the prefix itself).
  std::string rest;
  std::string authorization;  // the Authorization header, as sent
  std::string body;           // a POST's, at most kMaxRequestBody bytes

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
  // The one route that takes POST at `path` (GET routes do not).
  HttpRoutes& Post(std::string path, HttpHandler handler);

  // The handler for a decoded path, or nullptr; `rest` receives the part after a prefix.
  const HttpHandler* Match(const std::string& path, std::string* rest) const;
  const HttpHandler* MatchPost(const std::string& path) const;

 private:
  std::map<std::string, HttpHandler> exact_;
  std::map<std::string, HttpHandler> post_;
  std::vector<std::pair<std::string, HttpHandler>> prefix_;  // longest first
};

// The reason phrase of an HTTP status code ("Not Found"), what clients print beside it.
const char* ReasonPhrase(int code);

// Whether "HOST:PORT" listens on a loopback address only (127.0.0.0/8, [::1], localhost).
bool IsLoopbackAddress(const std::string& address);

// Decodes %XX and, when `plus_is_space` (query strings), '+'. False on a malformed escape.
bool PercentDecode(const std::string& in, bool plus_is_space, std::string* out);

// Parses a request target as sent ("/path?query", not decoded) into `req` (path, query, params).
// False when it is malformed.
bool ParseTarget(absl::string_view target, HttpRequest* req);
// Parses "GET /path?query HTTP/1.x" into `req` (method, path, query, params). False when the
// request line is malformed.
bool ParseRequestLine(const std::string& line, HttpRequest* req);

// The answer to one request, given its method, its target as sent, its Authorization header and
// its body: 400 for a malformed target, 405 for a method other than GET or HEAD (or POST where a
// POST route is), 404 without a route, else the route's handler. Every request the server takes
// goes through here.
HttpResponse Dispatch(const HttpRoutes& routes, absl::string_view method, absl::string_view target,
                      absl::string_view authorization = "", absl::string_view body = "");
// The same from the raw bytes of a request head (its first line is the request line).
HttpResponse DispatchRaw(const HttpRoutes& routes, absl::string_view raw);

struct HttpServerOptions {
  // Requests handled at once (one worker thread each). Up to 4x as many connections may be
  // sending their requests meanwhile; more are refused at once (503), as are whole requests
  // beyond this many waiting for a worker.
  int max_connections = 16;
  // A request must arrive whole within this (the client sending bytes does not extend it), and
  // each write of the answer must go out within it.
  absl::Duration request_timeout = absl::Seconds(10);
};

class HttpServer {
 public:
  // address "HOST:PORT" (an IPv6 host in brackets); port 0 picks a free one (see port()).
  static absl::StatusOr<std::unique_ptr<HttpServer>> Create(const std::string& address,
                                                            HttpRoutes routes,
                                                            HttpServerOptions options = {});
  // Stops accepting, lets requests being served finish, joins every thread.
  ~HttpServer();
  int port() const { return port_; }

 private:
  // One whole request, handed from the reader to a worker.
  struct Request {
    int fd = -1;
    std::string method, target, authorization, body;
  };
  struct Pending;
  explicit HttpServer(HttpRoutes routes) : routes_(std::move(routes)) {}
  static int ParseHead(const std::string& buf, Request* r, size_t* head_end, size_t* need,
                       int* code, std::string* why);
  void ReadLoop();
  void Hand(Request r);
  void Work();

  HttpRoutes routes_;
  HttpServerOptions opt_;
  size_t max_pending_ = 0;
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};
  int port_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Request> ready_;
  bool stop_ = false;
  std::thread reader_;
  std::vector<std::thread> workers_;
};

}  // namespace cryo::metrics
