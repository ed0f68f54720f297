#include "lib/contract/gpu_fastpath_messages.h"

#include <algorithm>
#include <limits>

#include "lib/base/json_depth.h"
#include "nlohmann/json.hpp"

namespace cryo::contract::gpu_fastpath {
namespace {

using nlohmann::json;
namespace json_text = ::cryo::json;

// The one spelling of each op, state and error code on the wire.
constexpr std::pair<Op, const char*> kOps[] = {
    {Op::kStatus, "status"}, {Op::kDrain, "drain"}, {Op::kRefill, "refill"}, {Op::kGo, "go"},
    {Op::kAlign, "align"},   {Op::kShare, "share"}, {Op::kProve, "prove"},   {Op::kTrack, "track"}};
constexpr std::pair<State, const char*> kStates[] = {{State::kRunning, kStateRunning},
                                                     {State::kDrained, kStateDrained},
                                                     {State::kSaved, kStateSaved},
                                                     {State::kImporting, kStateImporting}};
constexpr std::pair<ErrorCode, const char*> kCodes[] = {
    {ErrorCode::kDeadline, "deadline"}, {ErrorCode::kDataLoss, "data_loss"},
    {ErrorCode::kVersion, "version"},   {ErrorCode::kBadRequest, "bad_request"},
    {ErrorCode::kBusy, "busy"},         {ErrorCode::kProve, "prove"},
    {ErrorCode::kDenied, "denied"}};
constexpr char kEventGated[] = "gated";
constexpr char kEventQuiesced[] = "quiesced";
constexpr char kEventImported[] = "imported";
constexpr char kEventDrained[] = "drained";
constexpr char kEventSaved[] = "saved";

template <typename E, size_t N>
const char* NameOf(const std::pair<E, const char*> (&table)[N], E v) {
  for (const auto& [e, n] : table) {
    if (e == v) return n;
  }
  return "";
}

template <typename E, size_t N>
bool ValueOf(const std::pair<E, const char*> (&table)[N], const std::string& name, E* out) {
  for (const auto& [e, n] : table) {
    if (name == n) {
      *out = e;
      return true;
    }
  }
  return false;
}

// Reads fields of one object; the first problem sticks in `why`.
class Reader {
 public:
  Reader(const json& j, std::string* why) : j_(j), why_(why) {}

  bool ok() const { return ok_; }

  template <typename T>
  void Uint(const char* key, T* out, bool required) {
    auto it = Find(key, required);
    if (it == j_.end()) return;
    if (!it->is_number_unsigned() || it->get<uint64_t>() > std::numeric_limits<T>::max()) {
      Fail(key, "is not a number in range");
      return;
    }
    *out = static_cast<T>(it->get<uint64_t>());
  }
  // A signed integer clamped to [lo, hi] (what a request asks for, bounded by what is sane).
  template <typename T>
  void Int(const char* key, T* out, bool required, T lo, T hi) {
    auto it = Find(key, required);
    if (it == j_.end()) return;
    if (!it->is_number_integer()) {
      Fail(key, "is not an integer");
      return;
    }
    const int64_t v = it->is_number_unsigned()
                          ? static_cast<int64_t>(std::min<uint64_t>(
                                it->get<uint64_t>(), std::numeric_limits<int64_t>::max()))
                          : it->get<int64_t>();
    *out = static_cast<T>(std::clamp<int64_t>(v, lo, hi));
  }
  void Str(const char* key, std::string* out, bool required) {
    auto it = Find(key, required);
    if (it == j_.end()) return;
    if (!it->is_string()) {
      Fail(key, "is not a string");
      return;
    }
    *out = it->get<std::string>();
  }
  void Bool(const char* key, bool* out, bool required) {
    auto it = Find(key, required);
    if (it == j_.end()) return;
    if (!it->is_boolean()) {
      Fail(key, "is not true or false");
      return;
    }
    *out = it->get<bool>();
  }
  void Files(const char* key, std::vector<FileSum>* out, bool required) {
    auto it = Find(key, required);
    if (it == j_.end()) return;
    if (!it->is_array() || it->size() > static_cast<size_t>(kMaxFiles)) {
      Fail(key, "is not a list of at most kMaxFiles files");
      return;
    }
    for (const json& e : *it) {
      FileSum f;
      if (!e.is_object()) {
        Fail(key, "holds an entry that is not an object");
        return;
      }
      Reader r(e, why_);
      r.Uint("size", &f.size, true);
      r.Str("checksum", &f.checksum, true);
      if (!r.ok()) {
        ok_ = false;
        return;
      }
      out->push_back(std::move(f));
    }
  }
  void Shares(const char* key, std::vector<ShareRef>* out) {
    auto it = Find(key, false);
    if (it == j_.end()) return;
    if (!it->is_array() || it->size() > kMaxShares) {
      Fail(key, "is not a list of at most kMaxShares descriptors");
      return;
    }
    for (const json& e : *it) {
      ShareRef r;
      if (!e.is_object()) {
        Fail(key, "holds an entry that is not an object");
        return;
      }
      Reader rd(e, why_);
      rd.Uint("id", &r.id, true);
      rd.Int<int64_t>("fd", &r.fd, true, -1, std::numeric_limits<int32_t>::max());
      if (!rd.ok()) {
        ok_ = false;
        return;
      }
      out->push_back(r);
    }
  }
  void Ids(const char* key, std::vector<uint64_t>* out) {
    auto it = Find(key, false);
    if (it == j_.end()) return;
    if (!it->is_array() || it->size() > static_cast<size_t>(kMaxFiles)) {
      Fail(key, "is not a list of at most kMaxFiles ids");
      return;
    }
    for (const json& e : *it) {
      if (!e.is_number_unsigned()) {
        Fail(key, "holds an id that is not a number");
        return;
      }
      out->push_back(e.get<uint64_t>());
    }
  }
  void Fail(const char* key, const char* what) {
    if (ok_) *why_ = std::string("\"") + key + "\" " + what;
    ok_ = false;
  }

