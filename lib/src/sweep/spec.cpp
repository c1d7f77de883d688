// Sweep specification: --grid flags and the `sweep:` section expanded into runs, and validated.
#include <yaml-cpp/yaml.h>

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <sstream>

#include "ampctl/config/config_file.h"
#include "ampctl/config/document.h"
#include "ampctl/config/problems.h"
#include "ampctl/config/run_config.h"
#include "ampctl/core/error.h"
#include "ampctl/sweep/sweep.h"

namespace ampctl::sweep {

namespace {

// "KEY=VALUE" overrides, each with who said it (a line of the file, or --grid). Two combos are
// the same run when their texts are equal, wherever they were said.
using Said = config::SaidOverride;
using Combo = std::vector<Said>;

// A named `runs:` entry's combo starts with a marker, "\x01K\x01NAME": its name and how many
// overrides after it are the entry's own (the rest are grid, random and seed values). The
// marker is no override: texts() and the comparisons leave it out.
constexpr char kNameMark = '\x01';

bool is_mark(const Said& o) {
  return !o.text.empty() && o.text[0] == kNameMark;
}

// A key of the sweep (a runs entry's, a grid axis's, a random parameter's, a --grid flag's) with
// a control character is no configuration key, and one starting with the marker above would be
// taken for a name: refused before anything is expanded.
void check_key_text(const std::string& key, const std::string& where) {
  for (char c : key) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      throw Error{ErrorKind::config,
                  where + ": sweep key '" + key + "' holds a control character: no key does"};
    }
  }
}

struct ByText {
  bool operator()(const Combo& a, const Combo& b) const {
    const size_t ia = !a.empty() && is_mark(a[0]) ? 1 : 0, ib = !b.empty() && is_mark(b[0]) ? 1 : 0;
    return std::lexicographical_compare(
        a.begin() + static_cast<std::ptrdiff_t>(ia), a.end(),
        b.begin() + static_cast<std::ptrdiff_t>(ib), b.end(),
        [](const Said& x, const Said& y) { return x.text < y.text; });
  }
};

std::vector<std::string> texts(const Combo& c) {
  std::vector<std::string> out;
  out.reserve(c.size());
  for (const Said& o : c) {
    if (!is_mark(o)) out.push_back(o.text);
  }
  return out;
}

// A value's place in the file (yaml-cpp's marks are 0-based).
config::Where at(const YAML::Node& node, const std::string& origin) {
  const YAML::Mark m = node.Mark();
  if (m.line < 0) return config::Where{origin};
  return config::Where{origin, m.line + 1, m.column + 1};
}

std::string trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && (s[b] == ' ' || s[b] == '\t')) ++b;
  while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t')) --e;
  return std::string(s.substr(b, e - b));
}

[[noreturn]] void spec_error(const std::string& origin, const std::string& message,
                             const std::string& hint = {}) {
  throw Error{ErrorKind::config, origin + ": " + message, hint};
}

std::string flow_text(const YAML::Node& node) {
  if (node.IsScalar()) return node.Scalar();
  YAML::Emitter e;
  e << YAML::Flow << node;
  return e.c_str();
}

// A list (or one value) of the file as "KEY=VALUE" overrides, each at its place.
std::vector<Said> said_values(const std::string& key, const YAML::Node& node,
                              const std::string& origin) {
  std::vector<Said> values;
  if (node.IsSequence()) {
    for (const auto& item : node) values.push_back({key + "=" + flow_text(item), at(item, origin)});
  } else if (!node.IsNull()) {
    values.push_back({key + "=" + flow_text(node), at(node, origin)});
  }
  return values;
}

// One axis: its key and each value as an override.
struct Axis {
  std::string key;
  std::vector<Said> values;
};

// The product of `combos` with each value of an axis (the axis varies fastest).
std::vector<Combo> product(const std::vector<Combo>& combos, const Axis& axis) {
  std::vector<Combo> out;
  for (const Combo& c : combos) {
    for (const Said& v : axis.values) {
      Combo next = c;
      next.push_back(v);
      out.push_back(std::move(next));
    }
  }
  return out;
}

