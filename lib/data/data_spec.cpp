// Implementation of data_spec.h: the data section read through the format
// registry. A source's keys are declared from its format's entry first, so a key
// of another format says whose it is ("'files' belongs to cifar10 sources").
#include "data/data_spec.h"

#include <algorithm>
#include <string>

#include "core/strings.h"
#include "data/dataset.h"

namespace dtrain::data {
DataSourceSpec read_source_spec(const config::Value& value) {
  DataSourceSpec src;
  src.path = value.path();
  config::Section r(value, "a data source");
  src.format = &data_format(r.require_choice("format", config::entry_names(data_formats()), "data format"));
  r.set_what(config::with_article(src.format->name) + " source");
  r.expect_keys(config::declared_keys({"format"}, src.format->keys, {"take"}),
                [](const std::string& key) { return config::entry_key_note(data_formats(), "sources", key); });
  src.format->read(r, src);
  src.take = r.get_int("take", src.take, 0);
  r.finish();
  return src;
}

namespace {

// data.prefetch: a count of batches, or "auto" (nullopt). A count may come as a
// string too ("2"): --set gives a string over a string already there ("auto").
std::optional<int64_t> read_prefetch(const config::Value& v) {
  if (!v.is_string()) return v.to_int(0);
  const std::string text = v.to_string();
  if (text == "auto") return std::nullopt;
  if (!text.empty() && text.size() <= 9 && std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return std::stoll(text);
  v.fail(str("expected a number of batches (0 or more) or \"auto\", got ", v.describe()));
}

}  // namespace

// data.test and data.validation may be null (no such set), which lets --set
// data.test=null drop it.
DataSpec read_data_spec(const config::Value& value) {
  DataSpec data;
  config::Section r(value, "the data section");
  data.path = value.path().empty() ? "data" : value.path();
  r.expect_keys({"train", "test", "validation", "shuffle_buffer", "prefetch", "drop_remainder", "cache", "shard_policy",
                 "num_parallel_calls"});
  data.train = read_source_spec(r.require("train", " (the training data source)"));
  const auto test = r.find("test");
  if (test && !test->is_null()) {
    data.has_test = true;
    data.test = read_source_spec(*test);
  }
  const auto validation = r.find("validation");
  if (validation && !validation->is_null()) {
    data.has_validation = true;
    data.validation = read_source_spec(*validation);
  }
  data.shuffle_buffer = r.get_int("shuffle_buffer", data.shuffle_buffer, 0);
  if (const auto prefetch = r.find("prefetch")) data.prefetch = read_prefetch(*prefetch);
  data.drop_remainder = r.get_bool("drop_remainder", data.drop_remainder);
  data.cache = r.get_bool("cache", data.cache);
  const std::string policy = r.get_choice("shard_policy", "auto", {"auto", "data", "file", "off"}, "shard policy");
  data.shard_policy = policy == "data"   ? ShardPolicy::kData
                      : policy == "file" ? ShardPolicy::kFile
                      : policy == "off"  ? ShardPolicy::kOff
                                         : ShardPolicy::kAuto;
  data.num_parallel_calls = r.get_int("num_parallel_calls", 0, 0);
  for (DataSourceSpec* source : {&data.train, &data.test, &data.validation}) {
    source->parallel_calls = data.num_parallel_calls;
    // Without the cache, a format that can stream reads its files every epoch.
    source->stream = !data.cache && source->format && source->format->stream;
  }
  r.finish();
  return data;
}

void use_model_input_shape(DataSpec& data, const std::vector<int64_t>& input_shape) {
  for (DataSourceSpec* source : {&data.train, &data.test, &data.validation})
    if (source->format && source->format->shape_from_model && source->shape.empty()) source->shape = input_shape;
}

}  // namespace dtrain::data
