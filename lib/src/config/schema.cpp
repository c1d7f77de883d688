#include "ampctl/config/schema.h"

#include <cctype>
#include <cmath>
#include <limits>

namespace ampctl::config {

namespace {

bool is_ancestor(const std::string& a, const std::string& b) {
  return b.size() > a.size() && b.compare(0, a.size(), a) == 0 && b[a.size()] == '.';
}

}  // namespace

Where ParseState::locate(const std::string& path) const {
  std::string p = path;
  while (!p.empty()) {
    if (auto it = present.find(p); it != present.end()) return it->second;
    const size_t dot = p.rfind('.');
    if (dot == std::string::npos) break;
    p.resize(dot);
  }
  return root;
}

bool ParseState::from_command_line(const std::string& path) const {
  const Where w = locate(path);
  return !w.has_position() && w.origin.rfind("--", 0) == 0;
}

bool ParseState::failed_near(const std::string& path) const {
  for (const std::string& f : failed) {
    if (f == path || is_ancestor(f, path) || is_ancestor(path, f)) return true;
  }
  return false;
}

std::string IntRange::describe() const {
  if (min == INT64_MIN && max == INT64_MAX) return "any";
  if (max == INT64_MAX) return ">= " + std::to_string(min);
  if (min == INT64_MIN) return "<= " + std::to_string(max);
  return "in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
}

std::string IntRange::check(int64_t x) const {
  if (x >= min && x <= max) return {};
  return "must be " + describe() + ", got " + std::to_string(x);
}

std::string FloatRange::check(double x) const {
  const std::string got = ", got " + format_float(x);
  if (std::isnan(x)) return "must be a number" + got;
  if (std::isinf(x) && !allow_inf) return "must be finite" + got;
  // Values that become float32 (the loss scale and its bounds) must not round to infinity.
  constexpr double kF32Max = std::numeric_limits<float>::max();
  if (f32 && std::isfinite(x) && std::fabs(x) > kF32Max) {
    return "must be finite in float32 (at most " + format_float(kF32Max) + ")" + got;
  }
  // Rounded to float32, a tiny value becomes zero (1e-46) or a subnormal whose reciprocal is
  // infinite (1e-44): a loss scale of either turns every weight into NaN. Zero itself is left
  // to the range (min_scale: 0 means no floor).
  constexpr double kF32MinNormal = std::numeric_limits<float>::min();
  if (f32 && std::isfinite(x) && x != 0.0 && std::fabs(x) < kF32MinNormal) {
    return "must be a normal float32 value (0, or at least " + format_float(kF32MinNormal) +
           " in magnitude; smaller ones round to 0 or to a subnormal with an infinite "
           "reciprocal)" +
           got;
  }
  const bool below = min && (x < *min || (min_open && x == *min));
  const bool above = max && (x > *max || (max_open && x == *max));
  if (!below && !above) return {};
  return "must be " + bounds() + got;
}

// Every float key is used in float32 somewhere (the kernels' factors, the optimizer's
// hyperparameters, the scale), so the key's rule must hold for the value it becomes there too:
// backoff_factor 0.99999999 is 1.0 in float32, and a backoff by 1.0 backs nothing off.
std::string FloatRange::check_f32(double x) const {
  if (!std::isfinite(x)) return {};  // check() has ruled on it
  const auto rounded = static_cast<double>(static_cast<float>(x));
  if (rounded == x) return {};
  const std::string message = check(rounded);
  if (message.empty()) return {};
  return message.substr(0, message.rfind(", got ")) + ", got " + format_float(x) + ", which is " +
         format_float(rounded) + " in float32";
}

std::string FloatRange::bounds() const {
  if (min && max) {
    return std::string("in ") + (min_open ? "(" : "[") + format_float(*min) + ", " +
           format_float(*max) + (max_open ? ")" : "]");
  }
  if (min) return std::string(min_open ? "> " : ">= ") + format_float(*min);
  if (max) return std::string(max_open ? "< " : "<= ") + format_float(*max);
  return "any number";
}

// Finiteness is said only where it is not the rule (the reference states the rule once).
std::string FloatRange::describe() const {
  if (allow_inf) return bounds() + " or .inf";
  return bounds() + (f32 ? ", 0 or a normal float32" : "");
}

namespace detail {

namespace {

void report(const FieldInput& in, const Value& v, std::optional<size_t> index, std::string message,
            std::string hint = {}) {
  if (index) {
    in.fail_item(v, *index, std::move(message), std::move(hint));
  } else {
    in.fail(std::move(message), std::move(hint));
  }
}

// A quoted number is a string in YAML; say so when the unquoted text would have been right.
template <class Reader>
std::string unquote_hint(const Value& v, Reader reader) {
  if (!v.is_scalar() || v.plain) return {};
  Value unquoted = v;
  unquoted.plain = true;
  return reader(unquoted) ? "quoted values are strings: write " + v.text + " without quotes"
                          : std::string();
}

}  // namespace

bool read_int_value(const FieldInput& in, const Value& v, const IntRange& range, int64_t& out,
                    std::optional<size_t> index) {
  int64_t x = 0;
  switch (read_int(v, x)) {
    case ReadStatus::wrong_type:
      report(in, v, index, "expected an integer, got " + describe(v),
             unquote_hint(v, [](const Value& u) {
               int64_t ignored = 0;
               return read_int(u, ignored) == ReadStatus::ok;
             }));
      return false;
    case ReadStatus::out_of_range:
      report(in, v, index, "integer out of range (64-bit), got " + describe(v));
      return false;
    case ReadStatus::ok:
      break;
  }
  if (std::string message = range.check(x); !message.empty()) {
    report(in, v, index, std::move(message));
    return false;
  }
  out = x;
  return true;
}

bool read_float_value(const FieldInput& in, const Value& v, const FloatRange& range, double& out,
                      std::optional<size_t> index) {
  double x = 0.0;
  switch (read_float(v, x)) {
    case ReadStatus::wrong_type:
      report(in, v, index, "expected a number, got " + describe(v),
             unquote_hint(v, [](const Value& u) {
               double ignored = 0.0;
               return read_float(u, ignored) == ReadStatus::ok;
             }));
      return false;
    case ReadStatus::out_of_range:
      report(in, v, index, "number out of range (double), got " + describe(v));
      return false;
    case ReadStatus::ok:
      break;
  }
  if (std::string message = range.check(x); !message.empty()) {
    report(in, v, index, std::move(message));
    return false;
  }
  if (std::string message = range.check_f32(x); !message.empty()) {
    report(in, v, index, std::move(message), "write a value that float32 keeps inside the range");
    return false;
  }
  out = x;
  return true;
}

std::string bool_hint(const Value& v) {
  if (std::string h = unquote_hint(v, [](const Value& u) { return read_bool(u).has_value(); });
      !h.empty()) {
    return h;
  }
  if (!v.is_scalar()) return {};
  std::string lower = v.text;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "yes" || lower == "no" || lower == "on" || lower == "off" || lower == "y" ||
      lower == "n") {
    return "YAML 1.2 booleans are true and false only";
  }
  return {};
}

std::string choice_list(const std::vector<std::string>& names) {
  std::string s;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) s += i + 1 == names.size() ? " or " : ", ";
    s += names[i];
  }
  return s;
}

}  // namespace detail

}  // namespace ampctl::config

