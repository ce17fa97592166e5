// The IDX reader (MNIST, Fashion-MNIST): an images file and a labels file, each
// plain or gzip-compressed.
//
// An IDX file starts with a big-endian magic number 0x0000TTDD (TT = element type,
// 0x08 for unsigned bytes; DD = number of dimensions), then DD big-endian 32-bit
// sizes, then the elements. Images are 0x00000803 (N, H, W) and become samples of
// shape (H, W, 1); labels are 0x00000801 (N). Every size is checked against what
// the file really holds, in both directions (truncated data and trailing bytes),
// and the two files must agree on N. The probe does the same checks without
// keeping the data.
// Its registry entry (dataset.h's DataFormat: keys, reader, loaders) closes the file.
#include <cstdio>

#include "core/error.h"
#include "core/strings.h"
#include "data/byte_file.h"
#include "data/readers.h"

namespace dtrain::data::detail {
namespace {

constexpr uint32_t kImagesMagic = 0x00000803;
constexpr uint32_t kLabelsMagic = 0x00000801;
constexpr const char* kMissingHint =
    "run scripts/install-deps.sh to install Fashion-MNIST, or fix the path";

uint32_t read_be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

// What one IDX file should be: images (3 dims) or labels (1 dim).
struct IdxKind {
  uint32_t magic;
  int dims;
  const char* noun;       // "images" / "labels"
  uint32_t other_magic;   // the magic of the other kind, to spot swapped files
  const char* other_noun;
};
constexpr IdxKind kImages{kImagesMagic, 3, "images", kLabelsMagic, "labels"};
constexpr IdxKind kLabels{kLabelsMagic, 1, "labels", kImagesMagic, "images"};

// Reads and checks the magic number and sizes; returns the sizes.
std::vector<uint64_t> read_header(ByteFile& file, const IdxKind& kind) {
  const size_t header_bytes = 4 + 4 * static_cast<size_t>(kind.dims);
  uint8_t header[16];
  const size_t got = file.read(header, header_bytes);
  const std::string what = str("IDX unsigned-byte ", kind.noun, " with ", kind.dims,
                               kind.dims == 1 ? " dimension" : " dimensions");
  if (got < 4)
    file.fail(str("is too short to be an IDX file: it has ", got, " bytes (expected ", what, ")"));
  const uint32_t magic = read_be32(header);
  if (magic == kind.other_magic)
    file.fail(str("has the magic number ", hex32(magic), " of an IDX ", kind.other_noun,
                  " file, not ", hex32(kind.magic), " (", kind.noun,
                  "): are 'images' and 'labels' swapped in the job config?"));
  if (magic != kind.magic)
    file.fail(str("has the magic number ", hex32(magic), ", expected ", hex32(kind.magic), " (",
                  what, "): the file may not be an IDX file, or may be corrupt"));
  if (got < header_bytes)
    file.fail(str("is truncated: its IDX header needs ", header_bytes, " bytes but the file has only ",
                  got));
  std::vector<uint64_t> sizes;
  for (int d = 0; d < kind.dims; ++d) sizes.push_back(read_be32(header + 4 + 4 * d));
  if (sizes[0] == 0) file.fail(str("holds no ", kind.noun, " (its header announces 0)"));
  if (kind.dims == 3 && (sizes[1] == 0 || sizes[2] == 0))
    file.fail(str("announces images of ", sizes[1], "x", sizes[2],
                  " pixels: the file is corrupt"));
  return sizes;
}

// Reads the elements after the header (into *out, or only counting them) and
// checks that the file holds exactly `want` bytes of them.
void read_elements(ByteFile& file, uint64_t want, const std::string& announced,
                   std::vector<uint8_t>* out) {
  const ByteFile::Payload payload = file.read_payload(want, out);
  if (payload.got < want)
    file.fail(str("is truncated: its header announces ", announced, " (", want,
                  " bytes) but only ", payload.got,
                  " bytes follow; download or copy the file again"));
  if (payload.trailing > 0)
    file.fail(str("has ", payload.trailing, payload.trailing == 1 ? " byte" : " bytes",
                  " after the ", want,
                  " that its header announces (", announced,
                  "): the file is corrupt, or is not the file you meant"));
}

struct IdxData {
  uint64_t count = 0;
  uint64_t height = 0;
  uint64_t width = 0;
  std::vector<uint8_t> pixels;
  std::vector<uint8_t> labels;
};

void check_fields(const DataSourceSpec& spec) {
  if (spec.images.empty())
    throw ConfigError(str(spec.path, ".images: missing: an idx source needs the images file "
                                     "(e.g. train-images-idx3-ubyte.gz)"));
  if (spec.labels.empty())
    throw ConfigError(str(spec.path, ".labels: missing: an idx source needs the labels file "
                                     "(e.g. train-labels-idx1-ubyte.gz)"));
}

// Both files, every check; the data is kept only when `keep`.
IdxData read_idx(const DataSourceSpec& spec, bool keep) {
  check_fields(spec);
  ByteFile images(spec.images, spec.path + ".images", kMissingHint);
  const std::vector<uint64_t> image_sizes = read_header(images, kImages);
  ByteFile labels(spec.labels, spec.path + ".labels", kMissingHint);
  const std::vector<uint64_t> label_sizes = read_header(labels, kLabels);

  IdxData data;
  data.count = image_sizes[0];
  data.height = image_sizes[1];
  data.width = image_sizes[2];
  if (label_sizes[0] != data.count)
    throw IoError(str(spec.path, ": ", data.count, " images but ", label_sizes[0], " labels ('",
                      spec.images, "' vs '", spec.labels,
                      "'): use the images and labels files of the same set"));

  // Each size is below 2^32, so H*W fits; N*H*W may not, for a corrupt header.
  const uint64_t image_bytes = data.height * data.width;
  if (image_bytes > UINT64_MAX / data.count)
    images.fail(str("announces ", data.count, " images of ", data.height, "x", data.width,
                    ", more bytes than any file holds: the header is corrupt"));
  read_elements(images, data.count * image_bytes,
                str(data.count, " images of ", data.height, "x", data.width),
                keep ? &data.pixels : nullptr);
  read_elements(labels, data.count, str(data.count, " labels"), keep ? &data.labels : nullptr);
  return data;
}

}  // namespace

Dataset load_idx(const DataSourceSpec& spec) {
  IdxData data = read_idx(spec, /*keep=*/true);
  Dataset ds;
  ds.name = spec.path;
  ds.sample_shape = {static_cast<int64_t>(data.height), static_cast<int64_t>(data.width), 1};
  ds.count = static_cast<int64_t>(data.count);
  ds.pixels = std::move(data.pixels);
  ds.rescale = static_cast<float>(spec.rescale);
  ds.labels.assign(data.labels.begin(), data.labels.end());
  return ds;
}

DatasetInfo probe_idx(const DataSourceSpec& spec) {
  const IdxData data = read_idx(spec, /*keep=*/false);
  DatasetInfo info;
  info.sample_shape = {static_cast<int64_t>(data.height), static_cast<int64_t>(data.width), 1};
  info.count = static_cast<int64_t>(data.count);
  return info;
}

}  // namespace dtrain::data::detail

namespace dtrain::data {

// The registry entry (dataset.h): keys, reader, loaders.
const DataFormat& idx_format() {
  static const DataFormat format{
      "idx",
      "IDX files, gzipped or plain (MNIST, Fashion-MNIST)",
      {{"images", "the images file (required)"}, {"labels", "the labels file (required)"}, {"rescale", "1/255, a pixel's multiplier"}},
      [](config::Section& r, DataSourceSpec& spec) {
        spec.images = r.require_string("images");
        spec.labels = r.require_string("labels");
        spec.rescale = r.get_double("rescale", spec.rescale, config::kPositive);
      },
      detail::load_idx, detail::probe_idx, true};
  return format;
}

}  // namespace dtrain::data
