#include "ampctl/config/document.h"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <map>
#include <sstream>
#include <utility>

#include "ampctl/config/scalars.h"

namespace ampctl::config {

const Value::Entry* Value::find(std::string_view key) const {
  for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
    if (it->key == key) return &*it;
  }
  return nullptr;
}

Value::Entry* Value::find(std::string_view key) {
  return const_cast<Entry*>(std::as_const(*this).find(key));
}

namespace {

// yaml-cpp's parser events -> Value, so no yaml-cpp node graph is ever walked: an alias is a copy
// of its anchor's finished value (counted against kMaxNodes, which stops alias bombs), an alias
// inside its own anchor is refused (yaml-cpp would build a cycle), and containers deeper than
// kMaxDepth are skipped whole.
class ValueBuilder : public YAML::EventHandler {
 public:
  ValueBuilder(std::string origin, bool positions, Problems& problems)
      : m_origin(std::move(origin)), m_positions(positions), m_problems(problems) {}

  Where where_of(const YAML::Mark& mark) const {
    Where w{m_origin};
    if (m_positions && mark.line >= 0 && mark.column >= 0) {
      w.line = mark.line + 1;
      w.column = mark.column + 1;
    }
    return w;
  }

  Value& root() { return m_root; }
  // Over kMaxNodes: the document was abandoned (the problem is reported).
  bool abandoned() const { return m_over_budget; }
  const YAML::Mark& document_start() const { return m_document_start; }

  void OnDocumentStart(const YAML::Mark& mark) override { m_document_start = mark; }
  void OnDocumentEnd() override {}

  void OnNull(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    if (m_skip > 0 || m_over_budget) return;
    Value v;
    v.where = where_of(mark);
    finish(std::move(v), anchor);
  }

  void OnAlias(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    if (m_skip > 0 || m_over_budget) return;
    Value v;
    v.where = where_of(mark);
    auto it = m_anchors.find(anchor);
    if (it == m_anchors.end()) {
      problem(v.where, "an alias inside the value it refers to (a cycle)");
    } else if (count(it->second)) {
      v = it->second;
    }
    finish(std::move(v), 0);
  }