// A double in [0, 1) from 53 random bits (the same on every platform).
double unit(std::mt19937_64& gen) {
  return static_cast<double>(gen() >> 11) * (1.0 / 9007199254740992.0);
}

bool is_integer_text(const std::string& s) {
  if (s.empty()) return false;
  size_t i = (s[0] == '-' || s[0] == '+') ? 1 : 0;
  if (i == s.size()) return false;
  for (; i < s.size(); ++i)
    if (s[i] < '0' || s[i] > '9') return false;
  return true;
}

std::string format_double(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  std::string s = buf;
  // Keep it a YAML float (not an int) when it looks like one.
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

double bound(const YAML::Node& n, const std::string& origin, const std::string& key) {
  try {
    return n.as<double>();
  } catch (const YAML::Exception&) {
    spec_error(origin, "sweep.random.params." + key + ": bounds must be numbers, got '" +
                           flow_text(n) + "'");
  }
}

std::vector<Combo> random_samples(const YAML::Node& random, const std::string& origin) {
  if (!random.IsMap()) spec_error(origin, "sweep.random: must be a mapping (n, seed, params)");
  int64_t n = 0;
  uint64_t seed = 0;
  try {
    n = random["n"] ? random["n"].as<int64_t>() : 0;
    seed = random["seed"] ? random["seed"].as<uint64_t>() : 0;
  } catch (const YAML::Exception&) {
    spec_error(origin, "sweep.random: n and seed must be non-negative integers");
  }
  if (n <= 0) spec_error(origin, "sweep.random.n: must be >= 1");
  if (static_cast<uint64_t>(n) > kMaxRuns)
    spec_error(origin, "sweep.random.n: " + std::to_string(n) + " samples; a sweep has at most " +
                           std::to_string(kMaxRuns) + " runs");
  const YAML::Node params = random["params"];
  if (!params || !params.IsMap() || params.size() == 0)
    spec_error(origin, "sweep.random.params: must map at least one key to a distribution");
  for (const auto& kv : random) {
    const std::string k = kv.first.as<std::string>();
    if (k != "n" && k != "seed" && k != "params")
      spec_error(origin, "sweep.random." + k + ": unknown key", "the keys are n, seed and params");
  }
  // Each distribution is read and checked once; the draws below touch no YAML.
  struct Dist {
    std::string key, kind;
    config::Where where;               // the distribution's place: a drawn value was said there
    std::vector<std::string> choices;  // choice
    double a = 0.0, b = 0.0;           // uniform, log_uniform
    bool ints = false;
  };
  std::vector<Dist> dists;
  for (const auto& kv : params) {
    Dist d;
    d.key = kv.first.as<std::string>();
    check_key_text(d.key, origin);
    const YAML::Node dist = kv.second;
    if (!dist.IsMap() || dist.size() != 1)
      spec_error(origin, "sweep.random.params." + d.key +
                             ": must be one of {uniform: [a, b]}, {log_uniform: [a, b]}, "
                             "{choice: [...]}");
    d.kind = dist.begin()->first.as<std::string>();
    d.where = at(dist, origin);
    const YAML::Node arg = dist.begin()->second;
    if (!arg.IsSequence() || arg.size() == 0)
      spec_error(origin, "sweep.random.params." + d.key + "." + d.kind + ": empty value list");
    if (d.kind == "choice") {
      for (const auto& item : arg) d.choices.push_back(flow_text(item));
    } else if (d.kind == "uniform" || d.kind == "log_uniform") {
      if (arg.size() != 2)
        spec_error(origin, "sweep.random.params." + d.key + "." + d.kind + ": needs [low, high]");
      d.a = bound(arg[0], origin, d.key);
      d.b = bound(arg[1], origin, d.key);
      if (!(d.a <= d.b))
        spec_error(origin, "sweep.random.params." + d.key + "." + d.kind + ": low > high");
      if (d.kind == "log_uniform" && !(d.a > 0))
        spec_error(origin, "sweep.random.params." + d.key + ".log_uniform: bounds must be > 0");
      d.ints = is_integer_text(arg[0].Scalar()) && is_integer_text(arg[1].Scalar());
    } else {
      spec_error(origin, "sweep.random.params." + d.key + ": unknown distribution '" + d.kind + "'",
                 "use uniform, log_uniform or choice");
    }
    dists.push_back(std::move(d));
  }
  if (static_cast<uint64_t>(n) * dists.size() > kMaxOverrides)
    spec_error(origin, "sweep.random: " + std::to_string(n) + " samples x " +
                           std::to_string(dists.size()) + " params; a sweep sets at most " +
                           std::to_string(kMaxOverrides) + " overrides in all its runs");
  std::mt19937_64 gen(seed);
  std::vector<Combo> out;
  out.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    Combo c;
    c.reserve(dists.size());
    for (const Dist& d : dists) {
      const double u = unit(gen);
      std::string value;
      if (d.kind == "choice") {
        const size_t idx = std::min(static_cast<size_t>(u * static_cast<double>(d.choices.size())),
                                    d.choices.size() - 1);
        value = d.choices[idx];
      } else {
        const double v = d.kind == "uniform"
                             ? d.a + (d.b - d.a) * u
                             : std::exp(std::log(d.a) + (std::log(d.b) - std::log(d.a)) * u);
        if (d.ints) {
          const double r = std::min(std::max(std::round(v), d.a), d.b);
          value = std::to_string(static_cast<int64_t>(r));
        } else {
          value = format_double(std::min(std::max(v, d.a), d.b));
        }
      }
      c.push_back({d.key + "=" + value, d.where});
    }
    out.push_back(std::move(c));
  }
  return out;
}

