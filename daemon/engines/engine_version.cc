#include "daemon/engines/engine_version.h"

#include <tuple>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace wsync {
namespace {

// Reads the decimal number at the front of `*rest` and drops it; false when there is none.
bool TakeNumber(absl::string_view* rest, int* out) {
  size_t n = 0;
  while (n < rest->size() && n < 6 && absl::ascii_isdigit(static_cast<unsigned char>((*rest)[n]))) {
    ++n;
  }
  if (n == 0 || !absl::SimpleAtoi(rest->substr(0, n), out)) return false;
  rest->remove_prefix(n);
  return true;
}

// True when `rest` is empty, a local label ("+cu130"), or a post release (".post2", "post2",
// with its own local label): what SGLang ships as the release itself or a fix of it.
bool IsReleaseSuffix(absl::string_view rest) {
  if (rest.empty() || rest.front() == '+') return true;
  absl::ConsumePrefix(&rest, ".");
  if (!absl::ConsumePrefix(&rest, "post")) return false;
  int n = 0;
  TakeNumber(&rest, &n);  // "post" alone means post0
  return rest.empty() || rest.front() == '+';
}

}  // namespace

bool EngineVersion::AtLeast(int want_major, int want_minor, int want_patch) const {
  const auto have = std::make_tuple(major, minor, patch);
  const auto want = std::make_tuple(want_major, want_minor, want_patch);
  return have > want || (have == want && !prerelease);
}

absl::StatusOr<EngineVersion> ParseEngineVersion(absl::string_view text) {
  EngineVersion v;
  v.text = std::string(absl::StripAsciiWhitespace(text));
  // The text goes into messages and `wsyncctl engines`: only the characters a version is made
  // of, and not much of them, are read.
  if (v.text.size() > kMaxEngineVersionChars) {
    return absl::InvalidArgumentError("a version longer than any engine's");
  }
  for (char c : v.text) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '+' && c != '-' &&
        c != '_') {
      return absl::InvalidArgumentError("a character no version has");
    }
  }
  absl::string_view rest = v.text;
  absl::ConsumePrefix(&rest, "v");
  if (!TakeNumber(&rest, &v.major) || !absl::ConsumePrefix(&rest, ".") ||
      !TakeNumber(&rest, &v.minor)) {
    return absl::InvalidArgumentError("not a version of the form MAJOR.MINOR[.PATCH]");
  }
  if (absl::ConsumePrefix(&rest, ".") && !TakeNumber(&rest, &v.patch)) {
    // "0.5.dev3" or "0.5.post1": no patch number. A post release of 0.5.0 is 0.5.0; anything
    // else counts as before it.
    v.prerelease = !IsReleaseSuffix(absl::StrCat(".", rest));
    return v;
  }
  v.prerelease = !IsReleaseSuffix(rest);
  return v;
}

}  // namespace wsync