  void OnScalar(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                const std::string& text) override {
    if (m_skip > 0 || m_over_budget) return;
    Value v;
    v.kind = Value::Kind::scalar;
    v.where = where_of(mark);
    v.text = text;
    // "?" is a plain scalar; core-schema tags other than !!str keep it readable as typed.
    v.plain = tag == "?" || tag == "tag:yaml.org,2002:int" || tag == "tag:yaml.org,2002:float" ||
              tag == "tag:yaml.org,2002:bool" || tag == "tag:yaml.org,2002:null";
    finish(std::move(v), anchor);
  }

  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value) override {
    open(mark, Value::Kind::list, anchor);
  }
  void OnSequenceEnd() override { close(); }
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value) override {
    open(mark, Value::Kind::map, anchor);
  }
  void OnMapEnd() override { close(); }

 private:
  struct Frame {
    Value value;
    YAML::anchor_t anchor = 0;
    bool has_key = false;    // map: the next value belongs to `key`
    bool drop_next = false;  // map: the key was refused, so is its value
    std::string key;
    Where key_where;
  };

  void problem(const Where& where, std::string message) {
    m_problems.add(where, "", std::move(message));
  }

  // Counts the values of `v` (an alias's copy) against the budget; false when it runs out.
  bool count(const Value& v) {
    size_t n = 1;
    std::vector<const Value*> todo{&v};
    while (!todo.empty() && n <= kMaxNodes) {
      const Value* x = todo.back();
      todo.pop_back();
      for (const Value& item : x->items) todo.push_back(&item), ++n;
      for (const Value::Entry& e : x->entries) todo.push_back(&e.value), ++n;
    }
    m_nodes += n - 1;  // `v` itself is counted by finish()
    return within_budget(v.where);
  }

  bool within_budget(const Where& where) {
    if (m_nodes <= kMaxNodes) return true;
    if (!m_over_budget) {
      problem(where, "more than " + std::to_string(kMaxNodes) + " values (an alias bomb?)");
      m_over_budget = true;
    }
    return false;
  }

  void open(const YAML::Mark& mark, Value::Kind kind, YAML::anchor_t anchor) {
    if (m_over_budget) return;
    if (m_skip > 0 || static_cast<int>(m_stack.size()) >= kMaxDepth) {
      if (m_skip++ == 0) {
        m_skip_where = where_of(mark);
        problem(m_skip_where, "nested more than " + std::to_string(kMaxDepth) + " levels deep");
      }
      return;
    }
    Frame f;
    f.value.kind = kind;
    f.value.where = where_of(mark);
    f.anchor = anchor;
    m_stack.push_back(std::move(f));
  }

  void close() {
    if (m_over_budget) return;
    if (m_skip > 0) {
      if (--m_skip == 0) {  // the skipped container reads as null, where it was written
        Value skipped;
        skipped.where = m_skip_where;
        finish(std::move(skipped), 0);
      }
      return;
    }
    Frame f = std::move(m_stack.back());
    m_stack.pop_back();
    finish(std::move(f.value), f.anchor);
  }

  void finish(Value v, YAML::anchor_t anchor) {
    ++m_nodes;
    if (!within_budget(v.where)) return;
    if (anchor != 0) m_anchors[anchor] = v;
    if (m_stack.empty()) {
      m_root = std::move(v);
      return;
    }
    Frame& top = m_stack.back();
    if (top.value.kind == Value::Kind::list) {
      top.value.items.push_back(std::move(v));
    } else if (!top.has_key) {
      top.has_key = true;
      top.drop_next = !v.is_scalar();
      if (top.drop_next) {
        problem(v.where, "a key must be a name, got " + std::string(v.is_null()   ? "null"
                                                                    : v.is_list() ? "a list"
                                                                                  : "a mapping"));
      }
      top.key = v.text;
      top.key_where = v.where;
    } else {
      top.has_key = false;
      if (!top.drop_next) top.value.entries.push_back({top.key, top.key_where, std::move(v)});
    }
  }

  std::string m_origin;
  bool m_positions;
  Problems& m_problems;
  std::vector<Frame> m_stack;
  std::map<YAML::anchor_t, Value> m_anchors;  // finished anchored values only
  Value m_root;
  YAML::Mark m_document_start;
  size_t m_nodes = 0;
  bool m_over_budget = false;
  int m_skip = 0;      // > 0 while inside a container that is too deep
  Where m_skip_where;  // where the outermost skipped container starts
};

// Sees only where a document starts (to find a second one, or a parser that is stuck).
class DocumentStart : public YAML::EventHandler {
 public:
  YAML::Mark mark;
  void OnDocumentStart(const YAML::Mark& m) override { mark = m; }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

const char* kind_name(const Value& v) {
  switch (v.kind) {
    case Value::Kind::list:
      return "a list";
    case Value::Kind::map:
      return "a mapping";
    case Value::Kind::null:
      return "null";
    default:
      return "a scalar";
  }
}

Where where_of_exception(const std::string& origin, bool positions, const YAML::Exception& e) {
  Where w{origin};
  if (positions && e.mark.line >= 0 && e.mark.column >= 0) {
    w.line = e.mark.line + 1;
    w.column = e.mark.column + 1;
  }
  return w;
}

// Reads the one document of `text` into `out`. False, with the problem added, for broken YAML
// or more than one document.
bool read_yaml(std::string_view text, const std::string& origin, bool positions, Value& out,
               Problems& problems) {
  std::istringstream in{std::string(text)};
  ValueBuilder builder(origin, positions, problems);
  try {
    YAML::Parser parser(in);
    if (!parser.HandleNextDocument(builder)) return true;  // no document: null
    if (builder.abandoned()) return false;
    out = std::move(builder.root());
    // yaml-cpp 0.7 can return the same empty document forever (a stray ',' at the top level
    // does it), so look at most two documents further and call a repeated start "stuck".
    std::vector<YAML::Mark> starts{builder.document_start()};
    for (int i = 0; i < 2; ++i) {
      DocumentStart next;
      if (!parser.HandleNextDocument(next)) break;
      if (next.mark.pos == starts.back().pos) {
        const size_t pos = static_cast<size_t>(std::max(next.mark.pos, 0));
        const char c = pos < text.size() ? text[pos] : ' ';
        problems.add(builder.where_of(next.mark), "",
                     std::string("invalid YAML: unexpected ") +
                         (c > ' ' && c < 0x7f ? std::string("'") + c + "'" : "character"));
        return false;
      }
      starts.push_back(next.mark);
    }
    if (starts.size() > 1) {
      problems.add(builder.where_of(starts[1]), "",
                   "a configuration is one YAML document, found a second one");
      return false;
    }
  } catch (const YAML::Exception& e) {
    problems.add(where_of_exception(origin, positions, e), "", "invalid YAML: " + e.msg);
    return false;
  }
  return true;
}

}  // namespace

