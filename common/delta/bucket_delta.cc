#include "common/delta/bucket_delta.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"

namespace wsync {
namespace {

void PutLittle(std::string* out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

size_t VarintSize(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

void PutVarint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

// Whether element i differs between a and b, elements of `width` bytes.
bool Differs(const uint8_t* a, const uint8_t* b, uint64_t i, size_t width) {
  switch (width) {
    case 1:
      return a[i] != b[i];
    case 2: {
      uint16_t x, y;
      std::memcpy(&x, a + 2 * i, 2);
      std::memcpy(&y, b + 2 * i, 2);
      return x != y;
    }
    case 4: {
      uint32_t x, y;
      std::memcpy(&x, a + 4 * i, 4);
      std::memcpy(&y, b + 4 * i, 4);
      return x != y;
    }
    case 8: {
      uint64_t x, y;
      std::memcpy(&x, a + 8 * i, 8);
      std::memcpy(&y, b + 8 * i, 8);
      return x != y;
    }
    default:
      return std::memcmp(a + width * i, b + width * i, width) != 0;
  }
}

uint64_t Load64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

// How many of the `width`-byte lanes of x are not zero (width 1, 2, 4 or 8).
int NonzeroLanes(uint64_t x, size_t width) {
  switch (width) {
    case 1: {
      constexpr uint64_t kLow7 = 0x7F7F7F7F7F7F7F7Full;
      return std::popcount((((x & kLow7) + kLow7) | x) & ~kLow7);
    }
    case 2: {
      constexpr uint64_t kLowBytes = 0x00FF00FF00FF00FFull;
      const uint64_t folded = (x | (x >> 8)) & kLowBytes;  // each lane's OR in its low byte
      return std::popcount((folded + kLowBytes) & ~kLowBytes);
    }
    case 4:
      return static_cast<int>((x & 0xFFFFFFFFull) != 0) + static_cast<int>((x >> 32) != 0);
    default:
      return x != 0 ? 1 : 0;
  }
}

// The elements of n that differ between a and b, eight bytes at a time where the width divides
// eight (an RL step leaves most words equal, and a word that differs is counted lane by lane
// without a branch per element).
uint64_t CountChanged(const uint8_t* a, const uint8_t* b, uint64_t n, size_t width) {
  uint64_t k = 0, i = 0;
  if (width <= 8 && 8 % width == 0) {
    const uint64_t per_word = 8 / width;
    for (; i + per_word <= n; i += per_word) {
      const uint64_t x = Load64(a + i * width) ^ Load64(b + i * width);
      if (x != 0) k += NonzeroLanes(x, width);
    }
  }
  for (; i < n; ++i) k += Differs(a, b, i, width) ? 1 : 0;
  return k;
}

// Calls f(i) for each element i that differs between a and b, in order; equal words are skipped
// eight bytes at a time.
template <typename F>
void ForEachChanged(const uint8_t* a, const uint8_t* b, uint64_t n, size_t width, F f) {
  uint64_t i = 0;
  if (width <= 8 && 8 % width == 0) {
    const uint64_t per_word = 8 / width;
    for (; i + per_word <= n; i += per_word) {
      if (Load64(a + i * width) == Load64(b + i * width)) continue;
      for (uint64_t j = i; j < i + per_word; ++j) {
        if (Differs(a, b, j, width)) f(j);
      }
    }
  }
  for (; i < n; ++i) {
    if (Differs(a, b, i, width)) f(i);
  }
}

// A tensor's element width and count, or why its range is not whole elements.
absl::StatusOr<std::pair<size_t, uint64_t>> Elements(const TensorEntry& t) {
  const size_t width = DTypeSize(t.dtype);
  if (width == 0 || t.length % width != 0) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", t.name, "': ", t.length,
                                                   " bytes are not whole elements of ",
                                                   DTypeName(t.dtype)));
  }
  return std::make_pair(width, t.length / width);
}

// The new bucket's memory changed between the encoder's reads (a trainer still writing the slot):
// no frame can be trusted.
absl::Status ChangedWhileRead(const TensorEntry& t, uint64_t counted, uint64_t found) {
  return absl::FailedPreconditionError(absl::StrCat("tensor '", t.name,
                                                    "' changed while it was encoded: ", counted,
                                                    " changed elements counted, then ", found));
}

absl::Status SpanHolds(const BucketManifest& manifest, size_t size, absl::string_view what) {
  if (manifest.span_bytes() > size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the ", what, " holds ", size, " bytes; the bucket spans ", manifest.span_bytes()));
  }
  return absl::OkStatus();
}

// Reads the frame front to back; every read is bounded by what is left.
class FrameReader {
 public:
  explicit FrameReader(absl::string_view frame) : rest_(frame) {}
  bool Little(int bytes, uint64_t* v) {
    if (rest_.size() < static_cast<size_t>(bytes)) return false;
    *v = 0;
    for (int i = 0; i < bytes; ++i) {
      *v |= static_cast<uint64_t>(static_cast<uint8_t>(rest_[i])) << (8 * i);
    }
    rest_.remove_prefix(bytes);
    return true;
  }
  bool Take(uint64_t n, absl::string_view* out) {
    if (rest_.size() < n) return false;
    *out = rest_.substr(0, n);
    rest_.remove_prefix(n);
    return true;
  }
  size_t left() const { return rest_.size(); }

