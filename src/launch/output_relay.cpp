#include "output_relay.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

namespace fsdpp::launch {
namespace {

// A worker that writes megabytes without a newline must not grow our memory without bound: past
// this size the pending bytes go out as a line of their own.
constexpr size_t kMaxLineBytes = 64 * 1024;
constexpr size_t kReadBytes = 64 * 1024;

}  // namespace

OutputRelay::OutputRelay(UniqueFd source, int sink, std::string prefix, int log)
    : source_(std::move(source)), sink_(sink), prefix_(std::move(prefix)), log_(log) {
  const int flags = ::fcntl(source_.get(), F_GETFL);
  ::fcntl(source_.get(), F_SETFL, flags | O_NONBLOCK);
}

void OutputRelay::read_some() {
  if (!source_) return;
  char buffer[kReadBytes];
  ssize_t n;
  do {
    n = ::read(source_.get(), buffer, sizeof buffer);
  } while (n < 0 && errno == EINTR);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
  if (n <= 0) {  // EOF, or an error that ends the stream just the same
    close();
    return;
  }
  pending_.append(buffer, static_cast<size_t>(n));
  size_t start = 0;
  for (size_t nl; (nl = pending_.find('\n', start)) != std::string::npos; start = nl + 1) {
    emit(std::string_view(pending_).substr(start, nl - start));
  }
  pending_.erase(0, start);
  if (pending_.size() >= kMaxLineBytes) {
    emit(pending_);
    pending_.clear();
  }
}

void OutputRelay::close() {
  if (!pending_.empty()) emit(pending_);
  pending_.clear();
  source_.reset();
}

void OutputRelay::emit(std::string_view line) {
  // One write per line, so that lines of different ranks never interleave mid-line.
  std::string out;
  out.reserve(prefix_.size() + line.size() + 1);
  out.append(prefix_).append(line).push_back('\n');
  write_all(sink_, out.data(), out.size());
  if (log_ >= 0) write_all(log_, out.data() + prefix_.size(), out.size() - prefix_.size());
}

}  // namespace fsdpp::launch
