// Implementation of json_reader.h: JSON parsing with positions, value checks and
// ObjectReader.
//
// Malformed JSON is reported at line:column computed from nlohmann's byte offset
// (the last byte it read), with its message shortened and a hint for the common
// slips: a missing comma (reported where the comma belongs, not at the next token),
// a trailing comma, a missing bracket, single quotes, comments. Duplicate keys, which
// JSON parsers silently resolve to the last value, are caught with a parser callback
// that tracks the JSON path of the value being parsed.
#include "config/json_reader.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <limits>
#include <set>

#include "core/check.h"
#include "core/error.h"
#include "core/strings.h"

namespace dtrain::config {
namespace {

constexpr size_t kMaxShown = 60;  // longer values are cut in messages
constexpr int kMaxJsonDepth = 100;  // levels of nesting parse_json() accepts

// Where the token that ends at `index` starts (a string literal or a bare word/number).
size_t token_start(const std::string& text, size_t index) {
  size_t j = index;
  if (text[index] == '"') {
    while (j > 0 && !(text[j - 1] == '"' && (j < 2 || text[j - 2] != '\\'))) --j;
    return j == 0 ? 0 : j - 1;
  }
  while (j > 0 && (std::isalnum(static_cast<unsigned char>(text[j - 1])) ||
                   std::strchr("+-.", text[j - 1]) != nullptr))
    --j;
  return j;
}

// A malformed-JSON report: where (index into the text) and what.
struct ParseProblem {
  size_t index;
  std::string message;
};

// Turns nlohmann's "[json.exception.parse_error.101] parse error at line 3, column 4:
// syntax error while parsing object - unexpected string literal; expected '}'" into
// "unexpected string literal; expected '}'" plus a hint for the common slips. A token
// where ',' or a closing bracket was expected means a missing comma: the report then
// points just after the previous token, where the comma belongs.
ParseProblem explain_parse_error(const std::string& text, const Json::parse_error& e) {
  ParseProblem problem{e.byte == 0 ? 0 : e.byte - 1, e.what()};
  if (!text.empty() && problem.index >= text.size()) problem.index = text.size() - 1;
  std::string& message = problem.message;
  const size_t column = message.find("column ");
  const size_t colon = message.find(": ", column == std::string::npos ? 0 : column);
  if (colon != std::string::npos) message = message.substr(colon + 2);
  std::string context;
  const std::string syntax = "syntax error while parsing ";
  const size_t dash = message.find(" - ");
  if (message.rfind(syntax, 0) == 0 && dash != std::string::npos) {
    context = message.substr(syntax.size(), dash - syntax.size());
    message = message.substr(dash + 3);
  }
  auto ends_with = [&message](const std::string& tail) {
    return message.size() >= tail.size() &&
           message.compare(message.size() - tail.size(), tail.size(), tail) == 0;
  };
  // A token that can start a value, where ',' or a closing bracket was expected.
  bool unexpected_value = false;
  for (const char* token : {"string literal", "number literal", "'{'", "'['", "true literal",
                            "false literal", "null literal"})
    unexpected_value = unexpected_value || message.rfind(str("unexpected ", token, ";"), 0) == 0;
  // The token text in "...; last read: '<token>'; expected ..." (or "" without one).
  std::string read_text;
  const size_t last_read = message.find("last read: '");
  if (last_read != std::string::npos) {
    read_text = message.substr(last_read + 12);
    size_t end = read_text.rfind("'; expected");
    if (end == std::string::npos) end = read_text.rfind('\'');
    read_text = read_text.substr(0, end);
  }
  if (unexpected_value && !text.empty() &&
      ((context == "object" && ends_with("expected '}'")) ||
       (context == "array" && ends_with("expected ']'")))) {
    size_t prev = token_start(text, problem.index);
    while (prev > 0 && std::isspace(static_cast<unsigned char>(text[prev - 1]))) --prev;
    if (prev > 0) problem.index = prev;
    message += " (is a ',' missing here?)";
  } else if (context == "array" && message.rfind("unexpected '}'; expected ']'", 0) == 0) {
    message += " (is a ']' missing?)";
  } else if (context == "object" && message.rfind("unexpected ']'; expected '}'", 0) == 0) {
    message += " (is a '}' missing?)";
  } else if ((context == "object key" && message.rfind("unexpected '}'", 0) == 0) ||
             (context == "value" && message.rfind("unexpected ']'", 0) == 0)) {
    message += " (JSON allows no comma after the last element)";
  } else if (read_text.find('\'') != std::string::npos) {
    message += " (JSON strings need double quotes)";
  } else if (read_text.find('/') != std::string::npos) {
    message += " (JSON allows no comments)";
  }
  return problem;
}

// Line and column (both 1-based) of text[index].
void line_and_column(const std::string& text, size_t index, size_t* line, size_t* column) {
  *line = 1;
  size_t line_start = 0;
  for (size_t i = 0; i < index && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++*line;
      line_start = i + 1;
    }
  }
  *column = index - line_start + 1;
}

// Parser callback state: the JSON path of each open container, to name duplicate keys.
class DuplicateKeyCheck {
 public:
  explicit DuplicateKeyCheck(const Context& ctx) : ctx_(ctx) {}

