// kiln/io/file.hpp: what kiln's file readers and writers share: the error for malformed files,
// positioned reads that check every byte arrived, and atomic replacement of a file (write a
// temporary file in the same directory, fsync it, rename it over the destination), as careful
// tools do it: the replaced file's permissions kept, a symbolic link written through to its
// target, temporaries that a killed writer left for the same destination removed.
//
// POSIX only (open/pread/fsync/rename): rename(2) within one directory is what makes the
// replacement atomic, and fsync is what makes it survive a crash.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "../core/config.hpp"

namespace kiln::io {

/// Thrown when a file's contents are wrong: truncated, corrupted, not the format, or not what
/// the caller asked for (a missing tensor, a wrong shape). The message names the file and what
/// is wrong: "kiln: model.safetensors: tensor 'w1' has 12 bytes, shape [2, 3] of F32 needs 24".
/// Failures of the operating system (a file that cannot be opened, a full disk) are
/// std::filesystem::filesystem_error instead; both are std::runtime_errors.
class format_error : public std::runtime_error {
 public:
  KILN_RUNTIME format_error(const std::string& file, const std::string& what);
  /// The file (or the name given to an in-memory buffer).
  const std::string& file() const noexcept { return file_; }
  /// What is wrong, without the file name.
  const std::string& reason() const noexcept { return reason_; }

 private:
  std::string file_, reason_;
};

namespace detail {

/// `name` in single quotes for an error message, with control characters and quotes escaped
/// (names come from files and may contain anything).
KILN_RUNTIME std::string quote_name(std::string_view name);

/// Throws the filesystem_error of a failed system call (err: its errno).
[[noreturn]] KILN_RUNTIME void throw_errno(const std::string& what, const std::filesystem::path& p, int err);

/// A file opened for reading, with its size; closes itself.
class input_file {
 public:
  KILN_RUNTIME explicit input_file(const std::filesystem::path& p);
  input_file(const input_file&) = delete;
  input_file& operator=(const input_file&) = delete;
  ~input_file() { ::close(fd_); }

  std::uint64_t size() const { return size_; }
  const std::string& name() const { return name_; }

  /// Reads exactly n bytes at `offset`; a short read means the file shrank after it was
  /// checked, which is a format_error like any other truncation.
  KILN_RUNTIME void read(std::uint64_t offset, void* dst, std::size_t n) const;

  std::vector<std::byte> read_all() const {
    std::vector<std::byte> v(static_cast<std::size_t>(size_));
    read(0, v.data(), v.size());
    return v;
  }

 private:
  std::filesystem::path path_;
  std::string name_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
};

/// Writes a new file under a temporary name next to `dest`; commit() makes it durable and
/// renames it over `dest` in one step. If commit() is not reached (an exception), the
/// destructor removes the temporary file, so `dest` is either the old file or the complete new
/// one, never a partial write. A `dest` that is a symbolic link is written through: its target
/// is replaced, the link stays. The new file gets the permission bits of the file it replaces.
/// Temporaries of the same destination whose writing process no longer exists are removed.
class atomic_output_file {
 public:
  KILN_RUNTIME explicit atomic_output_file(const std::filesystem::path& dest);
  atomic_output_file(const atomic_output_file&) = delete;
  atomic_output_file& operator=(const atomic_output_file&) = delete;
  ~atomic_output_file() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(tmp_.c_str());
  }

  KILN_RUNTIME void write(const void* src, std::size_t n);

  /// fsync, close, rename over the destination, then fsync the directory so that the rename
  /// itself is durable (best effort: once renamed, the new file is in place either way).
  KILN_RUNTIME void commit();

 private:
  /// Removes dir's files named `stem` + "<pid>-<n>" whose process `pid` is gone. The process
  /// is looked up on this machine: on a directory shared by several machines (NFS), a writer on
  /// another one may lose its temporary if a local process has its pid, or have it left behind.
  KILN_RUNTIME static void remove_stale_temporaries(const std::filesystem::path& dir, const std::string& stem);

  std::filesystem::path dest_, tmp_;
  int fd_ = -1;
  bool committed_ = false;
};

}  // namespace detail

#if KILN_DEFINE_RUNTIME
KILN_RUNTIME format_error::format_error(const std::string& file, const std::string& what)
    : std::runtime_error("kiln: " + file + ": " + what), file_(file), reason_(what) {}

namespace detail {

KILN_RUNTIME std::string quote_name(std::string_view name) {
  std::string out = "'";
  const char* hex = "0123456789abcdef";
  for (const char c : name) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f || c == '\'' || c == '\\') {
      out += "\\x";
      out += hex[u >> 4];
      out += hex[u & 15];
    } else {
      out += c;
    }
  }
  return out + "'";
}

[[noreturn]] KILN_RUNTIME void throw_errno(const std::string& what, const std::filesystem::path& p, int err) {
  throw std::filesystem::filesystem_error("kiln: " + what, p, std::error_code(err, std::generic_category()));
}

