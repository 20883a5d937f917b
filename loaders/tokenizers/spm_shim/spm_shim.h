// C ABI of libqeval_spm_shim.so, the only code that links libsentencepiece.
//
// Why a shim: libsentencepiece.so exports the protobuf-lite it bundles; in a process that also
// loads LibTorch (whose libonnx_proto pulls in libprotobuf.so.32) the two protobufs interpose on
// each other and the process crashes at start-up. The shim is loaded with
// dlopen(RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND): sentencepiece binds to its own protobuf first
// and never enters the global symbol scope (sentencepiece_tokenizer.cpp).
// Nothing crosses this boundary but plain C types, and no memory is freed on the other side:
// results are copied into caller buffers.
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define QEVAL_SPM_ABI_VERSION 1

typedef struct qeval_spm qeval_spm;

int qeval_spm_abi_version(void);

// Loads a .model file. On failure returns NULL and writes a NUL-terminated message into err.
qeval_spm* qeval_spm_load(const char* path, char* err, size_t err_size);
void qeval_spm_free(qeval_spm* spm);

// Encodes text[0, len) to ids (no BOS/EOS). Writes min(count, capacity) ids and returns count,
// so a caller whose buffer was too small calls again; returns -1 with a message on error.
long qeval_spm_encode(const qeval_spm* spm, const char* text, size_t len, int32_t* ids, size_t capacity,
                      char* err, size_t err_size);

// Decodes ids to bytes, with the same buffer protocol as qeval_spm_encode.
long qeval_spm_decode(const qeval_spm* spm, const int32_t* ids, size_t n, char* out, size_t capacity, char* err,
                      size_t err_size);

// Vocabulary size and special ids (-1 when the model has none).
int32_t qeval_spm_piece_size(const qeval_spm* spm);
int32_t qeval_spm_bos_id(const qeval_spm* spm);
int32_t qeval_spm_eos_id(const qeval_spm* spm);
int32_t qeval_spm_unk_id(const qeval_spm* spm);

#ifdef __cplusplus
}
#endif
