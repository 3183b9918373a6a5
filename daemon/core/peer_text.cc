#include "daemon/core/peer_text.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace wsync {
namespace {

bool IsControl(unsigned char c) { return c < 0x20 || c == 0x7f; }

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

std::string SanitizePeerText(absl::string_view text, size_t max_bytes) {
  const bool cut = text.size() > max_bytes;
  if (cut) text = text.substr(0, max_bytes);
  std::string out;
  out.reserve(text.size() + 3);
  for (char c : text) {
    if (IsControl(static_cast<unsigned char>(c))) {
      absl::StrAppendFormat(&out, "\\x%02x", static_cast<unsigned char>(c));
    } else {
      out.push_back(c);
    }
  }
  if (cut) out += "...";
  return out;
}

}  // namespace wsync