  bool on_event(int depth, nlohmann::json::parse_event_t event, const Json& parsed) {
    using Event = nlohmann::json::parse_event_t;
    switch (event) {
      case Event::object_start:
      case Event::array_start:
        // Each level keeps its path: without a limit, 100,000 '[' take gigabytes.
        if (depth >= kMaxJsonDepth)
          ctx_.fail(frames_.empty() ? "" : frames_.back().path,
                    str("nested deeper than ", kMaxJsonDepth, " levels of arrays and objects; a job needs a few"));
        frames_.push_back({event == Event::array_start, 0, "", {}, next_child_path()});
        break;
      case Event::key: {
        Frame& top = frames_.back();
        top.key = parsed.get<std::string>();
        if (!top.keys.insert(top.key).second)
          ctx_.fail(top.path, str("duplicate key '", printable(top.key),
                                  "' (JSON keeps only the last one; remove the other)"));
        break;
      }
      case Event::value:
        if (!frames_.empty() && frames_.back().is_array) ++frames_.back().next_index;
        break;
      case Event::object_end:
      case Event::array_end:
        frames_.pop_back();
        break;
    }
    return true;
  }

 private:
  struct Frame {
    bool is_array;
    size_t next_index;
    std::string key;  // the key being parsed (objects)
    std::set<std::string> keys;
    std::string path;
  };

  // The path of the value that starts now, inside the innermost open container.
  std::string next_child_path() {
    if (frames_.empty()) return "";
    Frame& top = frames_.back();
    if (top.is_array) return index_path(top.path, top.next_index++);
    return child_path(top.path, top.key);
  }

  const Context& ctx_;
  std::vector<Frame> frames_;
};

std::string int_text(int64_t min) {
  if (min == 1) return "a positive integer";
  return str("an integer >= ", min);
}

bool in_range(double v, const NumberRange& r) {
  const bool lo_ok = r.lo_open ? v > r.lo : v >= r.lo;
  const bool hi_ok = r.hi_open ? v < r.hi : v <= r.hi;
  return lo_ok && hi_ok;
}

}  // namespace

void Context::fail(const std::string& path, const std::string& message,
                   const std::string* blame) const {
  // The places that quote the file's text escape it and cut it short; this keeps
  // any that did not (or a file name) from putting raw bytes in the message.
  throw ConfigError(printable(str(where(path), ": ", message, origin(blame ? *blame : path)), std::string::npos));
}

std::string Context::where(const std::string& path) const {
  if (path.empty()) return source;
  return variable ? child_path(source, path) : str(source, ": ", path);
}

std::string Context::origin(const std::string& path) const {
  // Look at the path, then its parents: "a.b[2].c", "a.b[2]", "a.b", "a".
  for (std::string p = path; !p.empty();) {
    const auto it = overridden.find(p);
    if (it != overridden.end()) return str(" (from --set ", it->second, ")");
    const size_t cut = p.find_last_of(".[");
    p = cut == std::string::npos ? std::string() : p.substr(0, cut);
  }
  return "";
}

Json parse_json(const std::string& text, const Context& ctx) {
  DuplicateKeyCheck check(ctx);
  try {
    return Json::parse(text, [&check](int depth, Json::parse_event_t event, Json& parsed) {
      return check.on_event(depth, event, parsed);
    });
  } catch (const Json::parse_error& e) {
    const ParseProblem problem = explain_parse_error(text, e);
    size_t line = 0, column = 0;
    line_and_column(text, problem.index, &line, &column);
    // nlohmann quotes the bytes it read ("last read: '...'") as they are.
    const std::string message = printable(problem.message, 200);
    throw ConfigError(printable(
        ctx.variable ? str(ctx.source, ": malformed JSON at ", line, ":", column, ": ", message)
                     : str(ctx.source, ":", line, ":", column, ": malformed JSON: ", message),
        std::string::npos));
  } catch (const Json::exception& e) {  // e.g. out_of_range 406: "number overflow parsing '1e400'"
    std::string message = e.what();
    const size_t bracket = message.find("] ");
    if (bracket != std::string::npos) message = message.substr(bracket + 2);
    throw ConfigError(printable(str(ctx.source, ": malformed JSON: ", printable(message, 200)), std::string::npos));
  }
}

std::string child_path(const std::string& path, const std::string& key) {
  // Keys come from the file: escaped and cut short, as paths are for messages.
  return path.empty() ? printable(key) : str(path, ".", printable(key));
}

