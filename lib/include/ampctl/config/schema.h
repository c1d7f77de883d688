// The machinery behind "each config field is declared once": a Field says everything about one
// key (path, default, how to read and check a value, how to write it, help, which other choice
// it belongs to), and a Schema turns a list of them into the parser, the validator and the
// dumper. run_config.cpp holds the tables; other modules use run_config.h, not this header.
//
// Parsing one mapping takes four passes, so that every problem is found and none is reported
// twice: (1) the keys: unknown ones (with a did-you-mean hint), duplicates, sections that are
// not mappings; (2) the values, in table order: type and range of each, a required key that is
// missing, and a key that belongs to another choice (momentum under adamw), which is an error
// unless it holds its default (then it changes nothing); (3) derived defaults
// for absent keys; (4) cross-key checks (min_scale <= max_scale), skipped when a key they read
// was already rejected. Table order matters in pass 2: a field's conditions may only name
// fields declared before it (the Schema constructor checks this).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "ampctl/config/document.h"
#include "ampctl/config/problems.h"
#include "ampctl/config/reference.h"
#include "ampctl/config/scalars.h"

namespace ampctl::config {

// One key of the resolved configuration, as the dump writes it.
struct Leaf {
  std::string path;              // full dotted key path
  nlohmann::ordered_json value;  // null, bool, integer, float, string or a flat array
  std::string help;
};

// The state of one parse, shared by nested schemas (all key paths are full paths).
struct ParseState {
  Problems& problems;
  Where root;                            // the document itself: where missing keys are blamed
  std::string default_name;              // `name` when absent: the config file's stem
  std::map<std::string, Where> present;  // every key the document holds -> where it is written
  std::set<std::string> failed;          // keys whose value was rejected

  // Where `path` is written, else its nearest written ancestor, else the document.
  Where locate(const std::string& path) const;
  // Whether `path` (or its nearest written ancestor) was written by a command line's override
  // (--set, --grid): a problem it causes is reported there, not at a file's key it conflicts
  // with.
  bool from_command_line(const std::string& path) const;
  // True when `path`, an ancestor or a descendant of it was rejected.
  bool failed_near(const std::string& path) const;
};

// What a field's reader gets: the value under its key, and where to report problems.
struct FieldInput {
  const Value& value;
  std::string key;  // full path
  Where where;      // where the key is written
  ParseState& state;

  void fail(std::string message, std::string hint = {}) const {
    state.problems.add(where, key, std::move(message), std::move(hint));
  }
  // A problem about one element (`model.hidden[1]`), at the element when it has a position.
  void fail_item(const Value& item, size_t index, std::string message,
                 std::string hint = {}) const {
    state.problems.add(item.where.has_position() ? item.where : where,
                       key + "[" + std::to_string(index) + "]", std::move(message),
                       std::move(hint));
  }
};

// The field only applies while the field at `path` (same schema) has one of `values`.
struct Condition {
  std::string path;
  std::vector<std::string> values;
};

template <class T>
struct Field {
  std::string path;  // dotted, relative to the schema's root
  std::string help;
  std::vector<Condition> conditions;
  bool required = false;
  std::function<void(T&)> set_default;                        // static default
  std::function<void(T&, const ParseState&)> derive_default;  // computed default, when absent
  std::function<bool(const FieldInput&, T&)> read;            // false = rejected (reported)
  std::function<void(const T&, const std::string& full_path, std::vector<Leaf>&)> emit;
  std::function<std::string(const T&)> text;  // the value as a word, for conditions
  // For the reference (config/reference.h): the value's type and its accepted values in words.
  // The factories fill them; a key that is a section of its own (data.train) sets `document`,
  // which adds its rows instead of the one row made from these.
  std::string type;
  std::string range;
  std::function<void(const std::string& full_path, std::vector<KeyDoc>&)> document;