// Duplicate keys anywhere under `v` (whose key path is `path`): YAML leaves them undefined and
// yaml-cpp keeps one silently, so a grid axis written twice would name runs after values that
// never ran.
void find_duplicates(const config::Value& v, const std::string& path, config::Problems& problems) {
  for (size_t i = 0; i < v.items.size(); ++i) {
    find_duplicates(v.items[i], path + "[" + std::to_string(i) + "]", problems);
  }
  for (size_t i = 0; i < v.entries.size(); ++i) {
    const config::Value::Entry& e = v.entries[i];
    const std::string key = path.empty() ? e.key : path + "." + e.key;
    for (size_t j = 0; j < i; ++j) {
      if (v.entries[j].key != e.key) continue;
      problems.add(e.key_where, key,
                   "duplicate key (also at " + v.entries[j].key_where.str() + ")");
      break;
    }
    find_duplicates(e.value, key, problems);
  }
}

// The whole file through the configuration parser, the sweep section included: broken YAML (a
// TAB, a syntax error), nesting past config::kMaxDepth, an alias bomb, duplicate keys in the
// sweep section and a second `sweep:` section are errors with file:line, not a section that is
// silently dropped (the base configuration's own keys are checked by its schema later).
void check_document(std::string_view text, const std::string& origin) {
  config::Problems problems;
  config::Value doc;
  config::parse_yaml(text, origin, doc, problems);
  const config::Value::Entry* first = nullptr;
  for (const config::Value::Entry& e : doc.entries) {
    if (e.key != "sweep") continue;
    if (first == nullptr) {
      first = &e;
      find_duplicates(e.value, "sweep", problems);
    } else {
      problems.add(e.key_where, "sweep",
                   "a second sweep: section (the first is at " + first->key_where.str() + ")",
                   "merge them into one section");
    }
  }
  problems.throw_if_any(ErrorKind::config);
}

// FNV-1a, continued from `h` (the offset basis for a new hash).
uint64_t fnv1a(std::string_view s, uint64_t h = 1469598103934665603u) {
  for (unsigned char ch : s) {
    h ^= ch;
    h *= 1099511628211u;
  }
  return h;
}

