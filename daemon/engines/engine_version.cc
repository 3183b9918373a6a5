#include "daemon/engines/engine_version.h"

#include <initializer_list>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"

namespace wsync {
namespace {

// Reads the decimal number of at most `max_digits` at the front of `*rest` and drops it; false
// when there is none. A release part has at most 6 digits (no engine's has more); a dev or post
// number may be a date (dev20251125).
bool TakeNumber(absl::string_view* rest, int* out, size_t max_digits = 6) {
  size_t n = 0;
  while (n < rest->size() && n < max_digits &&
         absl::ascii_isdigit(static_cast<unsigned char>((*rest)[n]))) {
    ++n;
  }
  if (n == 0 || !absl::SimpleAtoi(rest->substr(0, n), out)) return false;
  rest->remove_prefix(n);
  return true;
}

// Drops one PEP 440 separator ('-', '_' or '.') at the front of `*rest`, if there is one.
void SkipSeparator(absl::string_view* rest) {
  if (!rest->empty() && (rest->front() == '-' || rest->front() == '_' || rest->front() == '.')) {
    rest->remove_prefix(1);
  }
}

// Reads `[sep]word[sep][N]` for the first of `words` that `*rest` starts with (case-insensitive,
// not followed by a letter): its index and number (0 when absent), dropping what was read; -1
// (nothing dropped) otherwise.
int TakeWord(absl::string_view* rest, std::initializer_list<absl::string_view> words, int* n) {
  absl::string_view r = *rest;
  SkipSeparator(&r);
  int index = 0;
  for (absl::string_view word : words) {
    // A word ends where letters do: "r" is not the start of "release".
    if (r.size() >= word.size() && absl::EqualsIgnoreCase(r.substr(0, word.size()), word) &&
        (r.size() == word.size() ||
         !absl::ascii_isalpha(static_cast<unsigned char>(r[word.size()])))) {
      r.remove_prefix(word.size());
      absl::string_view after_word = r;
      SkipSeparator(&r);
      if (!TakeNumber(&r, n, /*max_digits=*/9)) {
        r = after_word;  // "rc" alone means rc0
        *n = 0;
      }
      *rest = r;
      return index;
    }
    ++index;
  }
  return -1;
}

// Reads what follows MAJOR.MINOR[.PATCH] as PEP 440 orders it: pre, post, dev, +local; what is
// left unread is a vendor suffix.
void ReadSuffix(absl::string_view rest, EngineVersion& v) {
  if (size_t plus = rest.find('+'); plus != absl::string_view::npos) {
    v.local = std::string(rest.substr(plus + 1));
    rest = rest.substr(0, plus);
  }
  int n = 0;
  // Longest spellings first ("alpha" before "a", "preview" before "pre"), each with the name
  // PEP 440 normalises it to.
  constexpr const char* kNormalised[] = {"a", "b", "rc", "rc", "rc", "a", "b", "rc"};
  const int pre = TakeWord(&rest, {"alpha", "beta", "preview", "pre", "rc", "a", "b", "c"}, &n);
  if (pre >= 0) v.pre = absl::StrCat(kNormalised[pre], n);
  if (TakeWord(&rest, {"post", "rev", "r"}, &n) >= 0) {
    v.post = n;
  } else if (rest.size() > 1 && rest.front() == '-' &&
             absl::ascii_isdigit(static_cast<unsigned char>(rest[1]))) {
    rest.remove_prefix(1);  // "1.0-1": an implicit post release
    TakeNumber(&rest, &v.post, /*max_digits=*/9);
  }
  if (TakeWord(&rest, {"dev"}, &n) >= 0) v.dev = n;
  v.vendor = std::string(rest);
  v.prerelease = !v.pre.empty() || !v.vendor.empty() || (v.dev >= 0 && v.post < 0);
}

}  // namespace

bool EngineVersion::AtLeast(int want_major, int want_minor, int want_patch) const {
  const auto have = std::make_tuple(major, minor, patch);
  const auto want = std::make_tuple(want_major, want_minor, want_patch);
  return have > want || (have == want && !prerelease);
}

bool EngineVersion::ReleaseAtLeast(int want_major, int want_minor, int want_patch) const {
  return std::make_tuple(major, minor, patch) >=
         std::make_tuple(want_major, want_minor, want_patch);
}

absl::StatusOr<EngineVersion> ParseEngineVersionOption(absl::string_view kind,
                                                       absl::string_view text) {
  auto version = ParseEngineVersion(text);
  if (!version.ok() || version->prerelease || version->post >= 0 || !version->local.empty() ||
      version->Release() != version->text) {
    return absl::InvalidArgumentError(absl::StrCat(
        kind, " option \"engine_version\" must be a release as MAJOR.MINOR.PATCH (e.g. 0.17.0), ",
        "the one whose gates the group's engines are to pass"));
  }
  return version;
}

EngineVersion GateVersion(const EngineVersion& reported, const EngineVersion* forced) {
  if (forced == nullptr) return reported;
  EngineVersion read = *forced;
  read.text =
      absl::StrCat(reported.text, ", read as ", forced->text, " (the group's engine_version)");
  return read;
}

std::string EngineVersionOverrideHint(const EngineVersion& read) {
  const std::string release = read.prerelease ? read.Release() : std::string("MAJOR.MINOR.PATCH");
  return absl::StrCat("; if this build has what ", read.prerelease ? release : "the release",
                      " ships, create the group with --option engine_version=", release,
                      " (the config's \"engine_version\") to have it read as that release");
}

std::string EngineVersion::Release() const { return absl::StrCat(major, ".", minor, ".", patch); }

std::string EngineVersion::Described() const {
  std::vector<std::string> details;
  if (!pre.empty()) details.push_back(pre);
  if (post >= 0 && prerelease) details.push_back(absl::StrCat("post", post));
  if (dev >= 0) details.push_back(absl::StrCat("dev", dev));
  if (!vendor.empty()) details.push_back(absl::StrCat("vendor suffix '", vendor, "'"));
  if (!local.empty()) details.push_back(absl::StrCat("build ", local));
  const std::string in_brackets =
      details.empty() ? "" : absl::StrCat(" (", absl::StrJoin(details, ", "), ")");
  if (prerelease) return absl::StrCat(text, ", a pre-release of ", Release(), in_brackets);
  if (post >= 0) return absl::StrCat(text, ", a post release of ", Release(), in_brackets);
  if (!local.empty()) return absl::StrCat(text, ", a build of ", Release(), in_brackets);
  return text;
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
  if (!rest.empty() && (rest.front() == 'v' || rest.front() == 'V')) rest.remove_prefix(1);
  if (!TakeNumber(&rest, &v.major) || !absl::ConsumePrefix(&rest, ".") ||
      !TakeNumber(&rest, &v.minor)) {
    return absl::InvalidArgumentError("not a version of the form MAJOR.MINOR[.PATCH]");
  }
  // "0.5.dev3" or "0.5.post1" have no patch number: the suffix follows the minor.
  if (rest.size() > 1 && rest.front() == '.' &&
      absl::ascii_isdigit(static_cast<unsigned char>(rest[1]))) {
    rest.remove_prefix(1);
    if (!TakeNumber(&rest, &v.patch)) {
      return absl::InvalidArgumentError("not a version of the form MAJOR.MINOR[.PATCH]");
    }
    // Release parts past the patch ("0.5.6.1") come after MAJOR.MINOR.PATCH and before the next
    // patch: the gates read three parts, so they are read and dropped.
    int extra = 0;
    while (rest.size() > 1 && rest.front() == '.' &&
           absl::ascii_isdigit(static_cast<unsigned char>(rest[1]))) {
      rest.remove_prefix(1);
      if (!TakeNumber(&rest, &extra)) {
        return absl::InvalidArgumentError("a release part longer than any engine's");
      }
    }
  }
  ReadSuffix(rest, v);
  return v;
}

}  // namespace wsync