std::string index_path(const std::string& path, size_t index) { return str(path, "[", index, "]"); }

std::string show(const Json& value) {
  std::string text = value.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (text.size() > kMaxShown) text = text.substr(0, kMaxShown - 3) + "...";
  return text;
}

std::string kind_name(const Json& value) {
  switch (value.type()) {
    case Json::value_t::null:
      return "null";
    case Json::value_t::boolean:
      return "a boolean";
    case Json::value_t::string:
      return "a string";
    case Json::value_t::array:
      return "an array";
    case Json::value_t::object:
      return "an object";
    default:
      return "a number";
  }
}

std::string describe(const Json& value) {
  if (value.is_null()) return "null";
  return str(show(value), " (", kind_name(value), ")");
}

std::string unknown_choice_message(const std::string& noun, const std::string& value,
                                   const std::vector<std::string>& choices) {
  const std::string guess = closest_match(value, choices);
  return str("unknown ", noun, " '", printable(value), "'",
             guess.empty() ? std::string() : str("; did you mean '", guess, "'?"),
             " (valid: ", join(choices, ", "), ")");
}

int64_t read_int(const Context& ctx, const Json& value, const std::string& path, int64_t min) {
  if (!value.is_number())
    ctx.fail(path, str("expected ", int_text(min), ", got ", describe(value)));
  if (value.is_number_float())
    ctx.fail(path, str("expected ", int_text(min), ", got ", show(value), " (not an integer)"));
  if (value.is_number_unsigned() &&
      value.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    ctx.fail(path, str("must be ", int_text(min), " below 2^63, got ", show(value)));
  const int64_t v = value.get<int64_t>();
  if (v < min) ctx.fail(path, str("must be ", int_text(min), ", got ", v));
  return v;
}

double read_double(const Context& ctx, const Json& value, const std::string& path,
                   const NumberRange& range) {
  if (!value.is_number()) ctx.fail(path, str("expected ", range.text, ", got ", describe(value)));
  const double v = value.get<double>();
  if (!in_range(v, range)) ctx.fail(path, str("must be ", range.text, ", got ", show(value)));
  return v;
}

bool read_bool(const Context& ctx, const Json& value, const std::string& path) {
  if (!value.is_boolean()) ctx.fail(path, str("expected true or false, got ", describe(value)));
  return value.get<bool>();
}

std::string read_string(const Context& ctx, const Json& value, const std::string& path,
                        bool allow_empty) {
  if (!value.is_string()) ctx.fail(path, str("expected a string, got ", describe(value)));
  std::string s = value.get<std::string>();
  if (s.empty() && !allow_empty) ctx.fail(path, "must not be an empty string");
  return s;
}

std::string read_choice(const Context& ctx, const Json& value, const std::string& path,
                        const std::vector<std::string>& choices, const std::string& noun) {
  if (!value.is_string())
    ctx.fail(path, str("expected a ", noun, " (one of ", join(choices, ", "), "), got ",
                       describe(value)));
  const std::string s = value.get<std::string>();
  if (std::find(choices.begin(), choices.end(), s) == choices.end())
    ctx.fail(path, unknown_choice_message(noun, s, choices));
  return s;
}

void read_pair(const Context& ctx, const Json& value, const std::string& path, int64_t out[2]) {
  if (value.is_number()) {
    out[0] = out[1] = read_int(ctx, value, path, 1);
    return;
  }
  if (!value.is_array() || value.size() != 2)
    ctx.fail(path,
             str("expected a positive integer or a pair [height, width], got ", describe(value)));
  for (size_t i = 0; i < 2; ++i) out[i] = read_int(ctx, value[i], index_path(path, i), 1);
}

std::vector<int64_t> read_shape(const Context& ctx, const Json& value, const std::string& path) {
  if (!value.is_array())
    ctx.fail(path, str("expected an array of 1 to 3 positive integers such as [28, 28, 1], got ",
                       describe(value)));
  if (value.empty() || value.size() > 3)
    ctx.fail(path, str("must have 1 to 3 dimensions, such as [784] or [28, 28, 1], got ",
                       show(value), " (", value.size(), " dimensions)"));
  std::vector<int64_t> shape;
  for (size_t i = 0; i < value.size(); ++i)
    shape.push_back(read_int(ctx, value[i], index_path(path, i), 1));
  return shape;
}

std::vector<std::string> read_string_list(const Context& ctx, const Json& value,
                                          const std::string& path) {
  if (!value.is_array() || value.empty())
    ctx.fail(path, str("expected a non-empty array of file names, got ", describe(value)));
  std::vector<std::string> out;
  for (size_t i = 0; i < value.size(); ++i)
    out.push_back(read_string(ctx, value[i], index_path(path, i)));
  return out;
}

ObjectReader::ObjectReader(const Context& ctx, const Json& value, std::string path,
                           std::string what)
    : ctx_(ctx), object_(value), path_(std::move(path)), what_(std::move(what)) {
  if (!object_.is_object())
    ctx_.fail(path_, str("expected an object for ", what_, ", got ", describe(object_)));
}

const Json* ObjectReader::find(const std::string& key) {
  if (std::find(known_.begin(), known_.end(), key) == known_.end()) known_.push_back(key);
  if (std::find(asked_.begin(), asked_.end(), key) == asked_.end()) asked_.push_back(key);
  const auto it = object_.find(key);
  return it == object_.end() ? nullptr : &*it;
}

const Json& ObjectReader::require(const std::string& key, const std::string& hint) {
  const Json* value = find(key);
  if (!value) {
    // A present key that no getter asked for and that looks like this one is
    // probably a misspelling of it: say so rather than only "needs".
    std::vector<std::string> unasked;
    for (const auto& item : object_.items())
      if (std::find(known_.begin(), known_.end(), item.key()) == known_.end())
        unasked.push_back(item.key());
    const std::string typo = closest_match(key, unasked);
    ctx_.fail(path_,
              str(what_, " needs '", key, "'", hint,
                  typo.empty() ? std::string() : str("; is '", printable(typo), "' a misspelling of it?")));
  }
  return *value;
}

int64_t ObjectReader::get_int(const std::string& key, int64_t fallback, int64_t min) {
  const Json* value = find(key);
  return value ? read_int(ctx_, *value, path_of(key), min) : fallback;
}

int64_t ObjectReader::require_int(const std::string& key, int64_t min) {
  return read_int(ctx_, require(key), path_of(key), min);
}

double ObjectReader::get_double(const std::string& key, double fallback, const NumberRange& range) {
  const Json* value = find(key);
  return value ? read_double(ctx_, *value, path_of(key), range) : fallback;
}

double ObjectReader::require_double(const std::string& key, const NumberRange& range) {
  return read_double(ctx_, require(key), path_of(key), range);
}

bool ObjectReader::get_bool(const std::string& key, bool fallback) {
  const Json* value = find(key);
  return value ? read_bool(ctx_, *value, path_of(key)) : fallback;
}

std::string ObjectReader::get_string(const std::string& key, const std::string& fallback) {
  const Json* value = find(key);
  return value ? read_string(ctx_, *value, path_of(key)) : fallback;
}

std::string ObjectReader::require_string(const std::string& key) {
  return read_string(ctx_, require(key), path_of(key));
}

std::string ObjectReader::get_choice(const std::string& key, const std::string& fallback,
                                     const std::vector<std::string>& choices,
                                     const std::string& noun) {
  const Json* value = find(key);
  return value ? read_choice(ctx_, *value, path_of(key), choices, noun) : fallback;
}

std::string ObjectReader::require_choice(const std::string& key,
                                         const std::vector<std::string>& choices,
                                         const std::string& noun) {
  const Json& value = require(key, str(" (one of ", join(choices, ", "), ")"));
  return read_choice(ctx_, value, path_of(key), choices, noun);
}

void ObjectReader::get_pair(const std::string& key, int64_t out[2]) {
  if (const Json* value = find(key)) read_pair(ctx_, *value, path_of(key), out);
}

void ObjectReader::expect_keys(const std::vector<std::string>& keys, const Explain& explain) {
  for (const auto& key : keys)
    if (std::find(known_.begin(), known_.end(), key) == known_.end()) known_.push_back(key);
  reject_unknown(explain);
}

void ObjectReader::finish(const Explain& explain) const {
  reject_unknown(explain);
  for (const auto& key : known_)
    DT_CHECK(std::find(asked_.begin(), asked_.end(), key) != asked_.end(), "key '", key, "' of ",
             what_, " at '", path_, "' is declared valid but never read");
}

void ObjectReader::reject_unknown(const Explain& explain) const {
  for (const auto& item : object_.items()) {
    const std::string& key = item.key();
    if (std::find(known_.begin(), known_.end(), key) != known_.end()) continue;
    // A note ("'files' belongs to cifar10 sources") beats a spelling guess.
    std::string note = explain ? explain(key) : std::string();
    if (note.empty()) {
      const std::string guess = closest_match(key, known_);
      if (!guess.empty()) note = str("did you mean '", guess, "'?");
    }
    const std::string message = str(path_.empty() ? "unknown top-level key '" : "unknown key '",
                                    printable(key), "'", path_.empty() ? std::string() : str(" for ", what_),
                                    note.empty() ? std::string() : str("; ", note),
                                    " (valid keys: ", join(known_, ", "), ")");
    const std::string blame = path_of(key);
    ctx_.fail(path_, message, &blame);
  }
}

}  // namespace dtrain::config
