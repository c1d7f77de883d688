// ampctl_gen_reference: keeps docs/reference.md's configuration key table equal to the config
// declaration (lib/src/config/run_config.cpp).
//
//   ampctl_gen_reference                 print the generated table
//   ampctl_gen_reference --write FILE    replace the table between FILE's markers (`cmake --build
//                                        BUILD --target docs` runs this on docs/reference.md)
//   ampctl_gen_reference --check FILE    exit 0 when FILE's table is the generated one, else print
//                                        each missing, changed or extra row and exit 1 (the
//                                        docs.key_table test)
//
// Exit 2 on a usage error or an unreadable file, or when FILE lacks the markers.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <system_error>

#include "ampctl/config/reference.h"
#include "ampctl/core/error.h"
#include "ampctl/core/input_file.h"

namespace {

using ampctl::Error;
using ampctl::ErrorKind;

// The whole document (a regular file, capped), or an error: a failed read is never taken for the
// end, so --write never rewrites the file from part of it.
std::string read_file(const std::filesystem::path& path) {
  return ampctl::read_regular_file(path, size_t{16} << 20, "document");
}

// Through a temporary beside the file and a rename, so an interrupted write leaves the old text.
void write_file(const std::filesystem::path& path, const std::string& text) {
  const std::filesystem::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    out.close();
    if (!out) throw Error{ErrorKind::runtime, "cannot write " + tmp.string()};
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) throw Error{ErrorKind::runtime, "cannot replace " + path.string() + ": " + ec.message()};
}

int usage() {
  std::cerr << "error: usage: ampctl_gen_reference [--write FILE | --check FILE]\n";
  return 2;
}

int run(int argc, char** argv) {
  namespace config = ampctl::config;
  const std::string generated = config::key_reference_markdown();
  if (argc == 1) {
    std::cout << generated;
    return 0;
  }
  if (argc != 3) return usage();
  const std::string mode = argv[1];
  const std::filesystem::path file = argv[2];
  if (mode == "--write") {
    const std::string document = read_file(file);
    const std::string updated = config::replace_generated(document, generated);
    if (updated != document) write_file(file, updated);
    std::cout << (updated != document ? "updated " : "unchanged ") << file.string() << "\n";
    return 0;
  }
  if (mode != "--check") return usage();
  const std::string checked_in = config::generated_part(read_file(file));
  const auto differences = config::key_table_differences(checked_in, generated);
  if (differences.empty()) return 0;
  std::cerr << "error: " << file.string()
            << ": the configuration key table differs from the declaration in "
               "lib/src/config/run_config.cpp:\n";
  for (const std::string& d : differences) std::cerr << "  " << d << "\n";
  std::error_code ec;
  const std::filesystem::path build = std::filesystem::absolute(argv[0], ec).parent_path();
  std::cerr << "hint: regenerate it with `cmake --build " << build.string()
            << " --target docs` (or `" << argv[0] << " --write " << file.string()
            << "`), then review and commit the change\n";
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const ampctl::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  }
}
