#ifndef WSYNC_DAEMON_TRANSPORT_HTTP_HTTP_MESSAGE_READER_H_
#define WSYNC_DAEMON_TRANSPORT_HTTP_HTTP_MESSAGE_READER_H_

#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace wsync {

// Turns the bytes of one HTTP/1.1 connection, as they arrive, into whole messages (requests when
// kRequest, else responses), any number per read: pipelined messages share reads. Boost.Beast
// parses; this keeps the bytes a message has not consumed for the next one.
template <bool kRequest>
class HttpMessageReader {
 public:
  using Message = boost::beast::http::message<kRequest, boost::beast::http::string_body>;

  // Beast's own default for a message's header.
  static constexpr uint32_t kDefaultHeaderLimit = 8 << 10;

  explicit HttpMessageReader(uint64_t body_limit, uint32_t header_limit = kDefaultHeaderLimit)
      : body_limit_(body_limit), header_limit_(header_limit) {
    Reset();
  }

  // Appends every message the bytes complete to `out`; an error when they are not HTTP.
  absl::Status Feed(const char* data, size_t size, std::vector<Message>* out) {
    pending_.append(data, size);
    while (!pending_.empty()) {
      boost::beast::error_code ec;
      const bool had_header = parser_->is_header_done();
      const size_t used = parser_->put(boost::asio::buffer(pending_.data(), pending_.size()), ec);
      pending_.erase(0, used);
      if (!had_header) header_bytes_ += used;
      if (ec == boost::beast::http::error::need_more) break;
      if (ec == boost::beast::http::error::body_limit ||
          ec == boost::beast::http::error::header_limit) {
        return absl::ResourceExhaustedError(
            absl::StrCat("HTTP message over a limit: ", ec.message()));
      }
      if (ec) return absl::InvalidArgumentError(absl::StrCat("malformed HTTP: ", ec.message()));
      // Beast holds a header to its limit only when the header came in more than one read; the
      // same answer is refused however the network cut it.
      if (!had_header && parser_->is_header_done() && header_bytes_ > header_limit_) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "HTTP message over a limit: a header longer than ", header_limit_, " bytes"));
      }
      if (!parser_->is_done()) {
        // The header is whole and its Content-Length within the body limit: the body may now
        // be taken as it comes.
        if (parser_->is_header_done()) parser_->eager(true);
        if (used == 0) break;
        continue;
      }
      out->push_back(parser_->release());
      Reset();
    }
    // Beast takes a body's bytes as they come, so what stays unconsumed is a header, a chunk's
    // size line or a trailer still incomplete. It bounds the header, but not the other two (a
    // chunk extension, a trailer field): the peer could have this buffer grow without end.
    if (pending_.size() > header_limit_) {
      return absl::ResourceExhaustedError(
          absl::StrCat("HTTP message over a limit: a header, chunk line or trailer longer than ",
                       header_limit_, " bytes"));
    }
    return absl::OkStatus();
  }

  // The peer closed the connection. A message whose body runs until the close (neither
  // Content-Length nor chunked) ends here; one cut short is an error. Nothing to end is no error.
  absl::Status FeedEof(std::vector<Message>* out) {
    if (idle()) return absl::OkStatus();
    boost::beast::error_code ec;
    parser_->put_eof(ec);
    if (ec || !parser_->is_done()) {
      return absl::UnavailableError(
          absl::StrCat("the connection closed in the middle of an HTTP message",
                       ec ? absl::StrCat(" (", ec.message(), ")") : std::string()));
    }
    out->push_back(parser_->release());
    Reset();
    return absl::OkStatus();
  }

  // Bytes received that no message has consumed yet.
  size_t buffered() const { return pending_.size(); }
  // Between messages: nothing of a next one received yet.
  bool idle() const { return pending_.empty() && !parser_->got_some(); }

 private:
  using Parser = boost::beast::http::parser<kRequest, boost::beast::http::string_body>;
  // Not eager until the header is whole. Beast 1.74 checks Content-Length against the body
  // limit at the end of the header, but when it goes on to the body in the same call (eager) it
  // drops that error, and string_body reserves the announced length: an engine announcing
  // 100 GiB would have wsyncd reserve it. Stopping after the header keeps the error.
  void Reset() {
    header_bytes_ = 0;
    parser_ = std::make_unique<Parser>();
    parser_->eager(false);
    parser_->body_limit(body_limit_);
    parser_->header_limit(header_limit_);
  }
  const uint64_t body_limit_;
  const uint32_t header_limit_;
  std::string pending_;
  std::unique_ptr<Parser> parser_;
  uint64_t header_bytes_ = 0;  // the current message's header, as far as parsed
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_TRANSPORT_HTTP_HTTP_MESSAGE_READER_H_
