#include "daemon/core/peer_text.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "daemon/core/engine_group_name.h"

namespace wsync {
namespace {

bool IsControl(unsigned char c) { return c < 0x20 || c == 0x7f; }

// The length of the well-formed UTF-8 character at the start of `s` (RFC 3629: no overlong forms,
// no surrogates, nothing past U+10FFFF), or 0 when it does not start with one.
size_t Utf8CharLength(absl::string_view s) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char c = byte(0);
  if (c < 0x80) return 1;
  size_t n;
  unsigned char lo = 0x80, hi = 0xbf;  // the second byte's range
  if (c >= 0xc2 && c <= 0xdf) {
    n = 2;
  } else if (c >= 0xe0 && c <= 0xef) {
    n = 3;
    if (c == 0xe0) lo = 0xa0;
    if (c == 0xed) hi = 0x9f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4;
    if (c == 0xf0) lo = 0x90;
    if (c == 0xf4) hi = 0x8f;
  } else {
    return 0;
  }
  if (s.size() < n || byte(1) < lo || byte(1) > hi) return 0;
  for (size_t i = 2; i < n; ++i) {
    if (byte(i) < 0x80 || byte(i) > 0xbf) return 0;
  }
  return n;
}

}  // namespace

absl::Status CheckPeerLabel(absl::string_view what, absl::string_view text, size_t max_bytes) {
  if (text.empty()) return absl::InvalidArgumentError(absl::StrCat(what, " is empty"));
  if (text.size() > max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " is ", text.size(), " bytes; at most ", max_bytes, " are allowed"));
  }
  for (size_t i = 0; i < text.size(); ++i) {
    if (IsControl(static_cast<unsigned char>(text[i]))) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s has a control character (0x%02x) at byte %d", what,
                          static_cast<unsigned char>(text[i]), i));
    }
  }
  return absl::OkStatus();
}

std::string SanitizePeerText(absl::string_view raw, size_t max_bytes) {
  // A peer may quote an engine group's name (SGLang lists the groups it holds): its token goes no
  // further. Hidden before the cut, so that a cut never leaves part of a token.
  const size_t window = max_bytes + std::min(kEngineGroupTokenChars + 1, SIZE_MAX - max_bytes);
  const std::string redacted = RedactEngineGroupTokens(raw.substr(0, window));
  absl::string_view text = redacted;
  const bool cut = raw.size() > window || text.size() > max_bytes;
  if (cut) text = text.substr(0, max_bytes);
  std::string out;
  out.reserve(text.size() + 3);
  // The result goes into protobuf strings, which must be UTF-8: a byte that does not begin a
  // well-formed character (including one the cut split) is escaped like a control character.
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    const size_t n = Utf8CharLength(text.substr(i));
    if (n == 0 || IsControl(c)) {
      absl::StrAppendFormat(&out, "\\x%02x", c);
      ++i;
    } else {
      out.append(text.data() + i, n);
      i += n;
    }
  }
  if (cut) out += "...";
  return out;
}

}  // namespace wsync
