#pragma once

// One table per record cryo writes to disk (issue 35, must 4): each row is a field's key, how it
// is written and how it is read, so that a field is added in one place and the writer and the
// reader cannot disagree. The journal entry (daemon/journal/journal.cc) and the manifest
// (daemon/store/manifest.cc) are described by such tables; checks across fields stay beside
// them, after the read.
//
//   const json::Table<Task> kTask = {json::Member("pid", &Task::pid, json::kRequired), ...};
//   nlohmann::json j = json::Write(task, kTask);
//   CRYO_RETURN_IF_ERROR(json::Read(json::Fields(j, "tasks[0]"), kTask, task));

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "lib/base/json.h"
#include "lib/base/status.h"
#include "nlohmann/json.hpp"

namespace cryo::json {

template <typename T>
struct Field {
  std::string key;
  std::function<void(const T&, nlohmann::json&)> write;  // sets obj[key], or leaves it out
  std::function<absl::Status(const Fields&, T&)> read;
};

template <typename T>
using Table = std::vector<Field<T>>;

inline constexpr bool kRequired = true;
// How a member is written: always, or left out when it is empty, zero or false (a key older
// readers lack, or one that is there only when it says something).
enum class Emit { kAlways, kUnlessEmpty };

template <typename T>
nlohmann::json Write(const T& t, const Table<T>& table) {
  nlohmann::json j = nlohmann::json::object();
  for (const Field<T>& f : table) f.write(t, j);
  return j;
}

template <typename T>
absl::Status Read(const Fields& in, const Table<T>& table, T& t) {
  for (const Field<T>& f : table) CRYO_RETURN_IF_ERROR(f.read(in, t));
  return absl::OkStatus();
}

namespace table_internal {

template <typename M>
absl::Status ReadValue(const Fields& in, const char* key, M* out, bool required) {
  if constexpr (std::is_same_v<M, std::string>) {
    return in.Str(key, out, required);
  } else if constexpr (std::is_same_v<M, bool>) {
    return in.Bool(key, out, required);
  } else if constexpr (std::is_same_v<M, int>) {
    return in.Int(key, out, required);
  } else if constexpr (std::is_same_v<M, int64_t>) {
    return in.Int64(key, out, required);
  } else if constexpr (std::is_same_v<M, uint64_t>) {
    return in.Uint64(key, out, required);
  } else if constexpr (std::is_same_v<M, std::vector<int>>) {
    return in.Ints(key, out);
  } else if constexpr (std::is_same_v<M, std::vector<std::string>>) {
    return in.Strs(key, out);
  } else if constexpr (std::is_same_v<M, std::map<std::string, std::string>>) {
    return in.StrMap(key, out);
  } else if constexpr (std::is_same_v<M, std::set<uint32_t>> ||
                       std::is_same_v<M, std::vector<uint64_t>>) {
    // A list of non-negative integers that fit the element.
    using V = typename M::value_type;
    CRYO_ASSIGN_OR_RETURN(const nlohmann::json* v, in.Array(key, required));
    if (v == nullptr) return absl::OkStatus();
    M r;
    for (const auto& e : *v) {
      if (!e.is_number_unsigned() || e.template get<uint64_t>() > std::numeric_limits<V>::max()) {
        return absl::InvalidArgumentError(
            absl::StrCat("field '", in.Where(key), "' is not a list of non-negative integers"));
      }
      r.insert(r.end(), e.template get<V>());
    }
    *out = std::move(r);
    return absl::OkStatus();
  } else {
    static_assert(std::is_same_v<M, std::map<std::string, uint64_t>>, "no reader for this type");
    return in.Uint64Map(key, out);
  }
}

// Empty: a container with nothing in it, a zero number, false.
template <typename M>
bool Empty(const M& v) {
  if constexpr (requires { v.empty(); }) {
    return v.empty();
  } else if constexpr (std::is_arithmetic_v<M>) {
    return v == M{};
  } else {
    return false;
  }
}

}  // namespace table_internal

// A member reached by `get` (a callable T& -> M&, called with a const T& too: a generic lambda).
template <typename T, typename Get>
Field<T> Member(const char* key, Get get, bool required = false, Emit emit = Emit::kAlways) {
  return {key,
          [key, get, emit](const T& t, nlohmann::json& j) {
            const auto& v = get(t);
            if (emit == Emit::kUnlessEmpty && table_internal::Empty(v)) return;
            j[key] = v;
          },
          [key, get, required](const Fields& in, T& t) {
            return table_internal::ReadValue(in, key, &get(t), required);
          }};
}

// A plain member.
template <typename T, typename M>
Field<T> Member(const char* key, M T::*m, bool required = false, Emit emit = Emit::kAlways) {
  return Member<T>(
      key, [m](auto& t) -> auto& { return t.*m; }, required, emit);
}

// A member of a member ("options": the manifest's criu::JobOptions).
template <typename T, typename S, typename M>
Field<T> Member(const char* key, S T::*outer, M S::*inner, bool required = false,
                Emit emit = Emit::kAlways) {
  return Member<T>(
      key, [ outer, inner ](auto& t) -> auto& { return (t.*outer).*inner; }, required, emit);
}

// An enum written by its name: `name` gives it, `parse` reads it back (nullopt: unknown, the
// error `unknown` and the name read). Absent and not required: the member's value stays.
template <typename T, typename E>
Field<T> Enum(const char* key, E T::*m, const char* (*name)(E),
              std::optional<E> (*parse)(const std::string&), const char* unknown,
              bool required = false) {
  return {key, [key, m, name](const T& t, nlohmann::json& j) { j[key] = name(t.*m); },
          [key, m, name, parse, unknown, required](const Fields& in, T& t) -> absl::Status {
            std::string text = name(t.*m);
            CRYO_RETURN_IF_ERROR(in.Str(key, &text, required));
            const std::optional<E> e = parse(text);
            if (!e) return absl::InvalidArgumentError(absl::StrCat(unknown, " '", text, "'"));
            t.*m = *e;
            return absl::OkStatus();
          }};
}

// A field only written: derived from the record (a total) or fixed (a format), not read back.
template <typename T>
Field<T> WriteOnly(const char* key, std::function<void(const T&, nlohmann::json&)> write) {
  return {key, std::move(write), [](const Fields&, T&) { return absl::OkStatus(); }};
}

// A field with its own writer and reader (an enum's name, a section another module reads).
template <typename T>
Field<T> Custom(const char* key, std::function<void(const T&, nlohmann::json&)> write,
                std::function<absl::Status(const Fields&, T&)> read) {
  return {key, std::move(write), std::move(read)};
}

// A nested object holding more of the same record's members ("target", "source").
template <typename T>
Field<T> Section(const char* key, Table<T> inner, bool required = false) {
  return {key, [key, inner](const T& t, nlohmann::json& j) { j[key] = Write(t, inner); },
          [key, inner, required](const Fields& in, T& t) -> absl::Status {
            CRYO_ASSIGN_OR_RETURN(const nlohmann::json* obj, in.Object(key, required));
            if (obj == nullptr) return absl::OkStatus();
            return Read(Fields(*obj, key), inner, t);
          }};
}

// A JSON array of records of type E, each written by `table`.
template <typename E>
nlohmann::json WriteList(const std::vector<E>& list, const Table<E>& table) {
  nlohmann::json out = nlohmann::json::array();
  for (const E& e : list) out.push_back(Write(e, table));
  return out;
}

// Appends the records of the array `list` to `out`, each an object described by `table` and
// checked by `check` (may be empty) once read; `where` of an element is "<name>[i]".
template <typename E>
absl::Status ReadList(const nlohmann::json& list, const std::string& name, const Table<E>& table,
                      const std::function<absl::Status(const E&, const std::string&)>& check,
                      std::vector<E>* out) {
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string where = absl::StrCat(name, "[", i, "]");
    if (!list[i].is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(where, " is not an object"));
    }
    E e;
    CRYO_RETURN_IF_ERROR(Read(Fields(list[i], where), table, e));
    if (check) CRYO_RETURN_IF_ERROR(check(e, where));
    out->push_back(std::move(e));
  }
  return absl::OkStatus();
}

// A list of records of type E as a member (WriteList, ReadList under `key`).
template <typename T, typename E>
Field<T> Records(
    const char* key, std::vector<E> T::*m, std::type_identity_t<Table<E>> table,
    bool required = false,
    std::type_identity_t<std::function<absl::Status(const E&, const std::string&)>> check = nullptr,
    Emit emit = Emit::kAlways) {
  return {key,
          [key, m, table, emit](const T& t, nlohmann::json& j) {
            if (emit == Emit::kUnlessEmpty && (t.*m).empty()) return;
            j[key] = WriteList(t.*m, table);
          },
          [key, m, table, required, check](const Fields& in, T& t) -> absl::Status {
            CRYO_ASSIGN_OR_RETURN(const nlohmann::json* list, in.Array(key, required));
            if (list == nullptr) return absl::OkStatus();
            return ReadList(*list, key, table, check, &(t.*m));
          }};
}

}  // namespace cryo::json
