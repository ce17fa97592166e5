// A fresh temporary directory per test (TempDir, made with mkdtemp under $TMPDIR
// and removed with everything in it afterwards), and whole-file helpers for the
// files tests put there. Header-only and independent of dtrain's libraries: every
// test executable (unit, integration, gpu) uses this one.
#pragma once

#include <stdlib.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>

namespace dtrain::test {

// A directory of its own for one test; removed with everything in it on destruction
// (kept when the environment variable DTRAIN_KEEP_TEST_DIRS is set, for debugging).
// A directory that cannot be made or a file that cannot be written throws, which
// fails the test with the path in the message.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = std::string(base && *base ? base : "/tmp") + "/dtrain-test-XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr)
      throw std::runtime_error("mkdtemp(" + pattern + "): " + std::strerror(errno));
    path_ = pattern;
  }
  ~TempDir() {
    if (std::getenv("DTRAIN_KEEP_TEST_DIRS")) return;
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);  // best effort: a leftover dir must not fail a test
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  // path()/name (the file need not exist).
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  // Writes `bytes` to path()/name and returns that path.
  std::string write(const std::string& name, const std::string& bytes) const;

 private:
  std::string path_;
};

// The whole file as bytes ("" when it cannot be read).
inline std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Replaces the file's contents with `bytes`; throws when it cannot be written.
inline void spit(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) throw std::runtime_error("cannot write the test file " + path);
}

inline std::string TempDir::write(const std::string& name, const std::string& bytes) const {
  const std::string target = file(name);
  spit(target, bytes);
  return target;
}

}  // namespace dtrain::test