  Field when(std::string on, std::vector<std::string> values) && {
    conditions.push_back({std::move(on), std::move(values)});
    return std::move(*this);
  }
  Field require() && {
    required = true;
    set_default = nullptr;
    return std::move(*this);
  }
  Field derive(std::function<void(T&, const ParseState&)> fn) && {
    derive_default = std::move(fn);
    return std::move(*this);
  }
};

// A rule over several keys (relative paths). `test` returns "" when the rule holds, else a
// message about the first key; it is reported at the first of `keys` the document holds (so a
// --set that breaks the rule is named even when the first key comes from the file's default).
template <class T>
struct Check {
  std::vector<std::string> keys;
  std::function<std::string(const T&)> test;
};

template <class T>
class Schema {
 public:
  Schema(std::vector<Field<T>> fields, std::vector<Check<T>> checks = {},
         std::vector<std::string> required_sections = {});

  // Runs after the static defaults and before reading, e.g. to infer a kind from the keys.
  std::function<void(T&, const Value&)> preset;
  // An extra hint for an unknown key (empty = the usual did-you-mean).
  std::function<std::string(const std::string& key)> unknown_key_hint;

  void set_defaults(T& out) const;
  // Reads `map` (a mapping; null counts as empty) whose keys live under `prefix` ("" or
  // "data.train."). Problems go to state.problems; `out` is filled as far as it is valid.
  void parse(const Value& map, const std::string& prefix, T& out, ParseState& state) const;
  // Every applicable key, in table order.
  void emit(const T& value, const std::string& prefix, std::vector<Leaf>& out) const;
  // Every key, applicable or not, with its static default (config/reference.h).
  void document(const std::string& prefix, std::vector<KeyDoc>& out) const;

  const std::vector<Field<T>>& fields() const { return m_fields; }

 private:
  const Field<T>* find(const std::string& path) const;
  // Whether `field` applies to `value`: nullopt when a condition's field was rejected. A false
  // answer names the condition that fails.
  std::optional<bool> applies(const Field<T>& field, const T& value, const std::string& prefix,
                              const ParseState* state, const Condition** failing) const;
  // Whether the field holds the same value in a and b (compared as the dump writes them).
  bool same_value(const Field<T>& field, const T& a, const T& b) const;
  // "optimizer.type is sgd" / "... is adam or adamw" (with the prefix).
  std::string condition_text(const Condition& c, const std::string& prefix) const;
  void walk(const Value& map, const std::string& rel, const std::string& prefix,
            std::map<std::string, const Value::Entry*>& found, ParseState& state) const;
  void report_unknown(const Value::Entry& entry, const std::string& rel, const std::string& prefix,
                      ParseState& state) const;

  std::vector<Field<T>> m_fields;
  std::vector<Check<T>> m_checks;
  std::vector<std::string> m_required_sections;
  std::set<std::string> m_sections;  // every proper prefix of a field path
};

// ---- ranges ----

struct IntRange {
  int64_t min = INT64_MIN;
  int64_t max = INT64_MAX;
  std::string check(int64_t x) const;  // "" or "must be >= 1, got 0"
  std::string describe() const;        // ">= 1", "in [1, 10]", "any"
};

struct FloatRange {
  std::optional<double> min, max;
  bool min_open = false, max_open = false;
  bool allow_inf = false;  // otherwise the value must be finite
  bool f32 = false;        // must also be finite, and 0 or normal, once rounded to float32
  std::string check(double x) const;  // "" or "must be > 1.0, got 0.5"
  // "" or check()'s rule broken by x rounded to float32: "must be in (0.0, 1.0), got
  // 0.99999999, which is 1.0 in float32".
  std::string check_f32(double x) const;
  std::string bounds() const;    // "> 1.0", "in (0.0, 1.0)", "any number"
  std::string describe() const;  // bounds() and any exception to "finite": "> 0.0 or .inf"

  static FloatRange any() { return {}; }
  static FloatRange at_least(double lo) { return {lo, std::nullopt, false, false}; }
  static FloatRange above(double lo) { return {lo, std::nullopt, true, false}; }
  static FloatRange open(double lo, double hi) { return {lo, hi, true, true}; }
  static FloatRange closed_open(double lo, double hi) { return {lo, hi, false, true}; }
  static FloatRange closed(double lo, double hi) { return {lo, hi, false, false}; }
  FloatRange with_inf() && {
    allow_inf = true;
    return *this;
  }
  FloatRange in_f32() && {
    f32 = true;
    return *this;
  }
};

inline constexpr int64_t kInt32Max = 2147483647;

// A key path and its accessor from one spelling: AMPCTL_KEY(scaler.init_scale) gives
// "scaler.init_scale" and [](auto& c) -> auto& { return c.scaler.init_scale; }, so the YAML key
// path is, by construction, the member path.
#define AMPCTL_KEY(member)        \
#member, [](auto& c) -> auto& { \
    return c.member;              \
  }

