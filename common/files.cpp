#include "common/files.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <system_error>
#include <unistd.h>

#include "common/error.h"
#include "common/printable.h"

namespace fs = std::filesystem;

#ifndef QEVAL_SOURCE_DIR
#define QEVAL_SOURCE_DIR "."
#endif

namespace qeval {

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot open {}: {}", path.string(), std::strerror(errno));
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) fail("error while reading {}", path.string());
  return std::move(buffer).str();
}

std::uint64_t file_size(const fs::path& path) {
  std::error_code ec;
  auto size = fs::file_size(path, ec);
  if (ec) fail("cannot stat {}: {}", path.string(), ec.message());
  return size;
}

void write_file_atomic(const fs::path& path, const std::string& content) {
  fs::path dir = path.has_parent_path() ? path.parent_path() : fs::path(".");
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) fail("cannot write {}: folder {} does not exist", path.string(), dir.string());
  if (fs::is_directory(path, ec)) fail("cannot write {}: it is a folder", path.string());
  std::random_device rd;
  // A name near the 255-byte limit gets a short temporary name: the longer one would not fit.
  const std::string stem = path.filename().string().size() > 200 ? std::string("qeval") : path.filename().string();
  fs::path tmp = dir / fmt::format(".{}.tmp.{}.{:x}", stem, ::getpid(), rd());
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) fail("cannot write {}: {}", tmp.string(), std::strerror(errno));
  bool ok = std::fwrite(content.data(), 1, content.size(), f) == content.size();
  ok = (std::fflush(f) == 0) && ok;
  ok = (::fsync(::fileno(f)) == 0) && ok;
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) {
    fs::remove(tmp, ec);
    fail("cannot write {}: {}", path.string(), std::strerror(errno));
  }
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    fail("cannot move {} into place as {}: {}", tmp.string(), path.string(), ec.message());
  }
}

namespace {

bool writable(const fs::path& p) { return ::access(p.c_str(), W_OK) == 0; }

// A name the file system cannot hold is refused up front, naming the option, not by a raw
// "File name too long" after the work is done.
void check_name_lengths(const fs::path& path, const std::string& option) {
  QEVAL_CHECK(path.native().size() < 4096, "{} {}: the path is {} bytes, longer than the 4095 a path may have", option,
              printable(path.native(), 80), path.native().size());
  for (const fs::path& part : path)
    QEVAL_CHECK(part.native().size() <= 255, "{} {}: the name {} is {} bytes, longer than the 255 a file name may have",
                option, printable(path.native(), 80), in_quotes(part.native(), 40), part.native().size());
}

}  // namespace

void check_output_file(const fs::path& path, const std::string& option) {
  QEVAL_CHECK(!path.empty(), "{}: empty file name", option);
  check_name_lengths(path, option);
  std::error_code ec;
  QEVAL_CHECK(!fs::is_directory(path, ec), "{} {}: is a folder; give a file name (e.g. {}/record.json)", option,
              path.string(), path.string());
  QEVAL_CHECK(path.has_filename(), "{} {}: names a folder; give a file name", option, path.string());
  const fs::path dir = path.has_parent_path() ? path.parent_path() : fs::path(".");
  QEVAL_CHECK(fs::exists(dir, ec), "{} {}: folder {} does not exist", option, path.string(), dir.string());
  QEVAL_CHECK(fs::is_directory(dir, ec), "{} {}: {} is not a folder", option, path.string(), dir.string());
  QEVAL_CHECK(writable(dir), "{} {}: folder {} is not writable", option, path.string(), dir.string());
  if (fs::exists(path, ec))
    QEVAL_CHECK(fs::is_regular_file(path, ec), "{} {}: exists and is not a regular file", option, path.string());
}

void check_output_folder(const fs::path& path, const std::string& option) {
  QEVAL_CHECK(!path.empty(), "{}: empty folder name", option);
  check_name_lengths(path, option);
  std::error_code ec;
  if (fs::exists(path, ec)) {
    QEVAL_CHECK(fs::is_directory(path, ec), "{} {}: exists and is not a folder", option, path.string());
    QEVAL_CHECK(writable(path), "{} {}: folder is not writable", option, path.string());
    return;
  }
  fs::path ancestor = fs::absolute(path, ec).parent_path();
  while (!ancestor.empty() && !fs::exists(ancestor, ec) && ancestor != ancestor.root_path()) ancestor = ancestor.parent_path();
  QEVAL_CHECK(fs::is_directory(ancestor, ec), "{} {}: {} is not a folder", option, path.string(), ancestor.string());
  QEVAL_CHECK(writable(ancestor), "{} {}: cannot create it, folder {} is not writable", option, path.string(),
              ancestor.string());
}

fs::path resolve_data_dir(const std::optional<std::string>& explicit_dir) {
  std::vector<std::string> tried;
  auto usable = [&](const fs::path& p, const std::string& how) {
    std::error_code ec;
    if (fs::is_directory(p, ec)) return true;
    tried.push_back(fmt::format("{} ({})", p.string(), how));
    return false;
  };
  if (explicit_dir) {
    if (usable(*explicit_dir, "--data-dir")) return fs::path(*explicit_dir);
    fail("data folder not found: {} given by --data-dir is not a folder", *explicit_dir);
  }
  if (const char* env = std::getenv("QEVAL_DATA_DIR"); env && *env) {
    if (usable(env, "QEVAL_DATA_DIR")) return fs::path(env);
    fail("data folder not found: QEVAL_DATA_DIR={} is not a folder", env);
  }
  fs::path fallback = fs::path(QEVAL_SOURCE_DIR) / ".." / "shared" / "data";
  if (usable(fallback, "default: ../shared/data beside the repository")) return fs::weakly_canonical(fallback);
  fail("data folder not found: tried {}; pass --data-dir or set QEVAL_DATA_DIR", tried.front());
}

fs::path resolve_input_path(const std::string& path, const std::optional<std::string>& data_dir) {
  fs::path p(path);
  std::error_code ec;
  if (fs::exists(p, ec) || p.is_absolute()) return p;
  fs::path dir;
  try {
    dir = resolve_data_dir(data_dir);
  } catch (const Error&) {
    return p;  // the caller's open will report the missing file by its given name
  }
  fs::path in_data = dir / p;
  return fs::exists(in_data, ec) ? in_data : p;
}

}  // namespace qeval