bool parse_yaml(std::string_view text, const std::string& origin, Value& out, Problems& problems) {
  Value doc;
  if (!read_yaml(text, origin, true, doc, problems)) {
    out = Value{};
    out.kind = Value::Kind::map;
    out.where = Where{origin};
    return false;
  }
  if (doc.is_null()) {  // an empty file, or only comments
    out = Value{};
    out.kind = Value::Kind::map;
    out.where = Where{origin};
    return true;
  }
  if (!doc.is_map()) {
    problems.add(doc.where, "",
                 std::string("a configuration must be a mapping of keys, got ") + kind_name(doc));
    out = Value{};
    out.kind = Value::Kind::map;
    out.where = Where{origin};
    return false;
  }
  out = std::move(doc);
  return true;
}

namespace {

class JsonConverter {
 public:
  JsonConverter(std::string origin, Problems& problems)
      : m_where{std::move(origin)}, m_problems(problems) {}

  Value convert(const nlohmann::json& j, int depth) {
    Value v;
    v.where = m_where;
    if (m_exhausted) return v;
    if (depth > kMaxDepth || ++m_nodes > kMaxNodes) {
      m_problems.add(m_where, "", "the configuration is nested too deep or too large");
      m_exhausted = true;
      return v;
    }
    switch (j.type()) {
      case nlohmann::json::value_t::object:
        v.kind = Value::Kind::map;
        for (const auto& [key, item] : j.items()) {
          v.entries.push_back({key, m_where, convert(item, depth + 1)});
        }
        break;
      case nlohmann::json::value_t::array:
        v.kind = Value::Kind::list;
        for (const auto& item : j) v.items.push_back(convert(item, depth + 1));
        break;
      case nlohmann::json::value_t::string:
        v.kind = Value::Kind::scalar;
        v.text = j.get<std::string>();
        v.plain = false;
        break;
      case nlohmann::json::value_t::boolean:
        v.kind = Value::Kind::scalar;
        v.text = j.get<bool>() ? "true" : "false";
        break;
      case nlohmann::json::value_t::number_integer:
        v.kind = Value::Kind::scalar;
        v.text = std::to_string(j.get<int64_t>());
        break;
      case nlohmann::json::value_t::number_unsigned:
        v.kind = Value::Kind::scalar;
        v.text = std::to_string(j.get<uint64_t>());
        break;
      case nlohmann::json::value_t::number_float:
        v.kind = Value::Kind::scalar;
        v.text = format_float(j.get<double>());
        break;
      case nlohmann::json::value_t::binary:
        v.kind = Value::Kind::scalar;
        v.text = "<binary>";
        v.plain = false;
        break;
      default:  // null, discarded
        break;
    }
    return v;
  }

 private:
  Where m_where;
  Problems& m_problems;
  size_t m_nodes = 0;
  bool m_exhausted = false;
};

}  // namespace

Value value_from_json(const nlohmann::json& json, const std::string& origin, Problems& problems) {
  return JsonConverter(origin, problems).convert(json, 0);
}

namespace {

// An override as problems name it: "--set KEY=VALUE", cut short past kMaxShown characters.
// Every value an override writes carries this origin, so a long --set (a list of thousands of
// elements) would otherwise cost its whole length once per element.
std::string shorten(const std::string& spelling) {
  constexpr size_t kMaxShown = 80;
  if (spelling.size() <= kMaxShown) return spelling;
  return spelling.substr(0, kMaxShown) + "... (" + std::to_string(spelling.size()) + " characters)";
}

}  // namespace