// ---- field factories (Get: an accessor as made by AMPCTL_KEY) ----

namespace detail {

template <class T, class Get, class V>
Field<T> base_field(std::string path, Get get, V def, std::string help) {
  Field<T> f;
  f.path = std::move(path);
  f.help = std::move(help);
  f.set_default = [get, def](T& c) { get(c) = def; };
  return f;
}

template <class T, class Get>
void emit_as_json(Field<T>& f, Get get) {
  f.emit = [get, help = f.help](const T& c, const std::string& full, std::vector<Leaf>& out) {
    out.push_back({full, nlohmann::ordered_json(get(c)), help});
  };
}

bool read_int_value(const FieldInput& in, const Value& v, const IntRange& range, int64_t& out,
                    std::optional<size_t> index);
bool read_float_value(const FieldInput& in, const Value& v, const FloatRange& range, double& out,
                      std::optional<size_t> index);
std::string choice_list(const std::vector<std::string>& names);
// "write it without quotes" for a quoted true/false, "YAML 1.2 has only true and false" for
// yes/no/on/off; else "".
std::string bool_hint(const Value& v);

}  // namespace detail

template <class T, class Get>
Field<T> bool_field(std::string path, Get get, bool def, std::string help) {
  auto f = detail::base_field<T>(std::move(path), get, def, std::move(help));
  f.read = [get](const FieldInput& in, T& c) {
    const std::optional<bool> b = read_bool(in.value);
    if (!b) {
      in.fail("expected true or false, got " + describe(in.value), detail::bool_hint(in.value));
      return false;
    }
    get(c) = *b;
    return true;
  };
  detail::emit_as_json(f, get);
  f.text = [get](const T& c) -> std::string { return get(c) ? "true" : "false"; };
  f.type = "bool";
  return f;
}

template <class T, class Get>
Field<T> int_field(std::string path, Get get, int64_t def, IntRange range, std::string help) {
  auto f = detail::base_field<T>(std::move(path), get, def, std::move(help));
  f.read = [get, range](const FieldInput& in, T& c) {
    return detail::read_int_value(in, in.value, range, get(c), std::nullopt);
  };
  detail::emit_as_json(f, get);
  f.type = "int";
  f.range = range.describe();
  return f;
}

template <class T, class Get>
Field<T> float_field(std::string path, Get get, double def, FloatRange range, std::string help) {
  auto f = detail::base_field<T>(std::move(path), get, def, std::move(help));
  f.read = [get, range](const FieldInput& in, T& c) {
    return detail::read_float_value(in, in.value, range, get(c), std::nullopt);
  };
  detail::emit_as_json(f, get);
  f.type = "float";
  f.range = range.describe();
  return f;
}

// A float or null (default null).
template <class T, class Get>
Field<T> nullable_float_field(std::string path, Get get, FloatRange range, std::string help) {
  auto f = detail::base_field<T>(std::move(path), get, std::optional<double>{}, std::move(help));
  f.read = [get, range](const FieldInput& in, T& c) {
    if (is_plain_null(in.value)) {
      get(c).reset();
      return true;
    }
    double x = 0.0;
    if (!detail::read_float_value(in, in.value, range, x, std::nullopt)) return false;
    get(c) = x;
    return true;
  };
  f.emit = [get, help = f.help](const T& c, const std::string& full, std::vector<Leaf>& out) {
    const auto& v = get(c);
    out.push_back({full, v ? nlohmann::ordered_json(*v) : nlohmann::ordered_json(nullptr), help});
  };
  f.type = "float or null";
  f.range = "null, or " + range.describe();
  return f;
}