// The hash of the overrides joined by newlines (each followed by one).
std::string hash_name(const std::vector<std::string>& overrides) {
  uint64_t h = fnv1a("");
  for (const auto& o : overrides) h = fnv1a("\n", fnv1a(o, h));
  char buf[32];
  std::snprintf(buf, sizeof buf, "run-%012" PRIx64, static_cast<uint64_t>(h & 0xffffffffffffu));
  return buf;
}

}  // namespace

std::string run_name_problem(std::string_view name) {
  if (name.empty()) return "empty";
  if (name.size() > 64) return "longer than 64 characters";
  if (name[0] == '.' || name[0] == '-') return "starts with '" + std::string(1, name[0]) + "'";
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-' || c == '+';
    if (!ok) {
      return "holds '" + std::string(1, c) +
             "' (a folder name takes letters, digits, '.', '_', '-' and '+')";
    }
  }
  return {};
}

std::vector<std::string> split_values(std::string_view text) {
  std::vector<std::string> out;
  int depth = 0;
  char quote = 0;
  std::string cur;
  for (char c : text) {
    if (quote) {
      if (c == quote) quote = 0;
      cur += c;
      continue;
    }
    if (c == '"' || c == '\'') {
      quote = c;
    } else if (c == '[' || c == '{') {
      ++depth;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    } else if (c == ',' && depth == 0) {
      out.push_back(trim(cur));
      cur.clear();
      continue;
    }
    cur += c;
  }
  out.push_back(trim(cur));
  // "KEY=" (nothing) is an empty list, not one empty value.
  if (out.size() == 1 && out[0].empty()) out.clear();
  return out;
}

GridAxis parse_grid_flag(std::string_view flag) {
  const size_t eq = flag.find('=');
  if (eq == std::string_view::npos || trim(flag.substr(0, eq)).empty()) {
    throw Error{ErrorKind::usage, "--grid " + std::string(flag) + ": expected KEY=V1,V2,...",
                "for example --grid scaler.init_scale=1024,65536"};
  }
  GridAxis axis{trim(flag.substr(0, eq)), split_values(flag.substr(eq + 1))};
  if (axis.values.empty()) {
    throw Error{ErrorKind::config,
                "--grid " + std::string(flag) + ": " + axis.key + ": empty value list",
                "give at least one value: --grid " + axis.key + "=V1,V2"};
  }
  for (const auto& v : axis.values) {
    if (v.empty())
      throw Error{ErrorKind::config,
                  "--grid " + std::string(flag) + ": " + axis.key + ": empty value in the list"};
  }
  return axis;
}

std::vector<GridAxis> parse_grid_flags(const std::vector<std::string>& flags) {
  std::vector<GridAxis> axes;
  for (const std::string& flag : flags) {
    GridAxis axis = parse_grid_flag(flag);
    for (const GridAxis& a : axes) {
      if (a.key == axis.key) {
        throw Error{ErrorKind::usage, "--grid " + axis.key + ": given by two --grid flags",
                    "list its values once: --grid " + axis.key + "=V1,V2,..."};
      }
    }
    axes.push_back(std::move(axis));
  }
  return axes;
}

std::string strip_sweep_section(std::string_view text) {
  std::string out;
  bool in_sweep = false;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find('\n', pos);
    const bool last = end == std::string_view::npos;
    if (last) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    const bool top_level =
        !line.empty() && line[0] != ' ' && line[0] != '\t' && line[0] != '#' && line[0] != '\r';
    if (top_level) {
      in_sweep = line.rfind("sweep:", 0) == 0 || line.rfind("sweep :", 0) == 0;
    }
    if (!in_sweep) out.append(line);
    if (!last) out += '\n';
    if (last) break;
    pos = end + 1;
  }
  return out;
}

