#pragma once

// A small HTTP/1.1 server on 127.0.0.1, port 0, for the termination tests: it stands in for a
// cloud's metadata server. One request per connection, served on its own thread.

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace cryo::termination {

struct TestRequest {
  std::string method;
  std::string target;                          // path and query
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;

  std::string Path() const { return target.substr(0, target.find('?')); }
  std::string Query() const {
    auto q = target.find('?');
    return q == std::string::npos ? "" : target.substr(q + 1);
  }
  bool Has(const std::string& name) const { return headers.count(name) > 0; }
  std::string Header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
};

struct TestResponse {
  int status = 200;
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  bool chunked = false;  // send the body in chunks instead of with Content-Length
  bool hang = false;     // never answer (the connection stays open until the server goes)
  std::string raw;       // when set, written verbatim instead of a formed response
};

using TestHandler = std::function<TestResponse(const TestRequest&)>;

class TestHttpServer {
 public:
  // Binds 127.0.0.1 on a free port. With listen = false the port is held but connections are
  // refused (an endpoint that is down) until Listen().
  static std::unique_ptr<TestHttpServer> Start(TestHandler handler, bool listen = true);
  ~TestHttpServer();

  void Listen();
  int port() const { return port_; }
  std::string base() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int requests() const;

 private:
  TestHttpServer(int fd, int port, TestHandler handler);
  void Loop();
  void Serve(int conn);

  const int fd_;
  const int port_;
  const TestHandler handler_;
  int wake_[2] = {-1, -1};
  std::thread thread_;
  mutable absl::Mutex mu_;
  int requests_ = 0;
  std::vector<int> hung_;  // connections left unanswered
};

}  // namespace cryo::termination