// `check` returns "" for a good string, else the message.
template <class T, class Get>
Field<T> string_field(std::string path, Get get, std::string def,
                      std::function<std::string(const std::string&)> check, std::string help) {
  auto f = detail::base_field<T>(std::move(path), get, std::move(def), std::move(help));
  f.read = [get, check](const FieldInput& in, T& c) {
    if (!in.value.is_scalar() || is_plain_null(in.value)) {
      in.fail("expected a string, got " + describe(in.value));
      return false;
    }
    // Strings end up in JSON (checkpoints, summary.json), which must be UTF-8.
    if (std::string message = utf8_problem(in.value.text); !message.empty()) {
      in.fail(std::move(message));
      return false;
    }
    if (check) {
      if (std::string message = check(in.value.text); !message.empty()) {
        in.fail(std::move(message));
        return false;
      }
    }
    get(c) = in.value.text;
    return true;
  };
  detail::emit_as_json(f, get);
  f.type = "string";
  return f;
}

// One of `names` (the enum's table of YAML spellings); `allowed`, when given, narrows it.
template <class T, class E, class Get>
Field<T> enum_field(std::string path, Get get, E def,
                    std::type_identity_t<std::span<const std::pair<E, const char*>>> names,
                    std::string help, std::type_identity_t<std::vector<E>> allowed = {}) {
  auto f = detail::base_field<T>(std::move(path), get, def, std::move(help));
  std::vector<std::pair<E, std::string>> choices;
  for (const auto& [e, name] : names) {
    if (allowed.empty() || std::find(allowed.begin(), allowed.end(), e) != allowed.end()) {
      choices.emplace_back(e, name);
    }
  }
  f.read = [get, choices](const FieldInput& in, T& c) {
    if (in.value.is_scalar()) {
      for (const auto& [e, name] : choices) {
        if (in.value.text == name) {
          get(c) = e;
          return true;
        }
      }
    }
    std::vector<std::string> words;
    for (const auto& choice : choices) words.push_back(choice.second);
    std::string hint;
    if (in.value.is_scalar()) {
      if (std::string near = closest_match(in.value.text, words); !near.empty()) {
        hint = "did you mean '" + near + "'?";
      }
    }
    in.fail("must be " + detail::choice_list(words) + ", got " + describe(in.value), hint);
    return false;
  };
  auto name_of = [names](E e) -> std::string {
    for (const auto& [v, name] : names) {
      if (v == e) return name;
    }
    return "?";
  };
  f.emit = [get, name_of, help = f.help](const T& c, const std::string& full,
                                         std::vector<Leaf>& out) {
    out.push_back({full, name_of(get(c)), help});
  };
  f.text = [get, name_of](const T& c) { return name_of(get(c)); };
  f.type = "choice";
  for (const auto& choice : choices) f.range += (f.range.empty() ? "" : ", ") + choice.second;
  return f;
}

// A list of integers, each in `range`.
template <class T, class Get>
Field<T> int_list_field(std::string path, Get get, std::vector<int64_t> def, IntRange range,
                        std::string help) {
  auto f = detail::base_field<T>(std::move(path), get, std::move(def), std::move(help));
  f.read = [get, range](const FieldInput& in, T& c) {
    if (!in.value.is_list()) {
      const std::string hint =
          in.value.is_scalar() ? "write a list, e.g. [" + in.value.text + "]" : "";
      in.fail("expected a list of integers, got " + describe(in.value), hint);
      return false;
    }
    std::vector<int64_t> values(in.value.items.size());
    bool ok = true;
    for (size_t i = 0; i < values.size(); ++i) {
      ok = detail::read_int_value(in, in.value.items[i], range, values[i], i) && ok;
    }
    if (ok) get(c) = std::move(values);
    return ok;
  };
  detail::emit_as_json(f, get);
  f.type = "list of int";
  f.range = "each " + range.describe();
  return f;
}

// Exactly two floats, each in `range`.
template <class T, class Get>
Field<T> float_pair_field(std::string path, Get get, std::array<double, 2> def, FloatRange range,
                          std::string help) {
  auto f = detail::base_field<T>(std::move(path), get, def, std::move(help));
  f.read = [get, range](const FieldInput& in, T& c) {
    if (!in.value.is_list() || in.value.items.size() != 2) {
      const std::string got = in.value.is_list()
                                  ? "a list of " + std::to_string(in.value.items.size())
                                  : describe(in.value);
      in.fail("expected a list of two numbers, got " + got);
      return false;
    }
    std::array<double, 2> values{};
    bool ok = true;
    for (size_t i = 0; i < 2; ++i) {
      ok = detail::read_float_value(in, in.value.items[i], range, values[i], i) && ok;
    }
    if (ok) get(c) = values;
    return ok;
  };
  detail::emit_as_json(f, get);
  f.type = "[float, float]";
  f.range = "each " + range.describe();
  return f;
}

