#pragma once

// Every API access of the plugin goes through the user's own kubectl, so it uses their
// kubeconfig, context, credentials plugins and proxies, and needs nothing else installed.
// kubectl's stderr is the only error report we get; it is classified here (unreachable,
// unauthorized, not found, other server errors) and quoted in every message.

#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/base/subprocess.h"
#include "nlohmann/json.hpp"

namespace cryo::kubectl {

struct KubectlOptions {
  std::string kubectl = "kubectl";  // the binary ($KUBECTL overrides)
  // kubectl's global flags as the user gave them ("--as=alice", "--v=6"), in that order, put
  // before the arguments of every call: the plugin acts as the user's kubectl would.
  std::vector<std::string> global_flags;
  // When set (the user asked kubectl for a log with -v), kubectl's stderr is copied here after
  // every call, successful ones included.
  std::ostream* log = nullptr;
};

// What a failed kubectl call said, sorted into what the plugin acts on.
struct KubectlError {
  enum Kind {
    kUnreachable,   // no connection to the API server
    kUnauthorized,  // 401: no or bad credentials
    kForbidden,     // 403: RBAC
    kNotFound,      // 404, from the API server or a proxied kubelet/pod
    kServer,        // any other "Error from server (Reason): ..."
    kOther,         // kubectl's own errors
  };
  Kind kind = kOther;
  std::string reason;   // "InternalError", "NotFound", ... for server errors
  std::string message;  // kubectl's stderr, trimmed
};

KubectlError ClassifyKubectlError(const std::string& stderr_text);

// The status for a failed kubectl call: unreachable and unauthorized carry their exit codes;
// not found is NOT_FOUND and the rest UNKNOWN, for the caller to turn into its own failure.
absl::Status KubectlStatus(const KubectlError& e);

class Kubectl {
 public:
  explicit Kubectl(KubectlOptions options) : o_(std::move(options)) {}

  // kubectl GLOBAL_FLAGS ARGS with `input` on stdin. kExitKubectlMissing when kubectl cannot
  // be started.
  absl::StatusOr<RunOutput> Run(const std::vector<std::string>& args,
                                const std::string& input = "") const;

  // GET PATH through the API server (`kubectl get --raw`), parsed as JSON.
  absl::StatusOr<nlohmann::json> GetRaw(const std::string& path) const;
  // POST `body` to PATH (`kubectl create --raw PATH -f -`), answer parsed as JSON.
  absl::StatusOr<nlohmann::json> PostRaw(const std::string& path, const std::string& body) const;
  // Creates an object (`kubectl create -f - -o json`); returns what the server stored.
  absl::StatusOr<nlohmann::json> Create(const nlohmann::json& object,
                                        const std::string& namespace_name) const;
  // JSON merge patch of RESOURCE/NAME (`kubectl patch --type merge -o json`).
  absl::StatusOr<nlohmann::json> MergePatch(const std::string& resource, const std::string& name,
                                            const std::string& namespace_name,
                                            const nlohmann::json& patch) const;
  // An object file (JSON or YAML) converted to JSON locally, without the API server.
  absl::StatusOr<nlohmann::json> ReadObjectFile(const std::string& path) const;
  // The namespace of the current (or --context) context; "" when it sets none.
  std::string ContextNamespace() const;
  // kubectl's own version (`kubectl version --client`), e.g. "v1.32.4".
  absl::StatusOr<std::string> ClientVersion() const;
  // Whether kubectl has a built-in COMMAND. Asked through `kubectl help COMMAND`, which, unlike
  // `kubectl COMMAND --help`, never runs a plugin (this one included).
  absl::StatusOr<bool> HasBuiltin(const std::string& command) const;

  const KubectlOptions& options() const { return o_; }

 private:
  absl::StatusOr<nlohmann::json> RunJson(const std::vector<std::string>& args,
                                         const std::string& input) const;

  KubectlOptions o_;
};

// Percent-encodes a query parameter value or a path segment.
std::string UrlEncode(const std::string& s);

}  // namespace cryo::kubectl
