#include "ampctl/config/base.h"

#include <filesystem>
#include <system_error>
#include <utility>
#include <vector>

#include "ampctl/config/config_file.h"

namespace ampctl::config {

namespace fs = std::filesystem;

void merge_over(Value& under, Value over) {
  std::vector<std::string> merged;  // over's keys already merged (a duplicate is appended)
  merged.reserve(over.entries.size());
  for (Value::Entry& e : over.entries) {
    bool again = false;
    for (const std::string& k : merged) again = again || k == e.key;
    Value::Entry* u = again ? nullptr : under.find(e.key);
    merged.push_back(e.key);
    if (u == nullptr) {
      under.entries.push_back(std::move(e));
    } else if (u->value.is_map() && e.value.is_map()) {
      u->key_where = e.key_where;
      u->value.where = e.value.where;
      merge_over(u->value, std::move(e.value));
    } else {
      u->key_where = e.key_where;
      u->value = std::move(e.value);
    }
  }
}

namespace {

size_t count_values(const Value& v) {
  size_t n = 1;
  for (const Value& item : v.items) n += count_values(item);
  for (const Value::Entry& e : v.entries) n += count_values(e.value);
  return n;
}

// The bases of one document, read depth first; `m_stack` holds the files being read (the
// document's own at the bottom), each by its canonical path, to find a cycle.
class BaseReader {
 public:
  BaseReader(Problems& problems, size_t nodes) : m_problems(problems), m_nodes(nodes) {}

  void expand(Value& doc, const std::string& origin) {
    std::vector<Value::Entry> bases;
    std::vector<Value::Entry> rest;
    for (Value::Entry& e : doc.entries) (e.key == "base" ? bases : rest).push_back(std::move(e));
    if (bases.empty()) {
      doc.entries = std::move(rest);
      return;
    }
    doc.entries = std::move(rest);
    for (size_t i = 1; i < bases.size(); ++i) {
      m_problems.add(bases[i].key_where, "base",
                     "a second base: (the first is at " + bases[0].key_where.str() + ")",
                     "list every base in one: base: [A.yaml, B.yaml]");
    }
    const Value& names = bases[0].value;
    std::vector<const Value*> items;
    if (names.is_scalar()) {
      items.push_back(&names);
    } else if (names.is_list()) {
      for (const Value& item : names.items) items.push_back(&item);
    } else if (names.is_map()) {
      m_problems.add(names.where, "base",
                     "expected a file name or a list of file names, got a mapping",
                     "for example base: gpt_fortunes.yaml");
    }  // null: no base
    Value merged;
    merged.kind = Value::Kind::map;
    for (const Value* item : items) {
      if (!item->is_scalar() || item->text.empty()) {
        m_problems.add(
            item->where, "base",
            std::string("expected a file name, got ") + (item->is_scalar() ? "an empty one"
                                                         : item->is_list() ? "a list"
                                                         : item->is_map()  ? "a mapping"
                                                                           : "null"),
            "for example base: gpt_fortunes.yaml");
        continue;
      }
      Value based;
      if (read_base(*item, origin, based)) merge_over(merged, std::move(based));
    }
    merged.where = doc.where;
    merge_over(merged, std::move(doc));
    doc = std::move(merged);
  }

  void push(const std::string& origin) { m_stack.push_back({canonical(origin), origin}); }

 private:
  static fs::path canonical(const fs::path& p) {
    std::error_code ec;
    fs::path c = fs::weakly_canonical(p, ec);
    return ec ? fs::absolute(p, ec).lexically_normal() : c;
  }

  // The base `item` names, read from the folder of `origin` (the file that names it), with its
  // own bases merged; false (the problem added) when it cannot be used.
  bool read_base(const Value& item, const std::string& origin, Value& out) {
    const fs::path named(item.text);
    const fs::path file = named.is_absolute()
                              ? named.lexically_normal()
                              : (fs::path(origin).parent_path() / named).lexically_normal();
    const std::string shown = file.string();
    const fs::path key = canonical(file);
    for (size_t i = 0; i < m_stack.size(); ++i) {
      if (m_stack[i].first != key) continue;
      std::string chain;
      for (size_t j = i; j < m_stack.size(); ++j) chain += m_stack[j].second + " -> ";
      m_problems.add(item.where, "base",
                     "a cycle: " + chain + shown + " (each file names the next as its base:)",
                     "a file cannot be its own base; remove one of these base: entries");
      return false;
    }
    if (static_cast<int>(m_stack.size()) > kMaxBaseDepth) {
      m_problems.add(item.where, "base",
                     "bases nested more than " + std::to_string(kMaxBaseDepth) + " levels deep");
      return false;
    }
    if (++m_files > kMaxBaseFiles) {
      if (m_files == kMaxBaseFiles + 1) {
        m_problems.add(item.where, "base",
                       "more than " + std::to_string(kMaxBaseFiles) + " base files in all");
      }
      return false;
    }
    std::string text;
    try {
      text = read_config_text(file);
    } catch (const ConfigError& e) {
      std::string why = e.problems().empty() ? e.what() : e.problems().front().message;
      const std::string prefix = "cannot read the configuration file: ";
      if (why.rfind(prefix, 0) == 0) why = why.substr(prefix.size());
      m_problems.add(item.where, "base", "cannot read the base file " + shown + ": " + why,
                     named.is_absolute() ? std::string{}
                                         : "a relative base: is read from the folder of the "
                                           "file that names it");
      return false;
    }
    if (!parse_yaml(text, shown, out, m_problems)) return false;
    if (const Value::Entry* sweep = out.find("sweep"); sweep != nullptr) {
      m_problems.add(sweep->key_where, "sweep",
                     "a base file holds configuration keys only, not a sweep: section",
                     "name a file without one as the base (the sweep's own configuration), and "
                     "give the sweep: section in the file that names it");
      return false;
    }
    m_nodes += count_values(out);
    if (m_nodes > kMaxNodes) {
      m_problems.add(item.where, "base",
                     "more than " + std::to_string(kMaxNodes) + " values with the bases merged");
      return false;
    }
    m_stack.push_back({key, shown});
    expand(out, shown);
    m_stack.pop_back();
    return true;
  }

  Problems& m_problems;
  size_t m_nodes;
  int m_files = 0;
  std::vector<std::pair<fs::path, std::string>> m_stack;
};

}  // namespace

void merge_bases(Value& doc, const std::string& origin, Problems& problems) {
  if (doc.find("base") == nullptr) return;
  BaseReader reader(problems, count_values(doc));
  reader.push(origin);
  reader.expand(doc, origin);
}

}  // namespace ampctl::config