// ---- the dump ----

// Leaves (in order) as block YAML: sections opened as their paths change, lists in flow style,
// a blank line between top-level groups; `annotate` adds each leaf's help as a comment.
// With `origins` (annotate only), a leaf found there says where it was written before its help.
std::string leaves_to_yaml(const std::vector<Leaf>& leaves, bool annotate,
                           const std::map<std::string, Where>* origins = nullptr);

// The hint for a key its condition does not use: remove it, or give it its default (named, so
// that a resume, which cannot remove a key of the checkpoint's config, can --set it; an empty
// default, a path's, is not worth naming), or change what the condition reads.
inline std::string unused_key_hint(const std::string& default_text, const std::string& condition,
                                   const std::string& choices) {
  const std::string keep = default_text == "\"\"" || default_text.empty()
                               ? "remove it"
                               : "remove it or give its default (" + default_text + ")";
  return keep + ", or set " + condition + " to " + choices;
}

// f's value in v exactly as the resolved config.yaml writes it (one leaf "k: VALUE\n").
template <class T>
std::string yaml_text(const Field<T>& f, const T& v) {
  std::vector<Leaf> leaves;
  f.emit(v, "", leaves);
  const std::string line = leaves_to_yaml({{"k", leaves.at(0).value, ""}}, false);
  return line.substr(3, line.size() - 4);
}

// Leaves as nested JSON objects; non-finite floats become ".inf", "-.inf", ".nan".
nlohmann::json leaves_to_json(const std::vector<Leaf>& leaves);

// ---- Schema ----

template <class T>
Schema<T>::Schema(std::vector<Field<T>> fields, std::vector<Check<T>> checks,
                  std::vector<std::string> required_sections)
    : m_fields(std::move(fields)),
      m_checks(std::move(checks)),
      m_required_sections(std::move(required_sections)) {
  std::set<std::string> seen;
  for (const Field<T>& f : m_fields) {
    for (size_t dot = f.path.find('.'); dot != std::string::npos; dot = f.path.find('.', dot + 1)) {
      m_sections.insert(f.path.substr(0, dot));
    }
    // A condition reads a field that pass 2 has already read (see the file comment).
    for (const Condition& c : f.conditions) {
      const Field<T>* on = find(c.path);
      if (on == nullptr || !on->text || !seen.count(c.path)) {
        throw Error{ErrorKind::runtime, "config schema: " + f.path + " depends on " + c.path +
                                            ", which is not an earlier choice field"};
      }
    }
    seen.insert(f.path);
  }
}

template <class T>
const Field<T>* Schema<T>::find(const std::string& path) const {
  for (const Field<T>& f : m_fields) {
    if (f.path == path) return &f;
  }
  return nullptr;
}

template <class T>
void Schema<T>::set_defaults(T& out) const {
  for (const Field<T>& f : m_fields) {
    if (f.set_default) f.set_default(out);
  }
}

template <class T>
std::optional<bool> Schema<T>::applies(const Field<T>& field, const T& value,
                                       const std::string& prefix, const ParseState* state,
                                       const Condition** failing) const {
  for (const Condition& c : field.conditions) {
    if (state != nullptr && state->failed_near(prefix + c.path)) return std::nullopt;
    const std::string now = find(c.path)->text(value);
    if (std::find(c.values.begin(), c.values.end(), now) == c.values.end()) {
      if (failing != nullptr) *failing = &c;
      return false;
    }
  }
  return true;
}

template <class T>
bool Schema<T>::same_value(const Field<T>& field, const T& a, const T& b) const {
  std::vector<Leaf> la, lb;
  field.emit(a, "", la);
  field.emit(b, "", lb);
  if (la.size() != lb.size()) return false;
  for (size_t i = 0; i < la.size(); ++i) {
    if (la[i].value != lb[i].value) return false;
  }
  return true;
}