std::string run_name(const std::vector<std::string>& overrides) {
  if (overrides.empty()) return "base";
  // ',' separates the overrides: inside a key or value it becomes '_' like any odd character.
  auto sanitise = [](std::string text) {
    for (char& c : text) {
      const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '.' || c == '_' || c == '-' || c == '+';
      if (!ok) c = '_';
    }
    return text;
  };
  std::string name;
  for (const std::string& o : overrides) {
    const size_t eq = o.find('=');
    std::string key = o.substr(0, eq);
    const size_t dot = key.rfind('.');
    if (dot != std::string::npos) key = key.substr(dot + 1);
    if (!name.empty()) name += ',';
    name += sanitise(key);
    name += '=';
    name += sanitise(eq == std::string::npos ? "" : o.substr(eq + 1));
    if (name.size() > 96) return hash_name(overrides);  // no need to build the rest
  }
  if (name.size() > 96 || name[0] == '.') return hash_name(overrides);
  return name;
}

namespace {

// The parts of a sweep as the file and --grid give them, before any is expanded: the file's
// runs (one empty run without any), the grid's axes, the random samples (one empty sample
// without any) and the seeds.
struct SweepParts {
  std::vector<Axis> axes;
  std::vector<Combo> runs{Combo{}};
  std::vector<Combo> randoms{Combo{}};
  std::vector<Said> seeds;
};

// sweep.runs: each entry's overrides, a named one's name first as a mark.
std::vector<Combo> parse_runs(const YAML::Node& list, const std::string& origin) {
  if (!list.IsSequence() || list.size() == 0)
    spec_error(origin, "sweep.runs: must be a non-empty list of {key: value} mappings");
  std::vector<Combo> runs;
  std::map<std::string, config::Where> named;  // name -> where it is written
  for (const auto& item : list) {
    if (!item.IsMap()) spec_error(origin, "sweep.runs: each run must be a {key: value} mapping");
    Combo c;
    std::optional<Said> mark;
    for (const auto& kv : item) {
      const std::string key = kv.first.as<std::string>();
      check_key_text(key, origin);
      if (key == "name") {
        const config::Where where = at(kv.second, origin);
        const std::string name = kv.second.IsScalar() ? kv.second.Scalar() : flow_text(kv.second);
        if (const std::string why = run_name_problem(name); !why.empty() || !kv.second.IsScalar()) {
          spec_error(
              where.str(),
              "sweep.runs: name '" + name + "': " + (why.empty() ? "must be a plain word" : why),
              "a run's name is its folder's: letters, digits, '.', '_', '-' and '+', "
              "at most 64 characters, not starting with '.' or '-'");
        }
        if (const auto [it, fresh] = named.emplace(name, where); !fresh) {
          spec_error(
              where.str(),
              "sweep.runs: name '" + name + "' is used twice (also at " + it->second.str() + ")",
              "give each run its own name: it names the run's folder");
        }
        mark = Said{std::string(1, kNameMark) + name, where};
        continue;
      }
      c.push_back({key + "=" + flow_text(kv.second), at(kv.second, origin)});
    }
    if (mark) {
      mark->text =
          std::string(1, kNameMark) + std::to_string(c.size()) + kNameMark + mark->text.substr(1);
      c.insert(c.begin(), *mark);
    }
    runs.push_back(std::move(c));
  }
  return runs;
}

// The file's sweep: section (its keys checked), then the --grid flags, each replacing the
// file's axis of the same key.
SweepParts read_parts(std::string_view text, const std::string& origin,
                      const std::vector<std::string>& grid_flags) {
  SweepParts parts;
  std::vector<Axis>& axes = parts.axes;
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::Exception&) {
    // The config loader reports broken YAML with its position.
    root = YAML::Node();
  }
  const YAML::Node spec = root.IsMap() ? root["sweep"] : YAML::Node();
  if (spec && !spec.IsNull()) {
    if (!spec.IsMap()) spec_error(origin, "sweep: must be a mapping (grid, runs, random, seeds)");
    for (const auto& kv : spec) {
      const std::string k = kv.first.as<std::string>();
      if (k != "grid" && k != "runs" && k != "random" && k != "seeds") {
        const std::string near = config::closest_match(k, {"grid", "runs", "random", "seeds"});
        spec_error(origin, "sweep." + k + ": unknown key",
                   near.empty() ? "the keys are grid, runs, random and seeds"
                                : "did you mean '" + near + "'?");
      }
    }
    if (const YAML::Node grid = spec["grid"]) {
      if (!grid.IsMap()) spec_error(origin, "sweep.grid: must map keys to value lists");
      for (const auto& kv : grid) {
        const std::string key = kv.first.as<std::string>();
        check_key_text(key, origin);
        Axis axis{key, said_values(key, kv.second, origin)};
        if (axis.values.empty())
          spec_error(origin, "sweep.grid." + axis.key + ": empty value list",
                     "give at least one value");
        axes.push_back(std::move(axis));
      }
    }
    if (const YAML::Node list = spec["runs"]) parts.runs = parse_runs(list, origin);
    if (const YAML::Node random = spec["random"]) parts.randoms = random_samples(random, origin);
    if (const YAML::Node s = spec["seeds"]) {
      parts.seeds = said_values("seed", s, origin);
      if (parts.seeds.empty()) spec_error(origin, "sweep.seeds: empty value list");
    }
  }
  for (const GridAxis& flag : parse_grid_flags(grid_flags)) {
    check_key_text(flag.key, "--grid");
    Axis axis{flag.key, {}};
    for (const std::string& v : flag.values)
      axis.values.push_back({flag.key + "=" + v, {"--grid"}});
    bool replaced = false;
    for (Axis& a : axes) {
      if (a.key == axis.key) {
        a = axis;
        replaced = true;
      }
    }
    if (!replaced) axes.push_back(std::move(axis));
  }
  return parts;
}