namespace ampctl::config {

namespace {

std::vector<std::string> split_path(const std::string& path) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    parts.push_back(path.substr(start, dot == std::string::npos ? dot : dot - start));
    if (dot == std::string::npos) return parts;
    start = dot + 1;
  }
}

std::string yaml_value(const nlohmann::ordered_json& v) {
  switch (v.type()) {
    case nlohmann::ordered_json::value_t::null:
      return "null";
    case nlohmann::ordered_json::value_t::boolean:
      return v.get<bool>() ? "true" : "false";
    case nlohmann::ordered_json::value_t::number_integer:
      return std::to_string(v.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned:
      return std::to_string(v.get<uint64_t>());
    case nlohmann::ordered_json::value_t::number_float:
      return format_float(v.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return yaml_string(v.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      std::string s = "[";
      for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + yaml_value(v[i]);
      return s + "]";
    }
    default:
      return "null";  // objects are sections, never leaf values
  }
}

nlohmann::json json_value(const nlohmann::ordered_json& v) {
  if (v.is_number_float() && !std::isfinite(v.get<double>())) return format_float(v.get<double>());
  if (v.is_array()) {
    nlohmann::json a = nlohmann::json::array();
    for (const auto& item : v) a.push_back(json_value(item));
    return a;
  }
  return nlohmann::json(v);
}

}  // namespace

std::string leaves_to_yaml(const std::vector<Leaf>& leaves, bool annotate,
                           const std::map<std::string, Where>* origins) {
  // The column the comments line up on: the listing in docs/reference.md, "Configuration", uses
  // about this.
  constexpr size_t kCommentColumn = 26;
  std::string out;
  std::vector<std::string> open;  // the sections the previous leaf was in
  std::string previous_top;
  bool previous_nested = false;
  for (const Leaf& leaf : leaves) {
    const std::vector<std::string> parts = split_path(leaf.path);
    const bool nested = parts.size() > 1;
    if (!out.empty() && parts[0] != previous_top && (nested || previous_nested)) out += '\n';
    size_t common = 0;
    while (common < open.size() && common + 1 < parts.size() && open[common] == parts[common]) {
      ++common;
    }
    open.resize(common);
    for (size_t i = common; i + 1 < parts.size(); ++i) {
      out += std::string(2 * i, ' ') + parts[i] + ":\n";
      open.push_back(parts[i]);
    }
    std::string line =
        std::string(2 * (parts.size() - 1), ' ') + parts.back() + ": " + yaml_value(leaf.value);
    std::string comment;
    if (annotate && origins != nullptr) {
      if (const auto it = origins->find(leaf.path); it != origins->end()) {
        const Where& w = it->second;
        comment.append("[").append(w.origin);
        if (w.has_position()) comment.append(":").append(std::to_string(w.line));
        comment.append("]");
      }
    }
    if (annotate && !leaf.help.empty()) {
      if (!comment.empty()) comment.append(" ");
      comment.append(leaf.help);
    }
    if (!comment.empty()) {
      line += std::string(line.size() + 2 > kCommentColumn ? 2 : kCommentColumn - line.size(), ' ');
      line += "# " + comment;
    }
    out += line + '\n';
    previous_top = parts[0];
    previous_nested = nested;
  }
  return out;
}

nlohmann::json leaves_to_json(const std::vector<Leaf>& leaves) {
  nlohmann::json root = nlohmann::json::object();
  for (const Leaf& leaf : leaves) {
    const std::vector<std::string> parts = split_path(leaf.path);
    nlohmann::json* node = &root;
    for (size_t i = 0; i + 1 < parts.size(); ++i) node = &(*node)[parts[i]];
    (*node)[parts.back()] = json_value(leaf.value);
  }
  return root;
}

}  // namespace ampctl::config
