// Numbers as text for messages, tables and pages: the two ways the code writes one.
#pragma once

#include <cstdio>
#include <sstream>
#include <string>

namespace ampctl {

// v as std::ostream writes it (6 significant digits, %g-like): the messages' numbers. A float
// argument reads the same (the stream widens it to double too).
inline std::string fmt(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

// v through a printf format of one double conversion ("%.3g", "%.1f"), up to 63 characters.
inline std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

}  // namespace ampctl
