// Small string helpers: str() concatenation, joining, closest-match suggestions.
#pragma once

#include <cstdint>
#include <sstream>
#include <string>
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

// A shape as users see it: "(26, 26, 32)".
std::string shape_str(const std::vector<int64_t>& shape);

// Human-readable byte counts and durations for logs: "1.5 MiB", "2.31 s".
std::string format_bytes(double bytes);
std::string format_seconds(double seconds);

}  // namespace dtrain
