// Running the qeval executable from a CLI test: its path comes from ctest (QEVAL_BINARY); stdout
// and stderr come back together with the exit status (-1 when it did not exit normally).
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace qeval::test {

struct CommandResult {
  int status;
  std::string output;  // stdout and stderr together
};

// `env`: "NAME=value ..." set for this command only; `cwd`: the folder it runs in (default: the
// test's own).
inline CommandResult run_qeval(const std::string& args, const std::string& env = "", const std::string& cwd = "") {
  const char* bin = std::getenv("QEVAL_BINARY");
  if (!bin) {
    ADD_FAILURE() << "QEVAL_BINARY is not set (run through ctest)";
    return {-1, ""};
  }
  std::string cmd = (cwd.empty() ? "" : "cd '" + cwd + "' && ") + (env.empty() ? "" : "env " + env + " ") + std::string(bin) +
                    " " + args + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf{};
  while (std::size_t n = std::fread(buf.data(), 1, buf.size(), pipe)) out.append(buf.data(), n);
  int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

inline bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace qeval::test
