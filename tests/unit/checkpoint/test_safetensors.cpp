// safetensors writer and reader: bit-exact round trip, the exact byte layout of a
// tiny file, IoError for every kind of malformed file, and a read of selected
// tensors that reads only their bytes.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <set>

#include "checkpoint/safetensors.h"
#include "core/error.h"
#include "core/sha256.h"
#include "support/temp_dir.h"

using namespace dtrain;
using namespace dtrain::checkpoint;

namespace {

std::string u64le(uint64_t v) {
  std::string s;
  for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  return s;
}

// A file from a header text and data bytes, with the correct length prefix.
std::string make_file(const std::string& header, const std::string& data) { return u64le(header.size()) + header + data; }

std::string floats(std::initializer_list<float> values) {
  std::string s;
  for (float v : values) s.append(reinterpret_cast<const char*>(&v), sizeof v);
  return s;
}

// Bytes this process has read from files so far (Linux's /proc/self/io rchar), or
// -1 where that is not available.
int64_t bytes_read_so_far() {
  std::ifstream io("/proc/self/io");
  std::string key;
  int64_t value = 0;
  while (io >> key >> value)
    if (key == "rchar:") return value;
  return -1;
}

}  // namespace

TEST_CASE("safetensors round trip is bit-exact and keeps order and metadata") {
  test::TempDir dir;
  std::vector<float> a = {1.5f, -0.0f, std::numeric_limits<float>::denorm_min(), 3.4e38f, NAN, -INFINITY};
  std::vector<float> b(3 * 4 * 5);
  for (size_t i = 0; i < b.size(); ++i) b[i] = std::sin(static_cast<float>(i)) * 1e-3f;
  const std::vector<TensorRef> refs = {
      {"dense_1/kernel", {2, 3}, a.data()}, {"dense/bias", {3, 4, 5}, b.data()}, {"empty", {0, 4}, nullptr}};
  uint64_t bytes = 0;
  const std::string sha = write_safetensors(dir.file("t.safetensors"), refs, {{"step", "7"}, {"format", "dtrain"}}, &bytes);
  CHECK(bytes == test::slurp(dir.file("t.safetensors")).size());
  CHECK(sha == sha256_hex(test::slurp(dir.file("t.safetensors"))));

  const SafetensorsFile f = read_safetensors(dir.file("t.safetensors"));
  REQUIRE(f.tensors.size() == 3);
  CHECK(f.tensors[0].name == "dense_1/kernel");
  CHECK(f.tensors[1].name == "dense/bias");
  CHECK(f.tensors[2].name == "empty");
  CHECK(f.tensors[0].tensor.shape() == Shape{2, 3});
  CHECK(f.tensors[1].tensor.shape() == Shape{3, 4, 5});
  CHECK(f.tensors[2].shape == Shape{0, 4});
  CHECK(std::memcmp(f.tensors[0].tensor.data(), a.data(), a.size() * 4) == 0);
  CHECK(std::memcmp(f.tensors[1].tensor.data(), b.data(), b.size() * 4) == 0);
  CHECK(f.metadata == std::map<std::string, std::string>{{"step", "7"}, {"format", "dtrain"}});
  REQUIRE(f.find("dense/bias") != nullptr);
  CHECK(f.find("nope") == nullptr);

  const SafetensorsFile h = read_safetensors_header(dir.file("t.safetensors"));
  REQUIRE(h.tensors.size() == 3);
  CHECK(h.tensors[1].shape == Shape{3, 4, 5});
  CHECK_FALSE(h.tensors[1].tensor.defined());
}

