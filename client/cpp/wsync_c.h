#ifndef WSYNC_CLIENT_CPP_WSYNC_C_H_
#define WSYNC_CLIENT_CPP_WSYNC_C_H_

/* C ABI of the wsync client (libwsync_client.so), for Python's ctypes and other languages.
 * Every call returns 0 on success or a google.rpc.Code, and writes a message into err. */

#include <stddef.h>
#include <stdint.h>

#define WSYNC_EXPORT __attribute__((visibility("default")))

#ifdef __cplusplus
extern "C" {
#endif

typedef struct wsync_client wsync_client;
typedef struct wsync_push_stream wsync_push_stream;

typedef struct {
  const char* name;
  const char* dtype; /* torch dtype name: "bfloat16", "float32", ... */
  int32_t ndim;
  const int64_t* shape;
  const void* data; /* host or CUDA device memory */
  uint64_t nbytes;
} wsync_tensor;

typedef void (*wsync_progress_fn)(void* user, uint64_t buckets_done, uint64_t buckets_total,
                                  uint64_t bytes_done, uint64_t bytes_total, double seconds);

WSYNC_EXPORT const char* wsync_version(void);
WSYNC_EXPORT int wsync_connect(const char* target, double timeout_s, wsync_client** out, char* err,
                               size_t err_len);
WSYNC_EXPORT void wsync_close(wsync_client* client);
WSYNC_EXPORT int wsync_open_session(wsync_client* client, int32_t device, const char* client_name,
                                    char* err, size_t err_len);
WSYNC_EXPORT int wsync_close_session(wsync_client* client, char* err, size_t err_len);
/* Pull mode: wsyncd closes its mappings of this process's memory (they otherwise last the
 * session), so that memory may be freed; *closed gets how many allocations were mapped. */
WSYNC_EXPORT int wsync_release_sources(wsync_client* client, uint32_t* closed, char* err,
                                       size_t err_len);
/* A group of this session's own, for engines the trainer started: group_json is a "groups" entry
 * of wsyncd's config file ({"name", "kind", "engines": [{"url", "ranks"}], ...}). Declaring it
 * again as it is does nothing; with other engines or options it forms anew, between updates. It
 * ends with the session. *formed (may be NULL) gets 1 when it formed now. */
WSYNC_EXPORT int wsync_declare_group(wsync_client* client, const char* group_json, int* formed,
                                     char* err, size_t err_len);
/* Ends a group this session declared. */
WSYNC_EXPORT int wsync_forget_group(wsync_client* client, const char* name, char* err,
                                    size_t err_len);
WSYNC_EXPORT uint64_t wsync_slot_bytes(const wsync_client* client);
/* On success *result_json holds {"update_id", "buckets", "bytes", "seconds", "engines": [...],
 * "bucket_rules": the group's rules the buckets followed, e.g. "one dtype per bucket" or "none",
 * ...}; free it with wsync_free_string. Pushes plan their buckets under the group's rules. */
WSYNC_EXPORT int wsync_push(wsync_client* client, const char* group, const char* version,
                            const wsync_tensor* tensors, size_t count, wsync_progress_fn progress,
                            void* user, char** result_json, char* err, size_t err_len);
/* A push fed in pieces, so the caller can free (or produce) tensors as buckets go out.
 * cuda_stream: the cudaStream_t the tensors were produced on (copies run on it), or NULL.
 * wsync_push_add: tensors must stay valid until *released (tensors counted from the first add
 * whose bytes are in a slot) covers them. Commit and abort free the stream. */
WSYNC_EXPORT int wsync_push_begin(wsync_client* client, const char* group, const char* version,
                                  void* cuda_stream, wsync_progress_fn progress, void* user,
                                  wsync_push_stream** out, char* err, size_t err_len);
/* wsync_push_begin with flags: WSYNC_PUSH_PULL has wsyncd copy the tensors out of the caller's
 * memory itself (docs/PULL_MODE.md); tensors are then released once wsyncd has read them. */
#define WSYNC_PUSH_PULL 1u
/* Leave push or pull to the group: wsyncd names the mode its transport is fed fastest by when the
 * update starts (what Python's push(pull=None) does); WSYNC_PUSH_PULL is then ignored. */
#define WSYNC_PUSH_GROUP_DEFAULT 2u
WSYNC_EXPORT int wsync_push_begin_flags(wsync_client* client, const char* group,
                                        const char* version, void* cuda_stream, uint32_t flags,
                                        wsync_progress_fn progress, void* user,
                                        wsync_push_stream** out, char* err, size_t err_len);
/* What a push may set beyond wsync_push_begin_flags; zero-initialise it, then set fields. */
typedef struct {
  void* cuda_stream; /* cudaStream_t the tensors were produced on, or NULL */
  uint32_t flags;    /* WSYNC_PUSH_PULL, WSYNC_PUSH_GROUP_DEFAULT */
  /* Pull mode: plan buckets up to this many bytes (0: a slot's). A bucket past a slot must lie in
   * one exportable allocation exactly as sent (a flat parameter buffer), read there in place. */
  uint64_t pull_bucket_bytes;
  /* A colocated group fed from several GPUs: this trainer rank's place among them, which wsyncd
   * checks; -1 (or any negative value): not sent. */
  int32_t tp_rank;
} wsync_push_options;
WSYNC_EXPORT int wsync_push_begin_options(wsync_client* client, const char* group,
                                          const char* version, const wsync_push_options* options,
                                          wsync_progress_fn progress, void* user,
                                          wsync_push_stream** out, char* err, size_t err_len);
WSYNC_EXPORT int wsync_push_add(wsync_push_stream* push, const wsync_tensor* tensors, size_t count,
                                uint64_t* released, char* err, size_t err_len);
/* wsync_push_add with one flags word per tensor: WSYNC_TENSOR_TEMPORARY marks memory the caller
 * made for this push and frees after it (a gathered DTensor, a contiguous copy); in pull mode its
 * bucket is copied by the client instead of mapped by wsyncd. */
#define WSYNC_TENSOR_TEMPORARY 1u
WSYNC_EXPORT int wsync_push_add_flags(wsync_push_stream* push, const wsync_tensor* tensors,
                                      const uint32_t* flags, size_t count, uint64_t* released,
                                      char* err, size_t err_len);
WSYNC_EXPORT int wsync_push_commit(wsync_push_stream* push, char** result_json, char* err,
                                   size_t err_len);
WSYNC_EXPORT void wsync_push_abort(wsync_push_stream* push, const char* reason);
WSYNC_EXPORT void wsync_free_string(char* s);

#ifdef __cplusplus
}
#endif

#endif /* WSYNC_CLIENT_CPP_WSYNC_C_H_ */
