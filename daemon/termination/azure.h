#pragma once

// Microsoft Azure: Scheduled Events from the instance metadata service. Every request needs the
// header `Metadata: true` (without it the service answers 400).
//   GET <events_url>  -> {"DocumentIncarnation": N, "Events": [{"EventId": "...",
//       "EventType": "Preempt"|"Terminate"|"Reboot"|"Redeploy"|"Freeze", "ResourceType":
//       "VirtualMachine", "Resources": ["vmname", ...], "EventStatus": "Scheduled"|"Started",
//       "NotBefore": "Mon, 19 Sep 2016 18:29:47 GMT", ...}]}
// Preempt (spot eviction, >= 30 s ahead), Terminate, Reboot and Redeploy events that name this
// VM are notices: each ends every process of the VM (Redeploy boots it on another host). Freeze
// (a pause of seconds that keeps memory) is not. NotBefore is the deadline; each EventId is a
// distinct notice. The events document lists the events of the whole availability set or scale
// group, so the VM's own name matters: configured, or learned from the instance metadata
// (name_url). While the name is unknown every such event counts (a needless checkpoint beats a
// missed one). Events are never acknowledged: an acknowledgement lets Azure start them sooner.

#include <memory>
#include <string>
#include <vector>

#include "daemon/termination/clock.h"
#include "daemon/termination/http_client.h"
#include "daemon/termination/provider.h"

namespace cryo::termination {

inline constexpr char kAzureDefaultUrl[] =
    "http://169.254.169.254/metadata/scheduledevents?api-version=2020-07-01";
// Path of the VM's name on the same metadata server.
inline constexpr char kAzureNamePath[] =
    "/metadata/instance/compute/name?api-version=2021-02-01&format=text";

struct AzureOptions {
  std::string events_url = kAzureDefaultUrl;
  // Empty: learned from name_url; name_url empty: http://<host of events_url><kAzureNamePath>.
  std::string vm_name;
  std::string name_url;
};

class AzureEventsProvider : public NoticeProvider {
 public:
  AzureEventsProvider(std::shared_ptr<HttpClient> http, Clock* clock, AzureOptions options);
  std::string Name() const override { return "azure"; }
  absl::StatusOr<std::vector<Notice>> Poll() override;

  const std::string& vm_name() const { return vm_name_; }

 private:
  void LearnName();

  std::shared_ptr<HttpClient> http_;
  Clock* clock_;
  std::string events_url_;
  std::string name_url_;
  std::string vm_name_;
  bool warned_no_name_ = false;
};

}  // namespace cryo::termination