// A key (or a section and a key in it) set by two parts of the sweep: the part applied later
// would win silently, so runs named after the earlier part's values would all run the later's
// (two runs of one configuration under two names). Refused; a --grid still replaces the
// file's grid axis of the same key (read_parts).
void refuse_shared_keys(const SweepParts& parts, const std::string& origin) {
  const std::vector<Combo>& runs = parts.runs;
  const std::vector<Axis>& axes = parts.axes;
  const std::vector<Combo>& randoms = parts.randoms;
  const std::vector<Said>& seeds = parts.seeds;
  std::map<std::string, std::string> part_of;  // key -> the part that sets it
  const auto key_of = [](const Said& o) { return o.text.substr(0, o.text.find('=')); };
  const auto add = [&](const std::string& key, const std::string& part) {
    const auto [it, inserted] = part_of.emplace(key, part);
    if (!inserted && it->second != part)
      spec_error(origin, "sweep: " + key + " is set by both " + it->second + " and " + part,
                 "set each key in one part of the sweep: the later one would win, and the runs "
                 "named after the other's values would not run them");
  };
  for (const Combo& c : runs)
    for (const Said& o : c) {
      if (!is_mark(o)) add(key_of(o), "sweep.runs");
    }
  for (const Axis& axis : axes)
    add(axis.key, axis.values.front().said.origin == "--grid" ? "--grid" : "sweep.grid");
  for (const Said& o : randoms[0]) add(key_of(o), "sweep.random.params");
  if (!seeds.empty()) add("seed", "sweep.seeds");
  // A section and a key in it: across parts, and within one part whose keys all apply to
  // every run (two grid axes, two random params); two of the file's runs may differ so.
  for (const auto& [key, part] : part_of) {
    for (size_t dot = key.find('.'); dot != std::string::npos; dot = key.find('.', dot + 1)) {
      const auto it = part_of.find(key.substr(0, dot));
      if (it != part_of.end() && (it->second != part || part != "sweep.runs"))
        spec_error(origin,
                   "sweep: " + it->first + " (set by " + it->second + ") holds " + key +
                       " (set by " + part + ")",
                   "a value for the whole section replaces what the other part set in it: set "
                   "each key in one part of the sweep");
    }
  }
}

