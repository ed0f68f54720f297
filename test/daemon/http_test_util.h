#pragma once

// A raw HTTP client for tests of cryod's HTTP endpoint: one request, the whole response.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

namespace cryo {

inline std::string HttpSend(int port, const std::string& request) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return "connect failed";
  }
  (void)!::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::recv(fd, buf, sizeof(buf), 0)) > 0) out.append(buf, n);
  ::close(fd);
  return out;
}

inline std::string HttpGet(int port, const std::string& target, const std::string& headers = "") {
  return HttpSend(port, "GET " + target + " HTTP/1.1\r\nHost: test\r\n" + headers + "\r\n");
}

inline std::string HttpPost(int port, const std::string& target, const std::string& body) {
  return HttpSend(port, "POST " + target + " HTTP/1.1\r\nHost: test\r\nContent-Length: " +
                            std::to_string(body.size()) + "\r\n\r\n" + body);
}

// The status code of a response ("HTTP/1.0 404 Not Found" -> 404), 0 if none.
inline int HttpCode(const std::string& response) {
  auto sp = response.find(' ');
  return sp == std::string::npos ? 0 : std::atoi(response.c_str() + sp + 1);
}

inline std::string HttpHeader(const std::string& response, const std::string& name) {
  auto p = response.find("\r\n" + name + ": ");
  if (p == std::string::npos) return "";
  p += name.size() + 4;
  return response.substr(p, response.find("\r\n", p) - p);
}

inline std::string HttpBody(const std::string& response) {
  auto p = response.find("\r\n\r\n");
  return p == std::string::npos ? "" : response.substr(p + 4);
}

}  // namespace cryo