 private:
  json::const_iterator Find(const char* key, bool required) {
    auto it = j_.find(key);
    if (it == j_.end() && required) Fail(key, "is missing");
    return it;
  }

  const json& j_;
  std::string* why_;
  bool ok_ = true;
};

bool ParseObject(const std::string& text, json* j, std::string* why) {
  if (text.size() > kMaxMessage) {
    *why = "message longer than kMaxMessage";
    return false;
  }
  if (!json_text::DepthWithin(text, kMaxDepth)) {
    *why = "message nested too deeply";
    return false;
  }
  *j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j->is_object()) {
    *why = "message is not a JSON object";
    return false;
  }
  return true;
}

json SharesJson(const std::vector<ShareRef>& shares) {
  json a = json::array();
  for (const ShareRef& r : shares) a.push_back({{"id", r.id}, {"fd", r.fd}});
  return a;
}

json FilesJson(const std::vector<FileSum>& files) {
  json a = json::array();
  for (const FileSum& f : files) a.push_back({{"size", f.size}, {"checksum", f.checksum}});
  return a;
}

// The common part of every reply: ok, and when false the error. Returns whether to read a body.
bool DecodeHead(const json& j, bool* ok, Error* err, std::string* why, bool* good) {
  Reader r(j, why);
  r.Bool("ok", ok, true);
  if (r.ok() && !*ok) {
    r.Str("error", &err->message, false);
    r.Bool("rolled_back", &err->rolled_back, false);
    std::string code;
    r.Str("code", &code, false);
    // A code this side does not know is a failure all the same.
    if (!code.empty() && !ValueOf(kCodes, code, &err->code)) err->code = ErrorCode::kNone;
  }
  *good = r.ok();
  return r.ok() && *ok;
}

template <typename T, typename Body>
bool DecodeReply(const std::string& text, Reply<T>* out, std::string* why, Body body) {
  json j;
  if (!ParseObject(text, &j, why)) return false;
  bool good = false;
  *out = Reply<T>{};
  if (!DecodeHead(j, &out->ok, &out->error, why, &good)) return good;
  Reader r(j, why);
  body(r, j, &out->body);
  return r.ok();
}

bool EventIs(Reader& r, const char* want) {
  std::string ev;
  r.Str("event", &ev, true);
  if (r.ok() && ev != want) r.Fail("event", "names another step of the drain");
  return r.ok();
}

}  // namespace

const char* OpName(Op op) { return NameOf(kOps, op); }
const char* StateName(State s) { return NameOf(kStates, s); }