// The number of runs before any is expanded (saturating: an exploding product stops counting
// past the bound), each repeated value counted as a run, and the overrides in all: refused
// past kMaxRuns and kMaxOverrides.
void check_size(const SweepParts& parts, const std::string& origin) {
  const std::vector<Combo>& runs = parts.runs;
  const std::vector<Axis>& axes = parts.axes;
  const std::vector<Combo>& randoms = parts.randoms;
  const std::vector<Said>& seeds = parts.seeds;
  uint64_t count = runs.size();
  std::string factors;
  const auto times = [&](size_t k, const std::string& what) {
    count = count > kMaxRuns ? count : count * k;
    if (!factors.empty()) factors += " x ";
    factors += std::to_string(k);
    factors += ' ';
    factors += what;
  };
  if (runs.size() > 1 || !runs[0].empty()) factors = std::to_string(runs.size()) + " runs";
  for (const Axis& axis : axes) times(axis.values.size(), "values of " + axis.key);
  if (randoms.size() > 1 || !randoms[0].empty()) times(randoms.size(), "random samples");
  if (!seeds.empty()) times(seeds.size(), "seeds");
  if (count > kMaxRuns)
    spec_error(
        origin,
        "sweep: too many runs (" + factors + "); a sweep has at most " + std::to_string(kMaxRuns),
        "split it into several sweeps, or sample the space with sweep.random");
  size_t keys = axes.size() + randoms[0].size() + (seeds.empty() ? 0 : 1);
  size_t widest = 0;
  for (const Combo& c : runs) widest = std::max(widest, c.size());
  keys += widest;
  if (count * keys > kMaxOverrides)
    spec_error(origin,
               "sweep: " + std::to_string(count) + " runs x up to " + std::to_string(keys) +
                   " keys each; a sweep sets at most " + std::to_string(kMaxOverrides) +
                   " overrides in all its runs",
               "split it into several sweeps, or move keys every run shares into the base "
               "configuration");
}

// Every combination of the parts: the runs times the grid's axes (a repeated one refused),
// times the random samples, times the seeds.
std::vector<Combo> combine(const SweepParts& parts, const std::string& origin) {
  const std::vector<Combo>& randoms = parts.randoms;
  const std::vector<Said>& seeds = parts.seeds;
  std::vector<Combo> combos = parts.runs;
  for (const Axis& axis : parts.axes) combos = product(combos, axis);
  // A value listed twice (seeds: [0, 0], --grid seed=1,1, two equal runs) makes two runs of one
  // configuration that would share a folder: refused, like a duplicate key.
  const auto refuse_repeats = [&](const std::vector<Combo>& list) {
    std::set<Combo, ByText> unique;
    for (const Combo& c : list) {
      if (unique.insert(c).second) continue;
      std::string what;
      for (const std::string& o : texts(c)) {
        if (!what.empty()) what += ' ';
        what += o;
      }
      spec_error(origin, "sweep: the run '" + what + "' is listed twice",
                 "remove the repeated value from the grid, runs, seeds or --grid");
    }
  };
  refuse_repeats(combos);
  std::vector<Combo> seed_runs;
  for (const Said& seed : seeds) seed_runs.push_back({seed});
  refuse_repeats(seed_runs);
  if (randoms.size() > 1 || !randoms[0].empty()) {
    std::vector<Combo> next;
    for (const Combo& c : combos) {
      for (const Combo& r : randoms) {
        Combo n = c;
        n.insert(n.end(), r.begin(), r.end());
        next.push_back(std::move(n));
      }
    }
    combos = std::move(next);
  }
  if (!seeds.empty()) combos = product(combos, Axis{"seed", seeds});
  return combos;
}