 private:
  absl::string_view rest_;
};

// A LEB128 varint from the front of `in` (at most 10 bytes, no bits past 64).
bool ReadVarint(absl::string_view* in, uint64_t* v) {
  *v = 0;
  for (int i = 0; i < 10; ++i) {
    if (in->empty()) return false;
    const uint8_t byte = static_cast<uint8_t>(in->front());
    in->remove_prefix(1);
    if (i == 9 && byte > 1) return false;
    *v |= static_cast<uint64_t>(byte & 0x7F) << (7 * i);
    if ((byte & 0x80) == 0) return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<std::string> EncodeBucketDelta(const BucketManifest& manifest,
                                              absl::Span<const uint8_t> base,
                                              absl::Span<const uint8_t> next, DeltaStats* stats,
                                              uint64_t limit) {
  if (absl::Status s = SpanHolds(manifest, base.size(), "base"); !s.ok()) return s;
  if (absl::Status s = SpanHolds(manifest, next.size(), "new bucket"); !s.ok()) return s;
  DeltaStats totals;
  const uint64_t headers = kDeltaMagic.size() + 4 + 17 * manifest.tensors.size();
  // Counted first: the count alone decides between dense and a bitmap, and every position takes
  // at least one byte, so the frame's least size is known before any of it is written, and the
  // positions are listed only where gaps may be the smallest.
  std::vector<uint64_t> counts;
  counts.reserve(manifest.tensors.size());
  uint64_t least = headers;
  for (const TensorEntry& t : manifest.tensors) {
    absl::StatusOr<std::pair<size_t, uint64_t>> elements = Elements(t);
    if (!elements.ok()) return elements.status();
    const auto [width, n] = *elements;
    const uint64_t k = CountChanged(base.data() + t.offset, next.data() + t.offset, n, width);
    counts.push_back(k);
    least += std::min({t.length, (n + 7) / 8 + k * width, k + k * width});
    totals.elements += n;
    totals.changed_elements += k;
  }
  if (least >= limit) {
    if (stats != nullptr) *stats = totals;
    return absl::ResourceExhaustedError(
        absl::StrCat("the delta would take at least ", least, " bytes, the limit is ", limit));
  }
  std::string frame(kDeltaMagic);
  // At most every tensor dense: one allocation, whose pages are touched only as far as written.
  frame.reserve(headers + manifest.span_bytes());
  PutLittle(&frame, manifest.tensors.size(), 4);
  std::vector<uint64_t> changed;
  for (size_t ti = 0; ti < manifest.tensors.size(); ++ti) {
    const TensorEntry& t = manifest.tensors[ti];
    const size_t width = DTypeSize(t.dtype);
    const uint64_t n = t.length / width;
    const uint8_t* before = base.data() + t.offset;
    const uint8_t* after = next.data() + t.offset;
    const uint64_t k = counts[ti];
    const uint64_t values = k * width;
    DeltaForm form = DeltaForm::kDense;
    uint64_t size = t.length;
    if ((n + 7) / 8 + values < size) {
      form = DeltaForm::kBitmap;
      size = (n + 7) / 8 + values;
    }
    changed.clear();
    if (k + values < size) {
      changed.reserve(k);
      uint64_t position_bytes = 0;
      ForEachChanged(before, after, n, width, [&](uint64_t i) {
        position_bytes += VarintSize(changed.empty() ? i : i - changed.back() - 1);
        changed.push_back(i);
      });
      if (changed.size() != k) return ChangedWhileRead(t, k, changed.size());
      if (position_bytes + values < size) {
        form = DeltaForm::kGaps;
        size = position_bytes + values;
      }
    }
    PutLittle(&frame, static_cast<uint8_t>(form), 1);
    PutLittle(&frame, k, 8);
    PutLittle(&frame, size, 8);
    if (form == DeltaForm::kDense) {
      frame.append(reinterpret_cast<const char*>(after), t.length);
    } else {
      if (form == DeltaForm::kBitmap) {
        const size_t at = frame.size();
        frame.append(size, '\0');
        char* bitmap = frame.data() + at;
        char* value = bitmap + (n + 7) / 8;
        uint64_t written = 0;
        const auto put = [&](uint64_t i) {
          // Never past the k values counted, whatever the memory reads now.
          if (++written > k) return;
          bitmap[i / 8] = static_cast<char>(bitmap[i / 8] | (1 << (i % 8)));
          std::memcpy(value, after + i * width, width);
          value += width;
        };
        if (changed.size() == k && k > 0) {
          for (uint64_t i : changed) put(i);  // listed already: no second read
        } else {
          ForEachChanged(before, after, n, width, put);
        }
        if (written != k) return ChangedWhileRead(t, k, written);
      } else {
        for (size_t j = 0; j < changed.size(); ++j) {
          PutVarint(&frame, j == 0 ? changed[0] : changed[j] - changed[j - 1] - 1);
        }
        for (uint64_t i : changed) {
          frame.append(reinterpret_cast<const char*>(after + i * width), width);
        }
      }
    }
  }
  totals.dense_bytes = manifest.span_bytes();
  totals.frame_bytes = frame.size();
  if (stats != nullptr) *stats = totals;
  return frame;
}

absl::Status DecodeBucketDelta(const BucketManifest& manifest, absl::Span<const uint8_t> base,
                               absl::string_view delta, absl::Span<uint8_t> out,
                               DeltaStats* stats) {
  if (absl::Status s = SpanHolds(manifest, base.size(), "base"); !s.ok()) return s;
  if (absl::Status s = SpanHolds(manifest, out.size(), "output"); !s.ok()) return s;
  FrameReader frame(delta);
  absl::string_view magic;
  if (!frame.Take(kDeltaMagic.size(), &magic) || magic != kDeltaMagic) {
    return absl::InvalidArgumentError("not a bucket delta (it does not start with \"WSD1\")");
  }
  uint64_t count = 0;
  if (!frame.Little(4, &count) || count != manifest.tensors.size()) {
    return absl::InvalidArgumentError(absl::StrCat("the delta names ", count,
                                                   " tensor(s); the bucket's manifest has ",
                                                   manifest.tensors.size()));
  }
  DeltaStats totals;
  for (const TensorEntry& t : manifest.tensors) {
    absl::StatusOr<std::pair<size_t, uint64_t>> elements = Elements(t);
    if (!elements.ok()) return elements.status();
    const auto [width, n] = *elements;
    const auto refuse = [&](absl::string_view why) { return RefuseDelta(t, why); };
    uint64_t form = 0, k = 0, size = 0;
    absl::string_view payload;
    if (!frame.Little(1, &form) || !frame.Little(8, &k) || !frame.Little(8, &size)) {
      return refuse("the frame ends in its header");
    }
    if (absl::Status s = CheckDeltaCount(t, k); !s.ok()) return s;
    if (!frame.Take(size, &payload)) {
      return refuse(
          absl::StrCat("a payload of ", size, " bytes where ", frame.left(), " are left"));
    }
    if (absl::Status s = CheckDeltaPayload(t, form, k, size); !s.ok()) return s;
    uint8_t* dst = out.data() + t.offset;
    const uint8_t* src = base.data() + t.offset;
    if (dst != src) std::memmove(dst, src, t.length);
    const uint64_t values = k * width;
    if (form == static_cast<uint64_t>(DeltaForm::kDense)) {
      std::memcpy(dst, payload.data(), t.length);
    } else if (form == static_cast<uint64_t>(DeltaForm::kBitmap)) {
      const uint64_t bitmap_bytes = (n + 7) / 8;
      const uint8_t* bits = reinterpret_cast<const uint8_t*>(payload.data());
      const uint8_t* value = bits + bitmap_bytes;
      uint64_t seen = 0;
      for (uint64_t i = 0; i < bitmap_bytes * 8; ++i) {
        if ((bits[i / 8] & (1 << (i % 8))) == 0) continue;
        if (i >= n) return refuse(absl::StrCat("the bitmap marks element ", i, " of ", n));
        if (seen == k) return refuse(absl::StrCat("the bitmap marks more than ", k, " elements"));
        std::memcpy(dst + i * width, value + seen * width, width);
        ++seen;
      }
      if (seen != k) return refuse(absl::StrCat("the bitmap marks ", seen, " elements, not ", k));
    } else {  // gaps: CheckDeltaPayload let no other form through
      absl::string_view positions = payload.substr(0, size - values);
      const uint8_t* value = reinterpret_cast<const uint8_t*>(payload.data()) + (size - values);
      uint64_t at = 0;
      for (uint64_t j = 0; j < k; ++j) {
        uint64_t gap = 0;
        if (!ReadVarint(&positions, &gap)) return refuse(absl::StrCat("position ", j, " is cut"));
        const uint64_t step = j == 0 ? 0 : at + 1;
        if (gap >= n || step > n - 1 - gap) {
          return refuse(absl::StrCat("position ", j, " lies past element ", n - 1));
        }
        at = step + gap;
        std::memcpy(dst + at * width, value + j * width, width);
      }
      if (!positions.empty()) {
        return refuse(absl::StrCat(positions.size(), " byte(s) after the ", k, " positions"));
      }
    }
    totals.elements += n;
    totals.changed_elements += k;
  }
  if (frame.left() != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("the delta has ", frame.left(), " byte(s) after its last tensor"));
  }
  totals.dense_bytes = manifest.span_bytes();
  totals.frame_bytes = delta.size();
  if (stats != nullptr) *stats = totals;
  return absl::OkStatus();
}

absl::Status RefuseDelta(const TensorEntry& t, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("delta of tensor '", t.name, "': ", why));
}

absl::Status CheckDeltaCount(const TensorEntry& t, uint64_t changed) {
  const uint64_t n = t.length / DTypeSize(t.dtype);
  if (changed > n) return RefuseDelta(t, absl::StrCat(changed, " changed elements of ", n));
  return absl::OkStatus();
}

absl::Status CheckDeltaPayload(const TensorEntry& t, uint64_t form, uint64_t changed,
                               uint64_t payload_bytes) {
  const uint64_t width = DTypeSize(t.dtype), n = t.length / width, values = changed * width;
  if (form == static_cast<uint64_t>(DeltaForm::kDense)) {
    if (payload_bytes != t.length) {
      return RefuseDelta(
          t, absl::StrCat("a dense payload of ", payload_bytes, " bytes for ", t.length));
    }
  } else if (form == static_cast<uint64_t>(DeltaForm::kBitmap)) {
    if (payload_bytes != (n + 7) / 8 + values) {
      return RefuseDelta(
          t, absl::StrCat("a bitmap payload of ", payload_bytes, " bytes; ", n, " elements with ",
                          changed, " changed take ", (n + 7) / 8 + values));
    }
  } else if (form == static_cast<uint64_t>(DeltaForm::kGaps)) {
    if (payload_bytes < values) {
      return RefuseDelta(t, absl::StrCat("a payload of ", payload_bytes, " bytes for ", changed,
                                         " values of ", width, " bytes"));
    }
  } else {
    return RefuseDelta(t, absl::StrCat("form ", form, " (known: 0 dense, 1 bitmap, 2 gaps)"));
  }
  return absl::OkStatus();
}

bool DeltaCoversSpan(const BucketManifest& manifest) {
  uint64_t covered = 0;
  for (const TensorEntry& t : manifest.tensors) covered += t.length;
  return covered == manifest.span_bytes();
}

}  // namespace wsync
