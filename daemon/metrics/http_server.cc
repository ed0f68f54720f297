#include "daemon/metrics/http_server.h"

#include <arpa/inet.h>
#include <civetweb.h>
#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <mutex>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "lib/base/log.h"
#include "lib/base/status.h"

namespace cryo::metrics {

std::string HttpRequest::Param(const std::string& key) const {
  auto it = params.find(key);
  return it == params.end() ? "" : it->second;
}

HttpRoutes& HttpRoutes::Exact(std::string path, HttpHandler handler) {
  exact_[std::move(path)] = std::move(handler);
  return *this;
}

HttpRoutes& HttpRoutes::Exact(std::string path, std::function<HttpResponse()> handler) {
  return Exact(std::move(path), [h = std::move(handler)](const HttpRequest&) { return h(); });
}

HttpRoutes& HttpRoutes::Prefix(std::string prefix, HttpHandler handler) {
  while (prefix.size() > 1 && prefix.back() == '/') prefix.pop_back();
  prefix_.emplace_back(std::move(prefix), std::move(handler));
  std::stable_sort(prefix_.begin(), prefix_.end(),
                   [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  return *this;
}

bool IsLoopbackAddress(const std::string& address) {
  const auto colon = address.rfind(':');
  std::string host = colon == std::string::npos ? address : address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  return host == "localhost" || host == "::1" || absl::StartsWith(host, "127.");
}

HttpRoutes& HttpRoutes::Post(std::string path, HttpHandler handler) {
  post_[std::move(path)] = std::move(handler);
  return *this;
}

const HttpHandler* HttpRoutes::MatchPost(const std::string& path) const {
  auto it = post_.find(path);
  return it == post_.end() ? nullptr : &it->second;
}

const HttpHandler* HttpRoutes::Match(const std::string& path, std::string* rest) const {
  rest->clear();
  if (auto it = exact_.find(path); it != exact_.end()) return &it->second;
  for (const auto& [prefix, handler] : prefix_) {
    if (path == prefix) return &handler;
    if (prefix == "/" && !path.empty() && path[0] == '/') {
      *rest = path.substr(1);
      return &handler;
    }
    if (path.size() > prefix.size() && path.compare(0, prefix.size(), prefix) == 0 &&
        path[prefix.size()] == '/') {
      *rest = path.substr(prefix.size() + 1);
      return &handler;
    }
  }
  return nullptr;
}

bool PercentDecode(const std::string& in, bool plus_is_space, std::string* out) {
  out->clear();
  out->reserve(in.size());
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (size_t i = 0; i < in.size(); ++i) {
    char c = in[i];
    if (c == '%') {
      if (i + 2 >= in.size()) return false;
      int hi = hex(in[i + 1]), lo = hex(in[i + 2]);
      if (hi < 0 || lo < 0) return false;
      out->push_back(static_cast<char>(hi * 16 + lo));
      i += 2;
    } else if (c == '+' && plus_is_space) {
      out->push_back(' ');
    } else {
      out->push_back(c);
    }
  }
  return true;
}

bool ParseTarget(absl::string_view target, HttpRequest* req) {
  if (target.empty() || target[0] != '/') return false;
  const size_t q = target.find('?');
  if (!PercentDecode(std::string(target.substr(0, q)), false, &req->path)) return false;
  req->query = q == absl::string_view::npos ? "" : std::string(target.substr(q + 1));
  req->params.clear();
  for (absl::string_view kv : absl::StrSplit(req->query, '&', absl::SkipEmpty())) {
    const size_t eq = kv.find('=');
    std::string k, v;
    if (!PercentDecode(std::string(kv.substr(0, eq)), true, &k)) return false;
    if (eq != absl::string_view::npos && !PercentDecode(std::string(kv.substr(eq + 1)), true, &v)) {
      return false;
    }
    req->params[k] = v;
  }
  return true;
}

bool ParseRequestLine(const std::string& line, HttpRequest* req) {
  std::string l = line;
  while (!l.empty() && (l.back() == '\r' || l.back() == '\n')) l.pop_back();
  std::vector<std::string> parts = absl::StrSplit(l, ' ', absl::SkipEmpty());
  if (parts.size() < 2 || parts.size() > 3) return false;
  req->method = parts[0];
  return ParseTarget(parts[1], req);
}

HttpResponse Dispatch(const HttpRoutes& routes, absl::string_view method, absl::string_view target,
                      absl::string_view authorization, absl::string_view body) {
  HttpRequest r;
  r.method = std::string(method);
  if (!ParseTarget(target, &r)) return {400, "text/plain", "bad request\n"};
  if (body.size() > kMaxRequestBody) return {413, "text/plain", "request body too long\n"};
  r.authorization = std::string(authorization);
  if (r.method == "POST") {
    const HttpHandler* h = routes.MatchPost(r.path);
    if (h == nullptr) return {405, "text/plain", "method not allowed\n"};
    r.body = std::string(body);
    return (*h)(r);
  }
  if (r.method != "GET" && r.method != "HEAD") return {405, "text/plain", "method not allowed\n"};
  const HttpHandler* h = routes.Match(r.path, &r.rest);
  if (h == nullptr) return {404, "text/plain", "not found\n"};
  return (*h)(r);
}

HttpResponse DispatchRaw(const HttpRoutes& routes, absl::string_view raw) {
  absl::string_view line = raw.substr(0, raw.find('\n'));
  while (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  std::vector<absl::string_view> parts = absl::StrSplit(line, ' ', absl::SkipEmpty());
  if (parts.size() < 2 || parts.size() > 3) return {400, "text/plain", "bad request\n"};
  return Dispatch(routes, parts[0], parts[1]);
}

namespace {

// civetweb's own messages (a refused connection, a failed write) are not errors of cryod.
int LogMessage(const mg_connection*, const char* message) {
  CRYO_LOG(Debug) << "http: " << message;
  return 1;
}

void InitCivetweb() {
  static std::once_flag once;
  std::call_once(once, [] { mg_init_library(0); });
}

// "HOST:PORT" as civetweb's listening_ports wants it: a numeric address ("[v6]:port").
absl::StatusOr<std::string> ListeningPort(const std::string& address) {
  auto colon = address.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics address '", address, "' is not HOST:PORT"));
  }
  std::string host = address.substr(0, colon);
  std::string port = address.substr(colon + 1);
  int port_num = 0;
  if (!absl::SimpleAtoi(port, &port_num) || port_num < 0 || port_num > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics address '", address, "': bad port '", port, "'"));
  }
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics address '", address, "': ", gai_strerror(rc)));
  }
  char ip[INET6_ADDRSTRLEN] = {0};
  const bool v6 = res->ai_family == AF_INET6;
  const void* a =
      v6 ? static_cast<const void*>(&reinterpret_cast<const sockaddr_in6*>(res->ai_addr)->sin6_addr)
         : static_cast<const void*>(&reinterpret_cast<const sockaddr_in*>(res->ai_addr)->sin_addr);
  const char* ok = ::inet_ntop(res->ai_family, a, ip, sizeof(ip));
  ::freeaddrinfo(res);
  if (ok == nullptr) return ErrnoStatus(errno, absl::StrCat("metrics address '", address, "'"));
  return v6 ? absl::StrCat("[", ip, "]:", port_num) : absl::StrCat(ip, ":", port_num);
}

void Send(mg_connection* conn, const HttpResponse& resp, bool head) {
  mg_response_header_start(conn, resp.code);
  mg_response_header_add(conn, "Content-Type", resp.content_type.c_str(), -1);
  mg_response_header_add(conn, "Content-Length", absl::StrCat(resp.body.size()).c_str(), -1);
  mg_response_header_send(conn);
  if (!head && !resp.body.empty()) mg_write(conn, resp.body.data(), resp.body.size());
}

}  // namespace

int HttpServer::Handle(mg_connection* conn, void* self) {
  const mg_request_info* ri = mg_get_request_info(conn);
  const bool head = ri->request_method != nullptr && std::strcmp(ri->request_method, "HEAD") == 0;
  HttpResponse resp;
  // This is a C callback: nothing may be thrown through civetweb's frames.
  try {
    std::string target = ri->local_uri_raw != nullptr ? ri->local_uri_raw : "";
    if (ri->query_string != nullptr) absl::StrAppend(&target, "?", ri->query_string);
    const char* method = ri->request_method != nullptr ? ri->request_method : "";
    const char* auth = mg_get_header(conn, "Authorization");
    std::string body;
    bool too_long = false;
    if (std::strcmp(method, "POST") == 0) {
      // Bounded before it is read: a body over the bound is refused, not buffered.
      too_long =
          ri->content_length < 0 || ri->content_length > static_cast<int64_t>(kMaxRequestBody);
      if (!too_long) {
        body.resize(static_cast<size_t>(ri->content_length));
        size_t got = 0;
        while (got < body.size()) {
          const int n = mg_read(conn, body.data() + got, body.size() - got);
          if (n <= 0) break;
          got += static_cast<size_t>(n);
        }
        body.resize(got);
      }
    }
    resp = too_long ? HttpResponse{413, "text/plain", "request body missing or too long\n"}
                    : Dispatch(static_cast<HttpServer*>(self)->routes_, method, target,
                               auth != nullptr ? auth : "", body);
  } catch (const std::exception& e) {
    CRYO_LOG(Error) << "http: handler of " << (ri->local_uri_raw ? ri->local_uri_raw : "?")
                    << " threw: " << e.what();
    resp = {500, "text/plain", "internal error\n"};
  }
  Send(conn, resp, head);
  return resp.code;
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Create(const std::string& address,
                                                               HttpRoutes routes,
                                                               HttpServerOptions options) {
  CRYO_ASSIGN_OR_RETURN(std::string listen, ListeningPort(address));
  if (options.max_connections < 1) return absl::InvalidArgumentError("max_connections < 1");
  const int64_t timeout_ms =
      std::max<int64_t>(1, absl::ToInt64Milliseconds(options.request_timeout));
  const std::string threads = absl::StrCat(options.max_connections);
  const std::string timeout = absl::StrCat(timeout_ms);
  // No document root (nothing but our routes is served), one request per connection, the
  // target left as sent (ParseTarget decodes it).
  const char* config[] = {"listening_ports",
                          listen.c_str(),
                          "num_threads",
                          threads.c_str(),
                          "connection_queue",
                          threads.c_str(),
                          "request_timeout_ms",
                          timeout.c_str(),
                          "enable_keep_alive",
                          "no",
                          "decode_url",
                          "no",
                          "decode_query_string",
                          "no",
                          "max_request_size",
                          "16384",
                          nullptr};
  InitCivetweb();
  std::unique_ptr<HttpServer> server(new HttpServer(std::move(routes)));
  mg_callbacks callbacks{};
  callbacks.log_message = LogMessage;
  mg_init_data init{};
  init.callbacks = &callbacks;
  init.user_data = server.get();
  init.configuration_options = config;
  char error[256] = {0};
  mg_error_data err{};
  err.text = error;
  err.text_buffer_size = sizeof(error);
  server->ctx_ = mg_start2(&init, &err);
  if (server->ctx_ == nullptr) {
    return absl::UnavailableError(absl::StrCat("listen on ", address, ": ", error));
  }
  mg_set_request_handler(server->ctx_, "/", &HttpServer::Handle, server.get());
  mg_server_port ports[1];
  if (mg_get_server_ports(server->ctx_, 1, ports) != 1) {
    return absl::InternalError(absl::StrCat("listen on ", address, ": no port"));
  }
  server->port_ = ports[0].port;
  return server;
}

HttpServer::~HttpServer() {
  if (ctx_ != nullptr) mg_stop(ctx_);
}

}  // namespace cryo::metrics
