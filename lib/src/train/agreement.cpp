#include "ampctl/train/agreement.h"

#include <cstdio>
#include <filesystem>
#include <optional>

#include "ampctl/checkpoint/encoding.h"
#include "ampctl/dist/communicator.h"
#include "ampctl/dist/process_group.h"

namespace ampctl::train {
namespace {

void flatten(const nlohmann::json& v, const std::string& path, InputItems& out) {
  if (v.is_object() && !v.empty()) {
    for (const auto& [key, child] : v.items()) {
      flatten(child, path.empty() ? key : path + "." + key, out);
    }
    return;
  }
  out.emplace_back(path, v.dump());
}

std::string hex(uint32_t crc) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08x", crc);
  return buf;
}

template <typename T>
std::string crc_of(const std::vector<T>& v) {
  return hex(checkpoint::crc32(v.data(), v.size() * sizeof(T)));
}

// A data set's items are named by its file name (the folder may differ between nodes).
std::string file_name(const std::string& origin) {
  const std::string name = std::filesystem::path(origin).filename().string();
  return name.empty() ? origin : name;
}

void add_set(InputItems& out, const std::string& name, const data::Dataset& d) {
  const std::string origin = file_name(d.origin);
  out.emplace_back(name + " (" + origin + ") samples",
                   std::to_string(d.size()) + " x " + std::to_string(d.features) + " features");
  std::string image;
  for (int64_t s : d.image) {
    if (!image.empty()) image += 'x';
    image += std::to_string(s);
  }
  out.emplace_back(name + " (" + origin + ") shape", image.empty() ? "rows" : image);
  out.emplace_back(name + " (" + origin + ") contents",
                   "crc32 " + crc_of(d.x) + " " + crc_of(d.labels) + " " + crc_of(d.y));
}

void add_tokens(InputItems& out, const std::string& name, const data::TokenSet& t) {
  out.emplace_back(name + " (" + file_name(t.origin) + ") tokens", std::to_string(t.size()));
  out.emplace_back(name + " (" + file_name(t.origin) + ") contents", "crc32 " + crc_of(t.tokens));
}

// Items as one text: "KEY\tVALUE\n" each (keys and values hold no newline: JSON dumps escape it).
std::string to_text(const InputItems& items) {
  std::string text;
  for (const auto& [key, value] : items) text += key + "\t" + value + "\n";
  return text;
}

InputItems from_text(const std::string& text) {
  InputItems items;
  size_t start = 0;
  while (start < text.size()) {
    const size_t end = text.find('\n', start);
    const std::string line = text.substr(start, end - start);
    const size_t tab = line.find('\t');
    items.emplace_back(line.substr(0, tab), tab == std::string::npos ? "" : line.substr(tab + 1));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return items;
}

std::string shorten(std::string s) {
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

// The first difference between rank 0's items and this rank's, said from this rank's side.
std::optional<std::string> first_difference(const InputItems& root, const InputItems& own) {
  for (size_t i = 0; i < root.size() || i < own.size(); ++i) {
    if (i < root.size() && i < own.size() && root[i] == own[i]) continue;
    if (i < root.size() && i < own.size() && root[i].first == own[i].first) {
      return root[i].first + ": " + shorten(own[i].second) + " here, " + shorten(root[i].second) +
             " on rank 0";
    }
    // A key one side has and the other lacks: name whichever comes first.
    if (i >= own.size() || (i < root.size() && root[i].first < own[i].first)) {
      return root[i].first + ": absent here, " + shorten(root[i].second) + " on rank 0";
    }
    return own[i].first + ": " + shorten(own[i].second) + " here, absent on rank 0";
  }
  return std::nullopt;
}

}  // namespace

InputItems config_items(const config::RunConfig& cfg) {
  InputItems all;
  flatten(config::to_json(cfg), "", all);
  // The data files' paths may differ between nodes (a path given with --set is read from each
  // rank's own current directory): what must agree is their contents, which data_items compares.
  InputItems items;
  for (auto& item : all) {
    const std::string& k = item.first;
    const bool data_file = k.rfind("data.train.", 0) == 0 || k.rfind("data.eval.", 0) == 0;
    const std::string leaf = k.substr(k.rfind('.') + 1);
    if (data_file && (leaf == "path" || leaf == "images" || leaf == "labels" || leaf == "dir")) {
      continue;
    }
    items.push_back(std::move(item));
  }
  return items;
}

InputItems data_items(const data::DataSplit& d) {
  InputItems items;
  add_set(items, "data: the training set", d.train);
  if (d.eval) add_set(items, "data: the evaluation set", *d.eval);
  return items;
}

InputItems data_items(const data::LmData& d) {
  InputItems items;
  items.emplace_back("data: vocabulary size", std::to_string(d.vocab_size));
  if (d.vocab) {
    const std::string text = d.vocab->to_json().dump();
    items.emplace_back("data: vocabulary",
                       "crc32 " + hex(checkpoint::crc32(text.data(), text.size())));
  }
  if (d.tokenizer) {
    items.emplace_back("data: tokenizer", "fnv1a64 " + d.tokenizer->content_hash());
  }
  add_tokens(items, "data: the training text", d.train);
  if (d.eval) add_tokens(items, "data: the evaluation text", *d.eval);
  return items;
}

void agree_on_inputs(dist::Communicator& comm, const InputItems& items, const std::string& what) {
  const int world = comm.world_size();
  if (world == 1) return;
  const std::string own = to_text(items);
  std::string root = own;
  // Rank 0's items to every rank (MPI_COMM_WORLD's host broadcast: the communicator's own
  // collectives take device tensors).
  dist::broadcast_from_root(root);
  std::optional<std::string> difference;
  if (root != own) difference = first_difference(from_text(root), items);
  // The lowest rank that differs: max over the ranks of (world - rank), 0 when none does.
  const int rank = comm.rank();
  const int64_t lowest = comm.all_reduce_host(difference ? world - rank : 0, dist::ReduceOp::max);
  if (lowest == 0) return;
  const int reporter = world - static_cast<int>(lowest);
  throw RanksDisagree{
      "rank " + std::to_string(reporter) + " of " + std::to_string(world) + ": its " + what +
          " differs from rank 0's: " + (difference ? *difference : std::string("?")),
      what == "data" ? "every rank must read the same data files (the same contents): copy them "
                       "to every node unchanged"
                     : "start every rank with the same --config file contents and the same --set "
                       "flags",
      rank == reporter};
}

}  // namespace ampctl::train
