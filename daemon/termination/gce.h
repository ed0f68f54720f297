#pragma once

// Google Compute Engine: the instance metadata server. Every request needs the header
// `Metadata-Flavor: Google` (without it the server answers 403).
//   GET <base>preempted          TRUE once a spot/preemptible VM is being preempted (~30 s left)
//   GET <base>maintenance-event  TERMINATE_ON_HOST_MAINTENANCE before a host maintenance that
//                                stops the VM (NONE and MIGRATE_ON_HOST_MAINTENANCE do not)
// The two are separate providers so one endpoint failing never hides the other's notice, and an
// error in one does not make the other's standing notice look new when it recovers.
// Neither gives a deadline.

#include <memory>
#include <string>
#include <vector>

#include "daemon/termination/http_client.h"
#include "daemon/termination/provider.h"

namespace cryo::termination {

inline constexpr char kGceDefaultUrl[] = "http://169.254.169.254/computeMetadata/v1/instance/";

class GcePreemptedProvider : public NoticeProvider {
 public:
  // `base_url`: the instance/ directory of the metadata server (a missing final '/' is added).
  GcePreemptedProvider(std::shared_ptr<HttpClient> http, std::string base_url);
  std::string Name() const override { return "gce/preempted"; }
  absl::StatusOr<std::vector<Notice>> Poll() override;

 private:
  std::shared_ptr<HttpClient> http_;
  std::string url_;
};

class GceMaintenanceProvider : public NoticeProvider {
 public:
  GceMaintenanceProvider(std::shared_ptr<HttpClient> http, std::string base_url);
  std::string Name() const override { return "gce/maintenance-event"; }
  absl::StatusOr<std::vector<Notice>> Poll() override;

 private:
  std::shared_ptr<HttpClient> http_;
  std::string url_;
};

}  // namespace cryo::termination