std::string Encode(const Request& r) {
  json j{{"op", OpName(r.op)}, {"version", r.version}};
  if (r.op == Op::kDrain) {
    j["threads"] = r.threads;
    j["timeout_ms"] = r.timeout_ms;
    j["stripe_bytes"] = r.stripe_bytes;
    j["files"] = r.files;
    if (r.hold_ms > 0) j["hold_ms"] = r.hold_ms;
    if (r.align) j["align"] = true;
    if (r.memory) j["memory"] = true;
    if (r.follow) j["follow"] = true;
    if (r.park > 0) {
      j["park"] = r.park;
      j["park_device"] = r.park_device;
    }
  } else if (r.op == Op::kAlign) {
    j["to"] = r.to;
    j["timeout_ms"] = r.timeout_ms;
  } else if (r.op == Op::kRefill) {
    j["threads"] = r.threads;
    j["files"] = r.files;
    j["expected"] = FilesJson(r.expected);
    if (r.hold_ms > 0) j["hold_ms"] = r.hold_ms;
    if (r.memory) j["memory"] = true;
    if (r.follow) j["follow"] = true;
    if (r.park > 0) j["park"] = r.park;
    if (r.filled) {
      j["filled"] = true;
      j["park_device"] = r.park_device;
    }
  } else if (r.op == Op::kGo && !r.imports.empty()) {
    j["files"] = r.files;
    j["imports"] = r.imports;
    if (r.more) j["more"] = true;
  } else if (r.op == Op::kShare) {
    j["id"] = r.id;
    j["secret"] = r.secret;
  } else if (r.op == Op::kProve) {
    j["secret"] = r.secret;
  }
  return j.dump();
}