template <class T>
std::string Schema<T>::condition_text(const Condition& c, const std::string& prefix) const {
  return prefix + c.path + " is " + detail::choice_list(c.values);
}

template <class T>
void Schema<T>::report_unknown(const Value::Entry& entry, const std::string& rel,
                               const std::string& prefix, ParseState& state) const {
  // Siblings first (a typo), then the same name elsewhere (a key in the wrong section).
  std::vector<std::string> siblings;
  auto add_child = [&](const std::string& path) {
    if (path.size() <= rel.size() || path.compare(0, rel.size(), rel) != 0) return;
    const std::string child = path.substr(rel.size(), path.find('.', rel.size()) - rel.size());
    if (std::find(siblings.begin(), siblings.end(), child) == siblings.end()) {
      siblings.push_back(child);
    }
  };
  for (const Field<T>& f : m_fields) add_child(f.path);
  const bool from_override =
      !entry.key_where.has_position() && entry.key_where.origin.rfind("--set ", 0) == 0;
  std::string hint;
  if (unknown_key_hint) hint = unknown_key_hint(entry.key);
  if (hint.empty()) {
    if (std::string near = closest_match(entry.key, siblings); !near.empty()) {
      hint = "did you mean '" + (from_override ? prefix + rel + near : near) + "'?";
    }
  }
  if (hint.empty()) {
    std::vector<std::string> elsewhere;
    for (const Field<T>& f : m_fields) {
      const size_t dot = f.path.rfind('.');
      const std::string last = dot == std::string::npos ? f.path : f.path.substr(dot + 1);
      if (last == entry.key) elsewhere.push_back("'" + prefix + f.path + "'");
    }
    if (!elsewhere.empty()) hint = "did you mean " + detail::choice_list(elsewhere) + "?";
  }
  if (hint.empty() && !siblings.empty()) {
    hint = "valid keys here: " + [&] {
      std::string list;
      for (const std::string& s : siblings) list += (list.empty() ? "" : ", ") + s;
      return list;
    }();
  }
  state.problems.add(entry.key_where, prefix + rel + entry.key, "unknown key", hint);
}

template <class T>
void Schema<T>::walk(const Value& map, const std::string& rel, const std::string& prefix,
                     std::map<std::string, const Value::Entry*>& found, ParseState& state) const {
  std::map<std::string, const Value::Entry*> seen;
  for (const Value::Entry& entry : map.entries) {
    const std::string path = rel + entry.key;
    const std::string full = prefix + path;
    if (auto it = seen.find(entry.key); it != seen.end()) {
      state.problems.add(entry.key_where, full,
                         "duplicate key (also at " + it->second->key_where.str() + ")");
      state.failed.insert(full);
      continue;
    }
    seen[entry.key] = &entry;
    if (find(path) != nullptr) {
      found[path] = &entry;
      state.present[full] = entry.key_where;
    } else if (m_sections.count(path)) {
      state.present[full] = entry.key_where;
      if (entry.value.is_map()) {
        walk(entry.value, path + ".", prefix, found, state);
      } else if (!is_plain_null(entry.value)) {  // an empty section takes every default
        state.problems.add(entry.key_where, full,
                           "expected a mapping of keys, got " + describe(entry.value));
        state.failed.insert(full);
      }
    } else {
      report_unknown(entry, rel, prefix, state);
    }
  }
}