// The sweep's runs from the combinations, each named (a named entry's name, else the
// overrides spelled, else their hash when two spell the same).
void add_runs(std::vector<Combo>& combos, Sweep& sweep) {
  std::set<std::string> names;
  std::set<Combo, ByText> seen;
  for (Combo& c : combos) {
    // A random draw may repeat an earlier one (choice over few values): that run is dropped.
    // The explicit duplicates were refused above.
    if (!seen.insert(c).second) continue;
    Run run;
    run.overrides = texts(c);
    if (!c.empty() && is_mark(c[0])) {
      // A named entry: NAME, then the values combined with it (grid, random, seed) as a
      // generated name spells them; the setting is the same without the seed.
      const std::string& m = c[0].text;
      const size_t sep = m.find(kNameMark, 1);
      const size_t own = std::stoul(m.substr(1, sep - 1));
      const std::string name = m.substr(sep + 1);
      std::vector<std::string> rest(run.overrides.begin() + static_cast<std::ptrdiff_t>(own),
                                    run.overrides.end());
      run.name = name + (rest.empty() ? "" : "," + run_name(rest));
      std::vector<std::string> unseeded;
      for (const std::string& o : rest) {
        if (o.rfind("seed=", 0) != 0) unseeded.push_back(o);
      }
      run.setting = name + (unseeded.empty() ? "" : "," + run_name(unseeded));
      if (!names.insert(run.name).second) {
        spec_error(c[0].said.str(),
                   "sweep.runs: name '" + name + "': the run '" + run.name +
                       "' has the name of another run",
                   "give the run a name no other run of the sweep has");
      }
      for (size_t i = 1; i < c.size(); ++i) run.said.push_back(std::move(c[i].said));
      sweep.runs.push_back(std::move(run));
      continue;
    }
    run.name = run_name(run.overrides);
    for (Said& o : c) run.said.push_back(std::move(o.said));
    if (!names.insert(run.name).second) {
      run.name = hash_name(run.overrides);
      names.insert(run.name);
    }
    sweep.runs.push_back(std::move(run));
  }
}

}  // namespace

Sweep parse_sweep(std::string_view text, const std::string& origin,
                  const std::vector<std::string>& grid_flags) {
  check_document(text, origin);
  Sweep sweep;
  sweep.origin = origin;
  sweep.base_text = strip_sweep_section(text);
  const SweepParts parts = read_parts(text, origin, grid_flags);
  refuse_shared_keys(parts, origin);
  check_size(parts, origin);
  std::vector<Combo> combos = combine(parts, origin);
  add_runs(combos, sweep);
  return sweep;
}

Sweep load_sweep(const std::filesystem::path& file, const std::vector<std::string>& grid_flags) {
  return parse_sweep(config::read_config_text(file), file.string(), grid_flags);
}

std::vector<config::SaidOverride> said_overrides(const Sweep& sweep, const Run& run) {
  std::vector<config::SaidOverride> out;
  for (const std::string& o : sweep.base_overrides) out.push_back({o, {}});
  for (size_t i = 0; i < run.overrides.size(); ++i) {
    out.push_back({run.overrides[i], i < run.said.size() ? run.said[i] : config::Where{}});
  }
  return out;
}

void validate(Sweep& sweep) {
  std::string message;
  // The base alone first: its problems are every run's.
  sweep.base_name = config::parse_config(sweep.base_text, sweep.origin, sweep.base_overrides).name;
  for (Run& run : sweep.runs) {
    try {
      run.resolved_yaml = config::to_yaml(
          config::parse_config_said(sweep.base_text, sweep.origin, said_overrides(sweep, run)));
    } catch (const config::ConfigError& e) {
      for (const config::Problem& p : e.problems()) {
        message += "run " + run.name + ": " + p.str() + "\n";
        if (!p.hint.empty()) message += "hint: " + p.hint + "\n";
      }
    } catch (const Error& e) {
      message += "run " + run.name + ": " + e.what() + "\n";
      if (!e.hint().empty()) message += "hint: " + e.hint() + "\n";
    }
  }
  if (!message.empty()) {
    message.pop_back();
    throw Error{ErrorKind::config, message, "nothing was run; fix the sweep and run it again"};
  }
}

}  // namespace ampctl::sweep
