// Small string helpers: str() concatenation, joining, closest-match suggestions,
// printable() for quoting outside bytes in messages.
#pragma once

#include <cstdint>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace dtrain {

// str("a", 1, 'b') == "a1b": concatenates anything that has operator<<.
template <class... Args>
std::string str(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

// join({"a","b"}, ", ") == "a, b"
std::string join(const std::vector<std::string>& parts, const std::string& sep);

// Levenshtein edit distance between two strings.
int edit_distance(const std::string& a, const std::string& b);

// The candidate closest to `word`, or "" if none is close enough to be a likely typo.
std::string closest_match(const std::string& word, const std::vector<std::string>& candidates);

// How much of an outside value an error message quotes by default.
inline constexpr size_t kMaxQuoted = 80;

// Outside bytes (a key, a file name, a field of a network message) made safe to
// quote in a message: control characters (\n, \r, \t, \xHH), DEL, C1 controls and
// bytes that are not valid UTF-8 become escapes; printable ASCII and valid UTF-8
// letters stay as they are; text over `max_bytes` is cut at a character boundary
// and ends in "..." (std::string::npos: never cut). A backslash stays as it is, so
// printable(printable(x)) == printable(x). For reading, not for parsing back.
std::string printable(std::string_view text, size_t max_bytes = kMaxQuoted);

// ASCII lower case: lower("Worker") == "worker" (bytes beyond ASCII unchanged).
std::string lower(std::string text);
// Whether `text` is one or more ASCII digits and nothing else ("" is not).
bool all_digits(std::string_view text);

// A shape as users see it: "(26, 26, 32)".
std::string shape_str(const std::vector<int64_t>& shape);

// Human-readable byte counts and durations for logs: "1.5 MiB", "2.31 s".
std::string format_bytes(double bytes);
std::string format_seconds(double seconds);
// `value` with `digits` decimals, as printf's "%.*f": format_fixed(2.345, 1) == "2.3".
std::string format_fixed(double value, int digits);

}  // namespace dtrain