Override parse_override(std::string_view arg) {
  const size_t eq = arg.find('=');
  if (eq == std::string_view::npos) {
    throw Error{ErrorKind::usage, "--set '" + std::string(arg) + "': expected KEY=VALUE",
                "for example --set scaler.growth_factor=4"};
  }
  Override o;
  o.spelling = std::string(arg);
  o.value_text = std::string(arg.substr(eq + 1));
  const std::string_view key = arg.substr(0, eq);
  size_t start = 0;
  while (true) {
    const size_t dot = key.find('.', start);
    const std::string_view part =
        key.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start);
    const bool blank = part.find_first_of(" \t\r\n") != std::string_view::npos;
    if (part.empty() || blank) {
      throw Error{ErrorKind::usage,
                  "--set '" + o.spelling + "': KEY must be a dotted key path without spaces",
                  "for example --set scaler.growth_factor=4"};
    }
    o.key.emplace_back(part);
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  // Each component is a level of maps the override creates: no configuration is deeper, and a
  // path of thousands would build (and later destroy, recursively) a tree as deep.
  if (o.key.size() > static_cast<size_t>(kMaxDepth)) {
    throw Error{ErrorKind::usage,
                "--set '" + shorten(o.spelling) + "': KEY has " + std::to_string(o.key.size()) +
                    " components, more than the " + std::to_string(kMaxDepth) +
                    " levels a configuration may nest",
                "for example --set scaler.growth_factor=4"};
  }
  return o;
}

namespace {

void mark_all(Value& v, const Where& where) {
  v.where = where;
  for (Value& item : v.items) mark_all(item, where);
  for (Value::Entry& e : v.entries) {
    e.key_where = where;
    mark_all(e.value, where);
  }
}

}  // namespace

void apply_overrides(Value& doc, const std::vector<Override>& overrides, Problems& problems,
                     OverrideValues* values) {
  for (const Override& o : overrides) {
    const Where where = o.said.has_position()
                            ? o.said
                            : Where{(o.said.origin.empty() ? std::string("--set") : o.said.origin) +
                                    ' ' + shorten(o.spelling)};
    std::string dotted;
    for (const std::string& part : o.key) dotted += (dotted.empty() ? "" : ".") + part;
    OverrideValues::Read fresh;
    OverrideValues::Read* read = &fresh;
    bool known = false;
    if (values != nullptr) {
      const auto [it, inserted] =
          values->by_spelling.try_emplace(where.str() + '\n' + o.spelling + '\n' + o.value_text);
      read = &it->second;
      known = !inserted;
    }
    if (!known) {
      Problems value_problems;
      read->ok = read_yaml(o.value_text, where.origin, false, read->value, value_problems);
      if (!read->ok) {
        std::string why = value_problems.list().front().message;
        if (why.rfind("invalid YAML: ", 0) == 0) why = why.substr(14);
        read->problems.add(
            where, dotted, "VALUE is not a valid YAML value: " + why,
            "quote the whole argument for the shell, e.g. --set 'model.hidden=[64, 64]'");
      } else {
        for (const Problem& p : value_problems.list()) read->problems.add(where, dotted, p.message);
        mark_all(read->value, where);
      }
    }
    for (const Problem& p : read->problems.list()) {
      problems.add(p.where, p.key, p.message, p.hint);
    }
    if (!read->ok) continue;
    const Value& value = read->value;
    Value* node = &doc;
    for (size_t i = 0; i < o.key.size(); ++i) {
      if (!node->is_map()) {
        // A later --set wins over whatever was there, a null or scalar section included.
        *node = Value{};
        node->kind = Value::Kind::map;
        node->where = where;
      }
      Value::Entry* entry = node->find(o.key[i]);
      if (entry == nullptr) {
        node->entries.push_back({o.key[i], where, Value{}});
        entry = &node->entries.back();
        entry->value.where = where;
      }
      if (i + 1 == o.key.size()) {
        entry->key_where = where;
        entry->value = value;
      }
      node = &entry->value;
    }
  }
}

}  // namespace ampctl::config
