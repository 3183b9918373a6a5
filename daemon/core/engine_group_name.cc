#include "daemon/core/engine_group_name.h"

#include <sys/random.h>

#include <cerrno>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/log.h"

namespace wsync {
namespace {

constexpr size_t kTokenBytes = 16;
constexpr size_t kTokenChars = kEngineGroupTokenChars;
static_assert(kTokenChars == 2 * kTokenBytes);

bool LowerHex(char c) { return absl::ascii_isdigit(c) || (c >= 'a' && c <= 'f'); }

// Whether a token starts at `at`: 32 lowercase hex digits, then no letter or digit.
bool TokenAt(absl::string_view text, size_t at) {
  if (at + kTokenChars > text.size()) return false;
  for (size_t i = at; i < at + kTokenChars; ++i) {
    if (!LowerHex(text[i])) return false;
  }
  return at + kTokenChars == text.size() || !absl::ascii_isalnum(text[at + kTokenChars]);
}

std::string RandomToken() {
  char bytes[kTokenBytes];
  size_t got = 0;
  while (got < sizeof(bytes)) {
    const ssize_t n = ::getrandom(bytes + got, sizeof(bytes) - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      // Without the kernel's randomness the token would be guessable, and with it any local
      // process could take an engine rank's place: better not to run.
      WSYNC_LOG(Error, "getrandom failed (errno ", errno, "): cannot name a group safely");
      std::abort();
    }
    got += static_cast<size_t>(n);
  }
  return absl::BytesToHexString(absl::string_view(bytes, sizeof(bytes)));
}

}  // namespace

std::string EngineGroupName(const std::string& name, const std::string& incarnation) {
  if (incarnation.empty()) return name;
  return absl::StrCat(name, ".", incarnation, ".", RandomToken());
}

absl::string_view EngineGroupToken(absl::string_view engine_group) {
  const size_t dot = engine_group.rfind('.');
  if (dot == absl::string_view::npos || !TokenAt(engine_group, dot + 1)) return "";
  return engine_group.substr(dot + 1);
}

std::string RedactEngineGroupTokens(absl::string_view text) {
  std::string out;
  size_t copied = 0;
  for (size_t dot = text.find('.'); dot != absl::string_view::npos; dot = text.find('.', dot + 1)) {
    if (!TokenAt(text, dot + 1)) continue;
    absl::StrAppend(&out, text.substr(copied, dot + 1 - copied), kHiddenToken);
    copied = dot + 1 + kTokenChars;
    dot = copied - 1;
  }
  absl::StrAppend(&out, text.substr(copied));
  return out;
}

}  // namespace wsync
