#ifndef WSYNC_DAEMON_CORE_PEER_TEXT_H_
#define WSYNC_DAEMON_CORE_PEER_TEXT_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace wsync {

// Text a trainer names things with (versions, client names, group and session names) is kept,
// logged and shown to operators, so it is bounded and printable: a 60 MiB version kept in the
// update history, or a newline that forges a log line, is refused before anything is recorded.
inline constexpr size_t kMaxVersionBytes = 256;
inline constexpr size_t kMaxNameBytes = 128;
// A tensor's name (a module path such as "model.layers.0.mlp.down_proj.weight").
inline constexpr size_t kMaxTensorNameBytes = 1024;
// How much of a tensor's name an error quotes.
inline constexpr size_t kQuotedNameBytes = 200;
// Free text from a trainer (an abort reason) is cut to this and its control characters escaped.
inline constexpr size_t kMaxReasonBytes = 1024;
// An update's failure, which may name every engine of a group with its answer.
inline constexpr size_t kMaxFailureBytes = 4096;

// INVALID_ARGUMENT naming `what` unless `text` is 1..max bytes of printable ASCII or UTF-8
// (no control characters).
absl::Status CheckPeerLabel(absl::string_view what, absl::string_view text, size_t max_bytes);
// `text` cut to `max_bytes` (marked "...") with control characters, and bytes that do not form
// well-formed UTF-8 (so also a character the cut split), written as \xNN: always valid UTF-8.
// Engine group tokens in it are hidden (RedactEngineGroupTokens).
std::string SanitizePeerText(absl::string_view text, size_t max_bytes = kMaxReasonBytes);

}  // namespace wsync

#endif  // WSYNC_DAEMON_CORE_PEER_TEXT_H_
