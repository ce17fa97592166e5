// What every fuzz target shares: the verdict on one call of a parser, splitting the
// input into parts, and input files in a private temporary folder.
//
// A parser given bad bytes may only throw one of dtrain's own errors (ConfigError,
// IoError, ...; lib/core/error.h), with a message of printable text. Anything else
// is a bug and aborts the run, so that libFuzzer saves the input: another
// exception type (nlohmann::json's, std::out_of_range, ...), an InternalError (a
// DT_CHECK that bad input can reach), raw control characters or invalid UTF-8 in a
// message. Crashes and ASan/UBSan reports abort by themselves.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <typeinfo>
#include <vector>

#include "core/error.h"

namespace dtrain::fuzz {

[[noreturn]] inline void fuzz_fail(const std::string& what, const std::string& message) {
  std::fprintf(stderr, "\nFUZZ BUG: %s\n  message: %s\n", what.c_str(), message.c_str());
  std::abort();
}

// The first byte of `message` that is not printable text (a control character, DEL, a
// C1 control or invalid UTF-8), or npos.
inline size_t first_unprintable(std::string_view message) {
  size_t i = 0;
  while (i < message.size()) {
    const unsigned char c = static_cast<unsigned char>(message[i]);
    if (c < 0x20 || c == 0x7f) return i;
    if (c < 0x80) {
      ++i;
      continue;
    }
    const size_t n = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
    if (n == 0 || i + n > message.size()) return i;
    uint32_t code = c & (n == 2 ? 0x1fu : n == 3 ? 0x0fu : 0x07u);
    for (size_t k = 1; k < n; ++k) {
      const unsigned char b = static_cast<unsigned char>(message[i + k]);
      if ((b & 0xc0u) != 0x80u) return i;
      code = (code << 6) | (b & 0x3fu);
    }
    if ((n == 3 && code < 0x800) || (n == 4 && code < 0x10000) || (code >= 0xd800 && code <= 0xdfff) ||
        code > 0x10ffff || (code >= 0x80 && code <= 0x9f))
      return i;
    i += n;
  }
  return std::string_view::npos;
}

// Aborts unless `message` is printable text. (Built with -DDTRAIN_FUZZ_IGNORE_MESSAGES,
// for triage, it lets every message pass, to reach a parser's other bugs first.)
inline void check_message(const std::string& message) {
#ifdef DTRAIN_FUZZ_IGNORE_MESSAGES
  return;
#endif
  const size_t at = first_unprintable(message);
  if (at != std::string_view::npos)
    fuzz_fail("an error message holds a raw unprintable byte at offset " + std::to_string(at) +
                  " (quote outside bytes with dtrain::printable())",
              message);
}

// Runs `parse`: returning, or throwing a dtrain error with a printable message, is
// fine; anything else aborts. Returns whether `parse` returned.
template <class Fn>
bool expect_clean(Fn&& parse) {
  try {
    parse();
    return true;
  } catch (const InternalError& e) {
    fuzz_fail("an InternalError (a DT_CHECK that bad input reaches)", e.what());
  } catch (const Error& e) {
    check_message(e.what());
  } catch (const std::exception& e) {
    fuzz_fail(std::string("an exception that is not a dtrain error: ") + typeid(e).name(), e.what());
  } catch (...) {
    fuzz_fail("an exception of an unknown type", "");
  }
  return false;
}

// The input split at every `separator` byte (n separators give n + 1 parts).
inline std::vector<std::string> split_input(const uint8_t* data, size_t size, char separator = '\0') {
  std::vector<std::string> parts(1);
  for (size_t i = 0; i < size; ++i) {
    if (static_cast<char>(data[i]) == separator)
      parts.emplace_back();
    else
      parts.back() += static_cast<char>(data[i]);
  }
  return parts;
}

// A folder of this process's own for input files ($TMPDIR, else /dev/shm when there is
// one, else /tmp), made on first use and removed at exit. (The process stays where it
// is: libFuzzer's paths may be relative.)
inline const std::string& work_dir() {
  static const std::string dir = [] {
    const char* tmp = std::getenv("TMPDIR");
    std::error_code ignored;
    const std::filesystem::path base = tmp && *tmp                                     ? tmp
                                       : std::filesystem::is_directory("/dev/shm", ignored) ? "/dev/shm"
                                                                                          : "/tmp";
    const std::filesystem::path d = base / ("dtrain-fuzz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    static const std::string* const removed_at_exit = new std::string(d.string());  // outlives `dir`
    std::atexit([] {
      std::error_code ignored;
      std::filesystem::remove_all(*removed_at_exit, ignored);
    });
    return d.string();
  }();
  return dir;
}

// Writes `bytes` to work_dir()/name and returns the path.
inline std::string write_file(const std::string& name, std::string_view bytes) {
  const std::string path = work_dir() + "/" + name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) fuzz_fail("cannot write the input file " + path, "");
  return path;
}

}  // namespace dtrain::fuzz