KILN_RUNTIME input_file::input_file(const std::filesystem::path& p) : path_(p), name_(p.string()) {
  // O_NONBLOCK: opening a FIFO (or a device) must not wait for a writer; the file is refused
  // below unless it is regular, for which the flag changes nothing
  do fd_ = ::open(p.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  while (fd_ < 0 && errno == EINTR);
  if (fd_ < 0) throw_errno("cannot open the file for reading", p, errno);
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    const int err = errno;
    ::close(fd_);
    throw_errno("cannot stat the file", p, err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd_);
    throw_errno("not a regular file", p, S_ISDIR(st.st_mode) ? EISDIR : EINVAL);
  }
  size_ = static_cast<std::uint64_t>(st.st_size);
}

KILN_RUNTIME void input_file::read(std::uint64_t offset, void* dst, std::size_t n) const {
  auto* out = static_cast<unsigned char*>(dst);
  while (n > 0) {
    const std::size_t chunk = n < (std::size_t{1} << 30) ? n : (std::size_t{1} << 30);
    const ssize_t got = ::pread(fd_, out, chunk, static_cast<off_t>(offset));
    if (got < 0) {
      if (errno == EINTR) continue;
      throw_errno("read failed", path_, errno);
    }
    if (got == 0)
      throw format_error(name_, "the file ended at byte " + std::to_string(offset) +
                                    " while reading (was it truncated while being read?)");
    out += got;
    offset += static_cast<std::uint64_t>(got);
    n -= static_cast<std::size_t>(got);
  }
}

KILN_RUNTIME atomic_output_file::atomic_output_file(const std::filesystem::path& dest) : dest_(dest) {
  if (dest.filename().empty() || dest.filename() == "." || dest.filename() == "..")
    throw std::invalid_argument("kiln: cannot write to " + dest.string() + ": it names no file");
  // through symbolic links to the file they name (as `cp` and editors write), at most 40 deep
  for (int depth = 0; std::filesystem::is_symlink(std::filesystem::symlink_status(dest_)); ++depth) {
    if (depth == 40) throw_errno("too many levels of symbolic links", dest, ELOOP);
    const std::filesystem::path target = std::filesystem::read_symlink(dest_);
    dest_ = target.is_absolute() ? target : dest_.parent_path() / target;
  }
  const std::filesystem::path dir = dest_.parent_path().empty() ? std::filesystem::path(".") : dest_.parent_path();
  const std::string stem = "." + dest_.filename().string() + ".tmp-";
  remove_stale_temporaries(dir, stem);
  static std::atomic<unsigned> counter{0};
  tmp_ = dir / (stem + std::to_string(::getpid()) + "-" + std::to_string(counter.fetch_add(1)));
  do fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  while (fd_ < 0 && errno == EINTR);
  if (fd_ < 0) throw_errno("cannot create a temporary file to write " + dest.string(), tmp_, errno);
  struct stat st {};
  if (::stat(dest_.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::fchmod(fd_, st.st_mode & 07777) != 0) {
    const int err = errno;
    ::close(std::exchange(fd_, -1));
    ::unlink(tmp_.c_str());
    throw_errno("cannot give the new file the permissions of", dest_, err);
  }
}

KILN_RUNTIME void atomic_output_file::remove_stale_temporaries(const std::filesystem::path& dir,
                                                               const std::string& stem) {
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.compare(0, stem.size(), stem) != 0) continue;
    // ".<file>.tmp-<pid>-<n>": the writer's process id, then its counter
    const std::size_t dash = name.find('-', stem.size());
    if (dash == std::string::npos || dash == stem.size() || dash + 1 == name.size()) continue;
    bool digits = true;
    for (std::size_t i = stem.size(); i < name.size(); ++i)
      digits = digits && (i == dash || (name[i] >= '0' && name[i] <= '9'));
    if (!digits || dash - stem.size() > 9) continue;
    const auto pid = static_cast<pid_t>(std::stol(name.substr(stem.size(), dash - stem.size())));
    if (pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH) (void)::unlink(it->path().c_str());  // best effort
  }
}

KILN_RUNTIME void atomic_output_file::write(const void* src, std::size_t n) {
  const auto* in = static_cast<const unsigned char*>(src);
  while (n > 0) {
    const std::size_t chunk = n < (std::size_t{1} << 30) ? n : (std::size_t{1} << 30);
    const ssize_t put = ::write(fd_, in, chunk);
    if (put < 0) {
      if (errno == EINTR) continue;
      throw_errno("write failed", tmp_, errno);
    }
    in += put;
    n -= static_cast<std::size_t>(put);
  }
}

KILN_RUNTIME void atomic_output_file::commit() {
  if (::fsync(fd_) != 0) throw_errno("fsync failed", tmp_, errno);
  const int fd = std::exchange(fd_, -1);
  if (::close(fd) != 0) throw_errno("close failed", tmp_, errno);
  if (::rename(tmp_.c_str(), dest_.c_str()) != 0) throw_errno("cannot rename the temporary file over", dest_, errno);
  committed_ = true;
  const std::filesystem::path dir = dest_.parent_path().empty() ? std::filesystem::path(".") : dest_.parent_path();
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace detail
#endif  // KILN_DEFINE_RUNTIME

}  // namespace kiln::io