TEST_CASE("safetensors layout is byte-exact for a tiny file") {
  test::TempDir dir;
  const float x[2] = {1.0f, -2.0f};
  const float y[1] = {0.5f};
  write_safetensors(dir.file("t.safetensors"), {{"x", {2}, x}, {"y", {1, 1}, y}}, {{"k", "v"}});
  const std::string json =
      R"({"__metadata__":{"k":"v"},"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("y":{"dtype":"F32","shape":[1,1],"data_offsets":[8,12]}})";
  std::string padded = json;
  padded.append((8 - padded.size() % 8) % 8, ' ');
  const std::string expected = u64le(padded.size()) + padded + floats({1.0f, -2.0f, 0.5f});
  const std::string got = test::slurp(dir.file("t.safetensors"));
  CHECK(got == expected);
  // Spelled out: the length prefix is little-endian and the data starts 8-aligned.
  CHECK(static_cast<unsigned char>(got[0]) == padded.size());
  CHECK(got.substr(1, 7) == std::string(7, '\0'));
  CHECK((8 + padded.size()) % 8 == 0);
  CHECK(got.substr(8 + padded.size(), 4) == std::string("\x00\x00\x80\x3f", 4));  // 1.0f
}

TEST_CASE("malformed safetensors files are IoErrors naming the file and the problem") {
  test::TempDir dir;
  const std::string path = dir.file("bad.safetensors");
  const std::string x = R"("x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  const std::string good = make_file("{" + x + "}", floats({1, 2}));
  auto expect_error = [&](const std::string& bytes, const std::string& what) {
    test::spit(path, bytes);
    INFO(what);
    CHECK_THROWS_WITH(read_safetensors(path), Catch::Contains(path) && Catch::Contains(what));
    CHECK_THROWS_AS(read_safetensors(path), IoError);
  };
  test::spit(path, good);
  CHECK_NOTHROW(read_safetensors(path));

  expect_error("", "truncated");
  expect_error(good.substr(0, 5), "truncated");
  expect_error(good.substr(0, good.size() - 1), "past the end of the data");
  expect_error(good.substr(0, 20), "exceeds the file");
  expect_error(u64le(1000) + "{}", "exceeds the file");
  expect_error(u64le(uint64_t(1) << 62) + "{}", "larger than the limit");
  expect_error(make_file("[1,2]", ""), "header does not start with '{'");
  expect_error(make_file("{\"x\":", ""), "not valid JSON");
  expect_error(make_file(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", floats({1, 2, 3})),
               "gap in the data");
  expect_error(make_file(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", floats({1, 2})),
               "begin > end");
  expect_error(make_file(R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", floats({1, 2})),
               "needs 12 bytes");
  // A shape whose size overflows is said to need more than the file holds (not "0 bytes").
  expect_error(make_file(R"({"x":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})",
                         floats({1, 2})),
               "needs more bytes than the file's 8 bytes of data");
  expect_error(make_file(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                         R"("y":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                         floats({1, 2})),
               "overlaps");
  expect_error(make_file("{" + x + "}", floats({1, 2, 3})), "trailing bytes");
  expect_error(make_file(R"({"x":{"dtype":"Q7","shape":[2],"data_offsets":[0,8]}})", floats({1, 2})),
               "unknown dtype 'Q7'");
  expect_error(make_file(R"({"x":{"dtype":"F16","shape":[4],"data_offsets":[0,8]}})", floats({1, 2})),
               "only F32 is supported");
  expect_error(make_file(R"({"x":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", floats({1, 2})),
               "not a non-negative integer");
  expect_error(make_file(R"({"x":{"dtype":"F32","shape":[2]}})", floats({1, 2})), "data_offsets");
  expect_error(make_file(R"({"__metadata__":{"a":1},)" + x + "}", floats({1, 2})), "is not a string");
  CHECK_THROWS_AS(read_safetensors(dir.file("missing.safetensors")), IoError);
}

// Found by tests/fuzz/fuzz_safetensors.cpp (by review, then run through it).
TEST_CASE("a shape entry past 2^63 is an IoError, not a negative dimension") {
  test::TempDir dir;
  const std::string path = dir.file("bad.safetensors");
  // No elements, so the sizes agree; the dimension read as int64 was -1, and making
  // the tensor failed an internal check (tensor.cpp: d >= 0).
  test::spit(path, make_file(R"({"x":{"dtype":"F32","shape":[0,18446744073709551615],"data_offsets":[0,0]}})", ""));
  CHECK_THROWS_AS(read_safetensors(path), IoError);
  CHECK_THROWS_WITH(read_safetensors(path), Catch::Contains("tensor 'x' has a shape entry that is not a non-negative integer"));
  CHECK_THROWS_AS(read_safetensors_header(path), IoError);
}

TEST_CASE("tensor names from the file are quoted escaped in errors") {
  test::TempDir dir;
  const std::string path = dir.file("bad.safetensors");
  test::spit(path, make_file("{\"a\\u001b[2Jb\":{\"dtype\":\"Q7\",\"shape\":[2],\"data_offsets\":[0,8]}}", floats({1, 2})));
  CHECK_THROWS_WITH(read_safetensors(path), Catch::Contains("tensor 'a\\x1b[2Jb' has unknown dtype 'Q7'"));
}

TEST_CASE("write_safetensors rejects duplicate names") {
  test::TempDir dir;
  const float v = 1;
  CHECK_THROWS_AS(write_safetensors(dir.file("t"), {{"a", {1}, &v}, {"a", {1}, &v}}, {}), InternalError);
}

TEST_CASE("a selected read returns only the wanted tensors and reads only their bytes") {
  test::TempDir dir;
  std::vector<float> small = {1.0f, 2.0f, 3.0f}, last = {-1.0f, -2.0f};
  std::vector<float> big(1 << 20);  // 4 MiB, between the wanted ones
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(i);
  const std::string path = dir.file("t.safetensors");
  write_safetensors(path, {{"a", {3}, small.data()}, {"big", {1 << 20}, big.data()}, {"z", {2, 1}, last.data()}},
                    {{"format", "dtrain"}});

  const std::set<std::string> wanted = {"a", "z", "not_in_the_file"};
  const int64_t before = bytes_read_so_far();
  const SafetensorsFile f = read_safetensors(path, [&](const std::string& n) { return wanted.count(n) > 0; });
  const int64_t read = bytes_read_so_far() - before;
  REQUIRE(f.tensors.size() == 2);  // in file order; a wanted name the file lacks is simply absent
  CHECK(f.tensors[0].name == "a");
  CHECK(f.tensors[1].name == "z");
  CHECK(f.tensors[1].tensor.shape() == Shape{2, 1});
  CHECK(std::memcmp(f.find("a")->data(), small.data(), 3 * sizeof(float)) == 0);
  CHECK(std::memcmp(f.find("z")->data(), last.data(), 2 * sizeof(float)) == 0);
  CHECK(f.find("big") == nullptr);
  CHECK(f.find("not_in_the_file") == nullptr);
  CHECK(f.metadata.at("format") == "dtrain");
  // The 4 MiB tensor was skipped, not read and dropped (a stream buffer's worth of
  // bytes around the wanted ones at most), where a whole read reads all of it.
  if (before >= 0) {
    CHECK(read < (1 << 20));
    const int64_t start = bytes_read_so_far();
    CHECK(read_safetensors(path).find("big") != nullptr);
    CHECK(bytes_read_so_far() - start >= (4 << 20));
  } else {
    WARN("no /proc/self/io here: the bytes read are not checked");
  }

  // Nothing wanted: no data, the metadata still.
  const SafetensorsFile none = read_safetensors(path, [](const std::string&) { return false; });
  CHECK(none.tensors.empty());
  CHECK(none.metadata.at("format") == "dtrain");
}

TEST_CASE("a selected read validates the whole header, unwanted tensors' entries included") {
  test::TempDir dir;
  const std::string path = dir.file("bad.safetensors");
  // "y" (not wanted) claims 12 bytes for 2 elements.
  test::spit(path, make_file(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("y":{"dtype":"F32","shape":[2],"data_offsets":[8,20]}})",
                             floats({1, 2, 3, 4, 5})));
  CHECK_THROWS_WITH(read_safetensors(path, [](const std::string& n) { return n == "x"; }),
                    Catch::Contains(path) && Catch::Contains("tensor 'y'") && Catch::Contains("needs 8 bytes"));
  // A file cut short in an unwanted tensor's data is refused as well.
  test::spit(path, make_file(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("y":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
                             floats({1, 2, 3})));
  CHECK_THROWS_WITH(read_safetensors(path, [](const std::string& n) { return n == "x"; }),
                    Catch::Contains("past the end of the data"));
}