template <class T>
void Schema<T>::parse(const Value& map, const std::string& prefix, T& out,
                      ParseState& state) const {
  set_defaults(out);
  if (preset) preset(out, map);
  // Pass 1: the keys.
  std::map<std::string, const Value::Entry*> found;
  if (map.is_map()) walk(map, "", prefix, found, state);
  for (const std::string& section : m_required_sections) {
    if (!state.present.count(prefix + section)) {
      state.problems.add(state.locate(prefix + section), prefix + section,
                         "missing: every configuration needs a '" + section + "' section",
                         "add '" + section + ": {}' to take every default");
    }
  }
  // Pass 2: the values, in table order.
  for (const Field<T>& f : m_fields) {
    const std::string full = prefix + f.path;
    auto it = found.find(f.path);
    if (state.failed.count(full)) continue;  // a duplicate key, already reported
    if (it == found.end() && state.failed_near(full)) continue;  // its section was rejected
    const Condition* failing = nullptr;
    const std::optional<bool> applicable = applies(f, out, prefix, &state, &failing);
    if (it == found.end()) {
      if (f.required && applicable == true) {
        std::string when;
        for (const Condition& c : f.conditions) {
          when += (when.empty() ? " when " : " and ") + prefix + c.path + " is " +
                  find(c.path)->text(out);
        }
        state.problems.add(state.locate(full), full, "missing (required" + when + ")");
        state.failed.insert(full);
      }
      continue;
    }
    const Value::Entry& entry = *it->second;
    const FieldInput in{entry.value, full, entry.key_where, state};
    if (applicable == false) {
      // Accepted only when it says what not using it means anyway (its default), so a listing
      // of every key (docs/reference.md's) is valid and no setting is silently ignored. The hint
      // names the default: a resume that switches scaler.policy cannot remove a key of the
      // checkpoint's config, but it can --set it to that.
      T written = out, fallback = out;
      if (f.set_default) f.set_default(fallback);
      if (!f.read(in, written)) {
        state.failed.insert(full);
      } else if (!same_value(f, written, fallback)) {
        // A command line's override that switched the condition is what to change (resume
        // --set scaler.policy=fairseq on a run with hysteresis: 3), not the file's key.
        const std::string on = prefix + failing->path;
        const bool blame_condition = state.from_command_line(on) && !state.from_command_line(full);
        state.problems.add(blame_condition ? state.locate(on) : entry.key_where, full,
                           "only used when " + condition_text(*failing, prefix) + " (it is " +
                               find(failing->path)->text(out) + ")",
                           unused_key_hint(yaml_text(f, fallback), prefix + failing->path,
                                           detail::choice_list(failing->values)));
        state.failed.insert(full);
      }
      continue;
    }
    if (!f.read(in, out)) state.failed.insert(full);
  }
  // Pass 3: derived defaults (a key that does not apply keeps its static default).
  for (const Field<T>& f : m_fields) {
    if (f.derive_default && !found.count(f.path) &&
        applies(f, out, prefix, nullptr, nullptr) == true) {
      f.derive_default(out, state);
    }
  }
  // Pass 4: rules over several keys.
  for (const Check<T>& check : m_checks) {
    bool skip = false;
    for (const std::string& key : check.keys) skip = skip || state.failed_near(prefix + key);
    if (skip) continue;
    std::string message = check.test(out);
    if (message.empty()) continue;
    // The message is about the first key; it is shown where the first key a command line's
    // override wrote is (what broke the rule: a --set on top of a file or a checkpoint that
    // held), else where the first written key is.
    std::string written = check.keys.front();
    bool found_written = false;
    for (const std::string& key : check.keys) {
      if (state.present.count(prefix + key) && state.from_command_line(prefix + key)) {
        written = key;
        found_written = true;
        break;
      }
    }
    for (const std::string& key : check.keys) {
      if (found_written) break;
      if (state.present.count(prefix + key)) {
        written = key;
        break;
      }
    }
    const std::string key = prefix + check.keys.front();
    state.problems.add(state.locate(prefix + written), key, std::move(message));
    state.failed.insert(key);
  }
}

template <class T>
void Schema<T>::emit(const T& value, const std::string& prefix, std::vector<Leaf>& out) const {
  for (const Field<T>& f : m_fields) {
    if (applies(f, value, prefix, nullptr, nullptr) == true) f.emit(value, prefix + f.path, out);
  }
}

template <class T>
void Schema<T>::document(const std::string& prefix, std::vector<KeyDoc>& out) const {
  T defaults{};
  set_defaults(defaults);
  for (const Field<T>& f : m_fields) {
    if (f.document) {
      f.document(prefix + f.path, out);
      continue;
    }
    KeyDoc row{prefix + f.path, f.type, "", f.range, "", f.help};
    if (f.required) {
      row.default_value = "required";
    } else if (f.derive_default) {
      row.default_value = "derived";  // the help says from what
    } else {
      row.default_value = yaml_text(f, defaults);
    }
    for (const Condition& c : f.conditions) {
      row.applies += (row.applies.empty() ? "" : " and ") + condition_text(c, prefix);
    }
    out.push_back(std::move(row));
  }
}

}  // namespace ampctl::config