std::string Encode(const Error& e) {
  json j{{"ok", false}, {"error", e.message}, {"rolled_back", e.rolled_back}};
  if (e.code != ErrorCode::kNone) j["code"] = NameOf(kCodes, e.code);
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string Encode(const StatusReply& r) {
  json j{{"ok", true},
         {"version", r.version},
         {"pid", r.pid},
         {"state", StateName(r.state)},
         {"owned_bytes", r.owned_bytes},
         {"owned_allocations", r.owned_allocations},
         {"owned_cumemalloc", r.owned_cumemalloc},
         {"foreign_allocations", r.foreign_allocations},
         {"min_bytes", r.min_bytes},
         {"wrapped_entry_points", r.wrapped_entry_points},
         {"calls", r.calls}};
  if (!r.disabled.empty()) j["disabled"] = r.disabled;
  if (!r.exports.empty()) j["exports"] = SharesJson(r.exports);
  if (r.imports > 0) j["imports"] = r.imports;
  if (!r.device.empty()) j["device"] = r.device;
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string Encode(const GatedReply& r) {
  return json{{"ok", true},
              {"event", kEventGated},
              {"collectives", r.collectives},
              {"counting", r.counting}}
      .dump();
}

std::string Encode(const QuiescedReply& r) {
  return json{{"ok", true},
              {"event", kEventQuiesced},
              {"quiesce_ms", r.quiesce_ms},
              {"exports", SharesJson(r.exports)},
              {"imports", SharesJson(r.imports)},
              {"foreign_shares", r.foreign_shares}}
      .dump();
}

std::string Encode(const ImportedReply& r) {
  return json{
      {"ok", true}, {"event", kEventImported}, {"imports", r.imports}, {"import_ms", r.import_ms}}
      .dump();
}

std::string Encode(const DrainedReply& r) {
  json j{{"ok", true},
         {"event", kEventDrained},
         {"bytes", r.bytes},
         {"allocations", r.allocations},
         {"quiesce_ms", r.quiesce_ms},
         {"copy_ms", r.copy_ms},
         {"release_ms", r.release_ms},
         {"total_ms", r.total_ms}};
  if (r.parked) j["parked"] = true;
  return j.dump();
}

std::string Encode(const SavedReply& r) {
  return json{
      {"ok", true}, {"event", kEventSaved}, {"files", FilesJson(r.files)}, {"write_ms", r.write_ms}}
      .dump();
}

std::string Encode(const RefillReply& r) {
  json j{{"ok", true},           {"bytes", r.bytes},       {"allocate_ms", r.allocate_ms},
         {"copy_ms", r.copy_ms}, {"total_ms", r.total_ms}, {"files", FilesJson(r.files)}};
  if (!r.exports.empty()) j["exports"] = SharesJson(r.exports);
  if (r.importing) j["importing"] = true;
  return j.dump();
}

std::string Encode(const ShareReply& r) { return json{{"ok", true}, {"size", r.size}}.dump(); }

std::string Encode(const TrackReply& r) {
  json j{{"ok", true}, {"features", r.features}};
  if (r.fork_counter != 0) j["fork_counter"] = r.fork_counter;
  return j.dump();
}

std::string Encode(const Challenge& c) {
  return json{{"ok", false},
              {"code", NameOf(kCodes, ErrorCode::kProve)},
              {"error",
               "first prove that you may read this process's memory (a peer that may "
               "ptrace it: cryod): send back the " +
                   std::to_string(c.length) + " bytes at " + std::to_string(c.address)},
              {"rolled_back", false},
              {"address", c.address},
              {"length", c.length}}
      .dump();
}

bool DecodeChallenge(const std::string& text, Challenge* out) {
  json j;
  std::string why;
  if (!ParseObject(text, &j, &why)) return false;
  Reader r(j, &why);
  bool ok = true;
  std::string code;
  r.Bool("ok", &ok, true);
  r.Str("code", &code, true);
  if (!r.ok() || ok || code != NameOf(kCodes, ErrorCode::kProve)) return false;
  Challenge c;
  r.Uint("address", &c.address, true);
  r.Uint("length", &c.length, true);
  if (!r.ok() || c.length == 0 || c.length > kChallengeBytes) return false;
  *out = c;
  return true;
}

bool Decode(const std::string& text, Request* out, std::string* why) {
  json j;
  if (!ParseObject(text, &j, why)) return false;
  *out = Request{};
  Reader r(j, why);
  std::string op;
  r.Str("op", &op, true);
  if (r.ok() && !ValueOf(kOps, op, &out->op)) r.Fail("op", "is not an op of this version");
  // A sender from before versions were sent speaks version 1.
  out->version = 1;
  r.Int("version", &out->version, false, 0, std::numeric_limits<int>::max());
  r.Int("threads", &out->threads, false, 1, 256);
  r.Int<int64_t>("timeout_ms", &out->timeout_ms, false, 1, 3600000);
  r.Uint("stripe_bytes", &out->stripe_bytes, false);
  r.Int("files", &out->files, false, 0, kMaxFiles);
  r.Int<int64_t>("hold_ms", &out->hold_ms, false, 0, kMaxHoldMs);
  r.Files("expected", &out->expected, false);
  r.Ids("imports", &out->imports);
  r.Bool("align", &out->align, false);
  r.Bool("memory", &out->memory, false);
  r.Bool("follow", &out->follow, false);
  r.Uint("park", &out->park, false);
  r.Str("park_device", &out->park_device, false);
  if (r.ok() && out->park_device.size() > 64) r.Fail("park_device", "is longer than a bus id");
  r.Bool("filled", &out->filled, false);
  r.Bool("more", &out->more, false);
  r.Uint("to", &out->to, false);
  r.Uint("id", &out->id, false);
  r.Str("secret", &out->secret, false);
  if (r.ok() && out->secret.size() > 64) r.Fail("secret", "is longer than a secret");
  return r.ok();
}

bool Decode(const std::string& text, Reply<StatusReply>* out, std::string* why) {
  return DecodeReply(text, out, why, [](Reader& r, const json& j, StatusReply* b) {
    r.Int("version", &b->version, true, 0, std::numeric_limits<int>::max());
    r.Int<int64_t>("pid", &b->pid, true, 0, std::numeric_limits<int32_t>::max());
    std::string state;
    r.Str("state", &state, true);
    if (r.ok() && !ValueOf(kStates, state, &b->state)) r.Fail("state", "is not a known state");
    r.Uint("owned_bytes", &b->owned_bytes, true);
    r.Uint("owned_allocations", &b->owned_allocations, true);
    r.Uint("owned_cumemalloc", &b->owned_cumemalloc, false);
    r.Uint("foreign_allocations", &b->foreign_allocations, false);
    r.Uint("min_bytes", &b->min_bytes, false);
    r.Uint("wrapped_entry_points", &b->wrapped_entry_points, false);
    r.Str("disabled", &b->disabled, false);
    r.Shares("exports", &b->exports);
    r.Uint("imports", &b->imports, false);
    r.Str("device", &b->device, false);
    if (auto it = j.find("calls"); it != j.end()) {
      if (!it->is_object() || it->size() > 4096) {
        r.Fail("calls", "is not a small object");
        return;
      }
      for (const auto& [k, v] : it->items()) {
        if (!v.is_number_unsigned()) {
          r.Fail("calls", "holds a count that is not a number");
          return;
        }
        b->calls[k] = v.get<uint64_t>();
      }
    }
  });
}

bool Decode(const std::string& text, Reply<GatedReply>* out, std::string* why) {
  return DecodeReply(text, out, why, [](Reader& r, const json&, GatedReply* b) {
    if (!EventIs(r, kEventGated)) return;
    r.Uint("collectives", &b->collectives, true);
    r.Bool("counting", &b->counting, false);
  });
}

bool Decode(const std::string& text, Reply<QuiescedReply>* out, std::string* why) {
  return DecodeReply(text, out, why, [](Reader& r, const json&, QuiescedReply* b) {
    if (!EventIs(r, kEventQuiesced)) return;
    r.Int<int64_t>("quiesce_ms", &b->quiesce_ms, false, 0, std::numeric_limits<int64_t>::max());
    r.Shares("exports", &b->exports);
    r.Shares("imports", &b->imports);
    r.Uint("foreign_shares", &b->foreign_shares, false);
  });
}

bool Decode(const std::string& text, Reply<ImportedReply>* out, std::string* why) {
  return DecodeReply(text, out, why, [](Reader& r, const json&, ImportedReply* b) {
    if (!EventIs(r, kEventImported)) return;
    r.Uint("imports", &b->imports, false);
    r.Int<int64_t>("import_ms", &b->import_ms, false, 0, std::numeric_limits<int64_t>::max());
  });
}

bool Decode(const std::string& text, Reply<DrainedReply>* out, std::string* why) {
  return DecodeReply(text, out, why, [](Reader& r, const json&, DrainedReply* b) {
    if (!EventIs(r, kEventDrained)) return;
    r.Uint("bytes", &b->bytes, true);
    r.Uint("allocations", &b->allocations, true);
    const int64_t kMax = std::numeric_limits<int64_t>::max();
    r.Int<int64_t>("quiesce_ms", &b->quiesce_ms, false, 0, kMax);
    r.Int<int64_t>("copy_ms", &b->copy_ms, false, 0, kMax);
    r.Int<int64_t>("release_ms", &b->release_ms, false, 0, kMax);
    r.Int<int64_t>("total_ms", &b->total_ms, false, 0, kMax);
    r.Bool("parked", &b->parked, false);
  });
}

bool Decode(const std::string& text, Reply<SavedReply>* out, std::string* why) {
  return DecodeReply(text, out, why, [](Reader& r, const json&, SavedReply* b) {
    if (!EventIs(r, kEventSaved)) return;
    r.Files("files", &b->files, true);
    r.Int<int64_t>("write_ms", &b->write_ms, false, 0, std::numeric_limits<int64_t>::max());
  });
}

bool Decode(const std::string& text, Reply<RefillReply>* out, std::string* why) {
  return DecodeReply(text, out, why, [](Reader& r, const json&, RefillReply* b) {
    const int64_t kMax = std::numeric_limits<int64_t>::max();
    r.Uint("bytes", &b->bytes, true);
    r.Int<int64_t>("allocate_ms", &b->allocate_ms, false, 0, kMax);
    r.Int<int64_t>("copy_ms", &b->copy_ms, false, 0, kMax);
    r.Int<int64_t>("total_ms", &b->total_ms, false, 0, kMax);
    r.Files("files", &b->files, false);
    r.Shares("exports", &b->exports);
    r.Bool("importing", &b->importing, false);
  });
}

bool Decode(const std::string& text, Reply<ShareReply>* out, std::string* why) {
  return DecodeReply(text, out, why,
                     [](Reader& r, const json&, ShareReply* b) { r.Uint("size", &b->size, true); });
}

bool Decode(const std::string& text, Reply<TrackReply>* out, std::string* why) {
  return DecodeReply(text, out, why, [](Reader& r, const json&, TrackReply* b) {
    r.Uint("features", &b->features, true);
    r.Uint("fork_counter", &b->fork_counter, false);
  });
}

}  // namespace cryo::contract::gpu_fastpath
