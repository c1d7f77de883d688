// check_environment (config/environment.h): every AMPCTL_* path choice accepts exactly its values
// (and unset or empty), and anything else is a configuration error naming the variable, the
// values and, for a near miss, the one meant.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "ampctl/config/environment.h"
#include "ampctl/core/cpu_isa.h"
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

// Whether this CPU has the AMPCTL_CPU_ISA path `value` (a listed path the CPU lacks is refused).
bool cpu_has_path(const std::string& value) {
  const CpuIsa best = decide_cpu_isa(cpu_caps(), nullptr, nullptr).best;
  return value == "portable" || (value == "avx2" && best >= CpuIsa::avx2) ||
         (value == "avx512" && best >= CpuIsa::avx512);
}

TEST(Environment, EveryListedValueAndEmptyAreAccepted) {
  for (const EnvironmentChoice& c : environment_choices()) {
    for (const std::string& v : c.values) {
      const ScopedEnv env(c.name, v.c_str());
      if (std::string(c.name) == "AMPCTL_CPU_ISA" && !cpu_has_path(v)) {
        EXPECT_THROW(check_environment(), Error) << c.name << "=" << v << " on a CPU without it";
        continue;
      }
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
  for (const Case& c :
       {Case{"AMPCTL_ATTENTION", "materialized", "materialised"},
        Case{"AMPCTL_ATTENTION", "Fused", "fused"}, Case{"AMPCTL_GELU", "compose", "composed"},
        Case{"AMPCTL_GELU", "off", ""}, Case{"AMPCTL_CPU_AMX", "no", ""},
        Case{"AMPCTL_FORCE_SM75", "yes", ""}, Case{"AMPCTL_CPU_ISA", "avx", "avx2"},
        Case{"AMPCTL_CPU_ISA", "avx-512", "avx512"}, Case{"AMPCTL_CPU_ISA", "sse", ""}}) {
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

// A path the CPU has is accepted; one beyond it is exit 2 naming the variable, the value and the
// paths the CPU has (decide_cpu_isa's refusal: tests/unit/core/test_cpu_isa.cpp gives it every
// CPU; this runs on the real one).
TEST(Environment, CpuIsaBeyondTheCpuIsRefusedNamingWhatItHas) {
  const CpuIsa best = decide_cpu_isa(cpu_caps(), nullptr, nullptr).best;
  if (best == CpuIsa::avx512) GTEST_SKIP() << "this CPU has every path";
  const char* want = best == CpuIsa::avx2 ? "avx512" : "avx2";
  const ScopedEnv env("AMPCTL_CPU_ISA", want);
  try {
    check_environment();
    ADD_FAILURE() << "AMPCTL_CPU_ISA=" << want << " accepted on a CPU whose best is "
                  << cpu_isa_name(best);
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2);
    const std::string what = e.what();
    EXPECT_NE(what.find(std::string("AMPCTL_CPU_ISA=") + want), std::string::npos) << what;
    EXPECT_NE(what.find("its paths: "), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace ampctl::config
