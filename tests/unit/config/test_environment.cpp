// check_environment (config/environment.h): every AMPCTL_* path choice accepts exactly its values
// (and unset or empty), and anything else is a configuration error naming the variable, the
// values and, for a near miss, the one meant.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "ampctl/config/environment.h"
#include "ampctl/core/error.h"

namespace ampctl::config {
namespace {

// Sets one variable for the scope, restoring what was there.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : m_name(name) {
    if (const char* old = std::getenv(name)) m_old = old, m_had = true;
    ::setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (m_had) {
      ::setenv(m_name, m_old.c_str(), 1);
    } else {
      ::unsetenv(m_name);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* m_name;
  std::string m_old;
  bool m_had = false;
};

TEST(Environment, EveryListedValueAndEmptyAreAccepted) {
  for (const EnvironmentChoice& c : environment_choices()) {
    for (const std::string& v : c.values) {
      const ScopedEnv env(c.name, v.c_str());
      EXPECT_NO_THROW(check_environment()) << c.name << "=" << v;
    }
    const ScopedEnv empty(c.name, "");
    EXPECT_NO_THROW(check_environment()) << c.name << " empty";
  }
}

TEST(Environment, AnUnknownValueIsAConfigErrorWithTheNearMiss) {
  struct Case {
    const char* name;
    const char* value;
    const char* meant;  // "" when nothing is close
  };
  for (const Case& c : {Case{"AMPCTL_ATTENTION", "materialized", "materialised"},
                        Case{"AMPCTL_ATTENTION", "Fused", "fused"},
                        Case{"AMPCTL_GELU", "compose", "composed"}, Case{"AMPCTL_GELU", "off", ""},
                        Case{"AMPCTL_CPU_AMX", "no", ""}, Case{"AMPCTL_FORCE_SM75", "yes", ""}}) {
    const ScopedEnv env(c.name, c.value);
    try {
      check_environment();
      ADD_FAILURE() << c.name << "=" << c.value << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::config);
      EXPECT_EQ(e.exit_code(), 2);
      const std::string what = e.what();
      EXPECT_NE(what.find(std::string(c.name) + "='" + c.value + "': expected one of "),
                std::string::npos)
          << what;
      const std::string meant = std::string("did you mean ") + c.name + "=" + c.meant + "?";
      EXPECT_EQ(e.hint().find(meant) != std::string::npos, *c.meant != '\0') << e.hint();
    }
  }
}

}  // namespace
}  // namespace ampctl::config
