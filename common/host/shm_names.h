#ifndef WSYNC_COMMON_HOST_SHM_NAMES_H_
#define WSYNC_COMMON_HOST_SHM_NAMES_H_

// Names of host mode's shared-memory segments. Every one starts /wsync-<pid>-, <pid> being the
// process that made it (shm_sweep.h removes those whose maker is gone):
//   slots (wsyncd):              /wsync-<pid>-d<device>-<n>-<random>
//   pull sources (the trainer):  /wsync-<pid>-src-<session tag>-<n>
// The session tag is what wsyncd hands a session in its OpenSession reply; wsyncd maps as a pull
// source only a segment named with the asking session's tag, so a session cannot have wsyncd read
// a slot, another session's memory or any other file for it.

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace wsync {

// A fresh slot name for this process.
std::string SlotShmName(int device);

// INVALID_ARGUMENT unless `tag` can be a session tag: 1..32 ASCII letters and digits.
absl::Status CheckSessionTag(absl::string_view tag);

// A fresh pull-source name of this process for the session tagged `tag` (checked by the caller).
std::string SourceShmName(absl::string_view tag);

// Whether `name` is a pull source made for the session tagged `tag`.
bool IsSourceShmNameOf(absl::string_view name, absl::string_view tag);

}  // namespace wsync

#endif  // WSYNC_COMMON_HOST_SHM_NAMES_H_
