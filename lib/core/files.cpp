// Implementation of files.h.
#include "core/files.h"

#include <filesystem>
#include <fstream>
#include <system_error>

#include "core/error.h"
#include "core/sha256.h"
#include "core/strings.h"

namespace dtrain {

namespace fs = std::filesystem;

void prepare_output_file(const std::string& path, const std::string& what) {
  std::error_code ec;
  if (fs::is_directory(path, ec))
    throw IoError(str(what, ": '", path, "' is a directory; give the path of a file to write"));
  const fs::path parent = fs::path(path).parent_path();
  if (parent.empty()) return;
  fs::create_directories(parent, ec);
  if (ec || !fs::is_directory(parent))
    throw IoError(str(what, ": cannot create the directory '", parent.string(), "' for '", path, "'",
                      ec ? ": " + ec.message() : std::string(": a file of that name is in the way")));
}

void write_output_file(const std::string& path, const std::string& what,
                       const std::function<void(const std::string&)>& write) {
  prepare_output_file(path, what);
  std::error_code ec;
  fs::path target = path;
  if (fs::is_symlink(target, ec)) {
    // The file the link names (the link stays a link); a dangling link's target is made.
    fs::path to = fs::read_symlink(target, ec);
    target = to.is_absolute() ? to : target.parent_path() / to;
  }
  const fs::file_status status = fs::status(target, ec);
  if (fs::exists(status) && !fs::is_regular_file(status)) {
    if (fs::is_directory(status))
      throw IoError(str(what, ": '", path, "' leads to a directory; give the path of a file to write"));
    write(target.string());  // a device or a FIFO: no temporary file can stand in for it
    return;
  }
  const std::string tmp = target.string() + ".tmp-" + random_hex(4);
  try {
    write(tmp);
    fs::rename(tmp, target, ec);
    if (ec) throw IoError(str(what, ": cannot rename '", tmp, "' to '", target.string(), "': ", ec.message()));
  } catch (...) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    throw;
  }
}

void write_text_file(const std::string& path, const std::string& what, const std::string& text) {
  write_output_file(path, what, [&](const std::string& to) {
    std::ofstream out(to);
    out << text;
    if (!out) throw IoError(str(what, ": cannot write '", to, "'"));
  });
}

}  // namespace dtrain
